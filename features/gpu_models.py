"""The GPU models gpuplan knows: one datasheet, the names a config may use, the speed per kind.

The datasheet is NVIDIA's dense (no sparsity) figures; the estimators read it through
``features.job_costs`` (memory, tensor-core peaks, HBM bandwidth). A pool's ``gpu_model``
and a job's ``gpu_models`` name a model by its schema name (``h100-80gb``) or a short name
(:data:`ALIASES`: ``h100``; ``a100`` is the 40 GB card). No pandas here: a submit that names
models reads this table without loading the estimators.

:func:`speed` is how fast a kind of job runs on a model, for the hours no estimator forecasts
per model (batch inference, and specs that state their ``hours``): a training step is bound
by tensor-core throughput (the BF16 peak; Kaplan et al. 2020's 6N FLOPs per token), batch
inference by HBM bandwidth (decoding reads every weight once per token: Pope et al. 2022),
quantization by HBM bandwidth too (layer-wise passes stream weights and calibration
activations, the assumption ``features.job_costs.quantization_gpu_hours`` makes).
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.scenario import JobKind


@dataclass(frozen=True, slots=True)
class GpuSpec:
    memory_gb: float
    peak_bf16_tflops: float  # dense tensor-core peak
    peak_fp8_tflops: float | None  # None: no FP8 tensor cores, FP8 runs at the BF16 rate
    hbm_tb_per_s: float


GPU_SPECS: dict[str, GpuSpec] = {
    "a100-40gb": GpuSpec(40.0, 312.0, None, 1.555),
    "a100-80gb": GpuSpec(80.0, 312.0, None, 2.039),
    "h100-80gb": GpuSpec(80.0, 989.0, 1979.0, 3.35),  # SXM
    "h200-141gb": GpuSpec(141.0, 989.0, 1979.0, 4.8),
    "l40s-48gb": GpuSpec(48.0, 362.0, 733.0, 0.864),
}

#: Short names a config or a job spec may use for a model of :data:`GPU_SPECS`.
ALIASES: dict[str, str] = {
    "a100": "a100-40gb",
    "a100-40g": "a100-40gb",
    "a100-80g": "a100-80gb",
    "h100": "h100-80gb",
    "h200": "h200-141gb",
    "l40s": "l40s-48gb",
}

#: The datasheet figure a kind's speed follows (see the module's docstring).
SPEED_FIGURE: dict[JobKind, str] = {
    JobKind.TRAINING: "peak_bf16_tflops",
    JobKind.BATCH_INFERENCE: "hbm_tb_per_s",
    JobKind.QUANTIZATION: "hbm_tb_per_s",
}


def known_model(name: str) -> str | None:
    """The datasheet name of the model ``name`` means (case aside), or None when gpuplan does
    not know it."""
    key = name.strip().lower()
    if key in GPU_SPECS:
        return key
    return ALIASES.get(key)


def model_names() -> list[str]:
    """Every name a spec may give a model, the datasheet's first."""
    return [*GPU_SPECS, *ALIASES]


def speed(kind: JobKind, model: str) -> float:
    """How fast ``kind`` runs on the datasheet model ``model`` (a figure in its own unit; only
    the ratio of two models means anything)."""
    value = getattr(GPU_SPECS[model], SPEED_FIGURE[kind])
    return float(value)
