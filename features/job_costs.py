"""The analytic cost model of batch jobs: published formulas, one place.

The history generator (training_data/history.py) draws jobs whose costs follow these
formulas plus noise; the training estimator derives two inputs from them (the
analytic GPU count and hours); the analytic-FLOPs baseline is these formulas alone.
Every function takes a validated feature frame (features/job_features.py) and works on
whole columns.

Sources of the constants:

- Compute per token: forward ~2N, training ~6N for full fine-tuning (Kaplan et al.
  2020, "Scaling Laws for Neural Language Models", sec. 2.1), plus the attention term
  2 * n_layer * n_ctx * d_model per forward token (same table). LoRA skips the weight
  gradients of the frozen base: ~4N (Hu et al. 2021 train only the adapters; the
  backward pass still computes activation gradients through every layer).
- Gradient checkpointing recomputes one forward pass: +2N (Chen et al. 2016).
- DPO runs the policy on chosen and rejected sequences plus a frozen reference forward:
  8N/6N ~ 1.33x SFT per token (Rafailov et al. 2023).
- PPO (RLHF) and GRPO (RLVR) are dominated by generation: prompts x samples x new
  tokens decoded at memory-bandwidth-bound speed (Pope et al. 2022, "Efficiently Scaling
  Transformer Inference"; Kwon et al. 2023, vLLM), then an update over the rollouts with
  reference log-probs; PPO adds a reward-model forward and a critic of the same size
  (Ouyang et al. 2022; Shao et al. 2024 drop the critic in GRPO).
- Memory: 16 bytes/param for full fine-tuning with Adam in mixed precision (2 weights +
  2 gradients + 12 optimizer: fp32 master, momentum, variance), partitioned by ZeRO
  stage 1/2/3 across data-parallel GPUs (Rajbhandari et al. 2020, "ZeRO", sec. 3 and 5);
  8-bit Adam keeps 2 bytes of state (Dettmers et al. 2022); LoRA keeps the base at
  2 bytes/param, QLoRA at ~0.55 bytes/param (4-bit NormalFloat with double quantization,
  Dettmers et al. 2023); activations ~34 * s * b * h bytes per layer with flash
  attention, 2 * s * b * h per layer with full checkpointing (Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", sec. 4).
- GPU peaks are NVIDIA's dense (no sparsity) datasheet figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from contract.errors import InputError
from features.gpu_models import GPU_SPECS as GPU_SPECS  # noqa: PLC0414  # re-exported: the datasheet's readers keep one name
from features.job_features import describe_rows, is_lora, technique_of

FloatArray = npt.NDArray[np.float64]

SECONDS_PER_HOUR = 3600.0
# Framework buffers, the CUDA context and fragmentation leave about 90% of HBM usable.
USABLE_MEMORY_FRACTION = 0.9
MAX_GPUS_LOG2 = 12  # 4,096 GPUs: the largest job the cost model sizes
# A textbook model-FLOPs utilisation: the analytic baseline's single guess (Chowdhery
# et al. 2022 report 46% for PaLM pre-training; fine-tuning runs sit lower).
NOMINAL_MFU = 0.4
# Concurrent sequences per rollout engine: decode reads the weights once per step for
# the whole batch, so throughput per GPU grows with it until compute-bound.
DECODE_BATCH_SEQUENCES = 64.0
DECODE_BANDWIDTH_EFFICIENCY = 0.6


# Optimizer state bytes per trained parameter in mixed precision (fp32 master copy
# included): Adam 4+4+4 (ZeRO paper's K=12), 8-bit Adam 4+1+1, Adafactor ~4 (factored
# second moment, no momentum).
OPTIMIZER_BYTES = {"adamw": 12.0, "adamw_8bit": 6.0, "adafactor": 4.0}
QLORA_BYTES_PER_PARAM = 0.55
ACTIVATION_BYTES_PER_TOKEN_WIDTH_LAYER = 34.0
CHECKPOINTED_BYTES_PER_TOKEN_WIDTH_LAYER = 2.0
# LoRA on q, k, v, o: two r x h matrices each, per layer.
LORA_MATRICES_PER_LAYER = 4


def _column(frame: pd.DataFrame, name: str) -> FloatArray:
    return frame[name].to_numpy(dtype=float)


def _technique(frame: pd.DataFrame) -> np.ndarray:
    return technique_of(frame).to_numpy()


def _is_lora(frame: pd.DataFrame) -> np.ndarray:
    return is_lora(frame).to_numpy(dtype=bool)


def _gpu_attr(frame: pd.DataFrame, attr: str) -> FloatArray:
    specs = frame["gpu_type"].map(lambda name: getattr(GPU_SPECS[str(name)], attr) or 0.0)
    return specs.to_numpy(dtype=float)


def samples_per_epoch(frame: pd.DataFrame) -> FloatArray:
    """Dataset samples (prompts, for RL) in one pass."""
    return _column(frame, "dataset_tokens_million") * 1e6 / _column(frame, "mean_sample_tokens")


def padding_factor(frame: pd.DataFrame) -> FloatArray:
    """Tokens computed per dataset token: 1 with packing; without it, samples are padded
    to the longest in their micro-batch, which we take as halfway to seq_len (assumption)."""
    ratio = _column(frame, "seq_len_tokens") / _column(frame, "mean_sample_tokens")
    return np.where(frame["sequence_packing"].to_numpy(dtype=bool), 1.0, (1.0 + ratio) / 2.0)


def forward_flops_per_token(frame: pd.DataFrame, params: FloatArray) -> FloatArray:
    """2N plus the attention term 2 * layers * context * width (Kaplan et al. 2020)."""
    context = np.minimum(_column(frame, "mean_sample_tokens"), _column(frame, "seq_len_tokens"))
    attention = 2.0 * _column(frame, "num_layers") * context * _column(frame, "hidden_size")
    return 2.0 * params + attention


def update_passes(frame: pd.DataFrame) -> FloatArray:
    """Forward-pass equivalents per trained token: 3 full (6N), 2 LoRA (4N), +1 with
    checkpointing, +1 for a frozen reference forward (DPO, RL)."""
    passes = np.where(_is_lora(frame), 2.0, 3.0)
    passes = passes + frame["gradient_checkpointing"].to_numpy(dtype=bool)
    technique = _technique(frame)
    uses_reference = np.isin(technique, ["dpo", "rlhf", "rlvr"])
    # PPO/GRPO also recompute the old policy's log-probs before the update.
    recomputes_old_policy = np.isin(technique, ["rlhf", "rlvr"])
    return np.asarray(passes + uses_reference + recomputes_old_policy, dtype=float)


def rollout_tokens(frame: pd.DataFrame) -> FloatArray:
    """Generated tokens over the whole job (0 for non-RL jobs)."""
    return (
        samples_per_epoch(frame)
        * _column(frame, "epochs")
        * _column(frame, "rollout_samples_per_prompt")
        * _column(frame, "rollout_new_tokens")
    )


def update_flops(frame: pd.DataFrame) -> FloatArray:
    """Model FLOPs of the gradient updates (and, for PPO, the reward model and critic)."""
    params = _column(frame, "params_billion") * 1e9
    per_token = update_passes(frame) * forward_flops_per_token(frame, params)
    technique = _technique(frame)
    is_rl = np.isin(technique, ["rlhf", "rlvr"])
    epochs = _column(frame, "epochs")
    supervised_tokens = _column(frame, "dataset_tokens_million") * 1e6 * epochs * padding_factor(frame)
    # RL trains on every rollout: prompt plus response.
    rl_tokens = (
        samples_per_epoch(frame)
        * epochs
        * _column(frame, "rollout_samples_per_prompt")
        * (_column(frame, "mean_sample_tokens") + _column(frame, "rollout_new_tokens"))
    )
    tokens = np.where(is_rl, rl_tokens, supervised_tokens)
    # PPO: reward-model forward (2N_rm) plus a trained critic of the same size (6N_rm).
    reward_params = _column(frame, "reward_model_params_billion") * 1e9
    ppo_extra = np.where(technique == "rlhf", 8.0 * reward_params, 0.0)
    return tokens * (per_token + ppo_extra)


def decode_tokens_per_gpu_second(frame: pd.DataFrame) -> FloatArray:
    """Rollout throughput of one GPU: each decode step reads the bf16 weights once for a
    batch of sequences (memory-bound), capped by half the compute peak."""
    params = _column(frame, "params_billion") * 1e9
    bandwidth = _gpu_attr(frame, "hbm_tb_per_s") * 1e12
    memory_bound = DECODE_BATCH_SEQUENCES * DECODE_BANDWIDTH_EFFICIENCY * bandwidth / (2.0 * params)
    compute_bound = 0.5 * _gpu_attr(frame, "peak_bf16_tflops") * 1e12 / (2.0 * params)
    return np.minimum(memory_bound, compute_bound)


def peak_flops_per_gpu(frame: pd.DataFrame) -> FloatArray:
    """The tensor-core peak at the job's precision (TF32 for fp32: half of BF16)."""
    bf16 = _gpu_attr(frame, "peak_bf16_tflops") * 1e12
    fp8 = _gpu_attr(frame, "peak_fp8_tflops") * 1e12
    precision = frame["precision"].astype(str).to_numpy()
    return np.where(
        precision == "fp8",
        np.where(fp8 > 0, fp8, bf16),
        np.where(precision == "fp32", bf16 / 2.0, bf16),
    )


def activation_bytes(frame: pd.DataFrame) -> FloatArray:
    """Activations one GPU keeps for its micro-batch (Korthikanti et al. 2022): 34 sbh
    bytes per layer, or 2 sbh per layer plus one full layer with checkpointing."""
    tokens_width = (
        _column(frame, "micro_batch_size") * _column(frame, "seq_len_tokens") * _column(frame, "hidden_size")
    )
    layers = _column(frame, "num_layers")
    checkpointing = frame["gradient_checkpointing"].to_numpy(dtype=bool)
    per_token_width = np.where(
        checkpointing,
        CHECKPOINTED_BYTES_PER_TOKEN_WIDTH_LAYER * layers + ACTIVATION_BYTES_PER_TOKEN_WIDTH_LAYER,
        ACTIVATION_BYTES_PER_TOKEN_WIDTH_LAYER * layers,
    )
    return tokens_width * per_token_width


@dataclass(frozen=True, slots=True)
class MemoryTerms:
    """Bytes one job holds, before any split across GPUs (arrays, one entry per job)."""

    weights: FloatArray  # trained weights plus the frozen base (LoRA)
    grads: FloatArray
    optimizer: FloatArray
    frozen: FloatArray  # reference copy, PPO's reward model and critic
    activations: FloatArray  # per GPU: data parallelism never splits them
    stage: npt.NDArray[np.int64]  # declared ZeRO stage, 0 for none

    @property
    def states(self) -> FloatArray:
        return np.asarray(self.weights + self.grads + self.optimizer + self.frozen, dtype=float)

    def declared_states_per_gpu(self, gpus: FloatArray) -> FloatArray:
        """States per GPU with the declared ZeRO stage: stage 1 splits the optimizer,
        2 also the gradients, 3 also the weights."""
        stage = self.stage
        return np.asarray(
            np.where(stage >= 3, self.weights / gpus, self.weights)
            + np.where(stage >= 2, self.grads / gpus, self.grads)
            + np.where(stage >= 1, self.optimizer / gpus, self.optimizer)
            + self.frozen,
            dtype=float,
        )


def memory_terms(frame: pd.DataFrame) -> MemoryTerms:
    """Weights, gradients, optimizer states, frozen companions and activations in bytes."""
    params = _column(frame, "params_billion") * 1e9
    lora = _is_lora(frame)
    fp32 = frame["precision"].astype(str).to_numpy() == "fp32"
    weight_bytes = np.where(fp32, 4.0, 2.0)
    base_4bit = frame["base_4bit"].to_numpy(dtype=bool)
    optimizer = frame["optimizer"].astype(str).map(OPTIMIZER_BYTES).to_numpy(dtype=float)
    # In fp32 there is no separate master copy.
    optimizer = np.where(fp32, optimizer - 4.0, optimizer)

    adapter_params = (
        2.0
        * LORA_MATRICES_PER_LAYER
        * _column(frame, "lora_rank")
        * _column(frame, "hidden_size")
        * _column(frame, "num_layers")
    )
    trained = np.where(lora, adapter_params, params)
    base = np.where(lora, np.where(base_4bit, QLORA_BYTES_PER_PARAM, 2.0) * params, 0.0)

    # Frozen companions: a reference copy (full fine-tuning only; LoRA disables the
    # adapters instead), PPO's reward model and critic.
    technique = _technique(frame)
    reference = np.where(np.isin(technique, ["dpo", "rlhf", "rlvr"]) & ~lora, 2.0 * params, 0.0)
    reward = _column(frame, "reward_model_params_billion") * 1e9
    ppo = np.where(technique == "rlhf", reward * (2.0 + 2.0 + weight_bytes + optimizer), 0.0)

    stage = frame["sharding"].astype(str).to_numpy()
    return MemoryTerms(
        weights=np.asarray(base + trained * weight_bytes, dtype=float),
        grads=np.asarray(trained * weight_bytes, dtype=float),
        optimizer=np.asarray(trained * optimizer, dtype=float),
        frozen=np.asarray(reference + ppo, dtype=float),
        activations=activation_bytes(frame),
        stage=np.select([stage == "zero1", stage == "zero2", stage == "zero3"], [1, 2, 3], default=0),
    )


def usable_memory_gb(frame: pd.DataFrame) -> FloatArray:
    return _column(frame, "gpu_memory_gb") * USABLE_MEMORY_FRACTION


def _per_gpu_bytes(terms: MemoryTerms, usable_bytes: FloatArray, gpus: FloatArray) -> FloatArray:
    # A job whose replicated states do not fit on one GPU shards everything.
    beyond = terms.states + terms.activations > usable_bytes
    states = np.where(beyond, terms.states / gpus, terms.declared_states_per_gpu(gpus))
    return np.asarray(states + terms.activations, dtype=float)


def memory_per_gpu_gb(frame: pd.DataFrame, gpus: FloatArray) -> FloatArray:
    """Peak memory of one GPU when the job runs on ``gpus`` GPUs.

    States are split by the ZeRO stage: stage 1 the optimizer, 2 also the gradients, 3
    also the weights. A job whose replicated states do not fit on one GPU is taken to
    shard everything (ZeRO-3, FSDP or tensor parallelism), the only way it can run.
    """
    return _per_gpu_bytes(memory_terms(frame), usable_memory_gb(frame) * 1e9, gpus) / 1e9


def min_gpus_for_memory(frame: pd.DataFrame) -> FloatArray:
    """The smallest power-of-two GPU count whose per-GPU memory fits (capped at 4,096)."""
    terms = memory_terms(frame)
    usable_bytes = usable_memory_gb(frame) * 1e9
    result = np.full(len(frame), float(2**MAX_GPUS_LOG2))
    for exponent in range(MAX_GPUS_LOG2, -1, -1):
        gpus = np.full(len(frame), float(2**exponent))
        result = np.where(_per_gpu_bytes(terms, usable_bytes, gpus) <= usable_bytes, gpus, result)
    return result


def fits_as_declared(frame: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """Whether each job fits on some GPU count with the ZeRO stage its spec declares."""
    terms = memory_terms(frame)
    most = np.full(len(frame), float(2**MAX_GPUS_LOG2))
    per_gpu = terms.declared_states_per_gpu(most) + terms.activations
    return np.asarray(per_gpu <= usable_memory_gb(frame) * 1e9, dtype=bool)


def fits_in_memory(frame: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """Whether each job fits on some GPU count up to 4,096 (memory only falls with more GPUs)."""
    most = np.full(len(frame), float(2**MAX_GPUS_LOG2))
    return np.asarray(memory_per_gpu_gb(frame, most) <= usable_memory_gb(frame), dtype=bool)


def _largest_fitting_micro_batch(spec: pd.DataFrame) -> int | None:
    """The largest micro-batch (at most the spec's) with which the one-row ``spec`` fits."""
    size = int(spec["micro_batch_size"].iloc[0])
    while size >= 1:
        if fits_in_memory(spec.assign(micro_batch_size=float(size)))[0]:
            return size
        size = size // 2 if size > 1 else 0
    return None


def _on_gpus(changed: pd.DataFrame) -> str:
    """Where a one-row spec that fits runs: its GPU count, and the sharding it needs
    when the declared ZeRO stage cannot hold its states there."""
    gpus = min_gpus_for_memory(changed)
    terms = memory_terms(changed)
    declared = terms.declared_states_per_gpu(gpus) + terms.activations
    shard = "" if declared[0] <= usable_memory_gb(changed)[0] * 1e9 else " with sharding: zero3"
    return f"{shard} on {int(gpus[0]):,} GPUs"


def _what_would_fit(spec: pd.DataFrame) -> list[str]:
    """Changes to a one-row spec, each on its own, that make the job fit."""
    options = []
    size = _largest_fitting_micro_batch(spec)
    if size is not None:
        options.append(f"micro_batch_size: {size}{_on_gpus(spec.assign(micro_batch_size=float(size)))}")
    if not bool(spec["gradient_checkpointing"].iloc[0]):
        checkpointed = spec.assign(gradient_checkpointing=True)
        size = _largest_fitting_micro_batch(checkpointed)
        if size is not None:
            smaller = checkpointed.assign(micro_batch_size=float(size))
            batch = "" if size == int(spec["micro_batch_size"].iloc[0]) else f", micro_batch_size: {size}"
            options.append(f"gradient_checkpointing: true{batch}{_on_gpus(smaller)}")
    biggest = max(GPU_SPECS, key=lambda name: GPU_SPECS[name].memory_gb)
    if float(spec["gpu_memory_gb"].iloc[0]) < GPU_SPECS[biggest].memory_gb:
        larger = spec.assign(gpu_type=biggest, gpu_memory_gb=GPU_SPECS[biggest].memory_gb)
        if fits_in_memory(larger)[0]:
            options.append(f"gpu_type: {biggest}{_on_gpus(larger)}")
    return options


def memory_refusal(spec: pd.DataFrame, *, source: str | None = None, where: str = "") -> InputError:
    """Why the one-row ``spec`` cannot run, and what would fit, as an InputError.

    ``where`` names the offending rows when the spec came from a larger frame.
    """
    terms = memory_terms(spec)
    most = float(2**MAX_GPUS_LOG2)
    usable = float(usable_memory_gb(spec)[0])
    sharding = str(spec["sharding"].iloc[0])
    declared = float(terms.declared_states_per_gpu(np.array([most]))[0]) / 1e9
    activations = float(terms.activations[0]) / 1e9
    micro_batch = int(spec["micro_batch_size"].iloc[0])
    checkpointing = bool(spec["gradient_checkpointing"].iloc[0])
    sequences = f"{micro_batch} sequence{'s' if micro_batch > 1 else ''}"
    why = (
        f"With sharding {sharding}, each GPU holds {declared:,.1f} GB of weights, gradients, "
        f"optimizer states and frozen models even on {int(most):,} GPUs, plus "
        f"{activations:,.1f} GB of activations for {sequences} x "
        f"{int(spec['seq_len_tokens'].iloc[0]):,} tokens {'with' if checkpointing else 'without'} "
        f"gradient checkpointing (data parallelism does not split activations); sharding every "
        f"state across {int(most):,} GPUs still leaves "
        f"{float(memory_per_gpu_gb(spec, np.array([most]))[0]):,.1f} GB per GPU."
    )
    options = _what_would_fit(spec)
    fix = (
        "Would fit: " + "; or ".join(options) + "."
        if options
        else "No smaller micro-batch, gradient checkpointing or larger GPU fits: the sequences "
        "must be shorter (seq_len_tokens) or split across GPUs (sequence parallelism)."
    )
    memory_gb = float(spec["gpu_memory_gb"].iloc[0])
    fits = f"for the job to fit in GPU memory ({usable:,.1f} GB usable of {memory_gb:g} GB per GPU)"
    # Name the first knob the submitter can still turn.
    if micro_batch > 1:
        field, expected, got = "micro_batch_size", f"small enough {fits}", micro_batch
    elif not checkpointing:
        field, expected, got = "gradient_checkpointing", f"true {fits}", False
    else:
        field, expected, got = "seq_len_tokens", f"short enough {fits}", int(spec["seq_len_tokens"].iloc[0])
    return InputError(field, expected, got, source=source, hint=f"{where}{why} {fix}")


def require_fits_in_memory(frame: pd.DataFrame, *, source: str | None = None) -> None:
    """Refuse a job that fits on no GPU count: forecasting it would invent a cluster."""
    fits = fits_in_memory(frame)
    if not fits.all():
        first = int(np.flatnonzero(~fits)[0])
        rows = [f"row {label}" for label in frame.index[~fits]]
        where = f"Broken at {describe_rows(rows)}. " if len(frame) > 1 else ""
        raise memory_refusal(frame.iloc[[first]], source=source, where=where)


def scaling_efficiency(gpus: FloatArray) -> FloatArray:
    """Throughput per GPU falls a little with each doubling (communication; assumption)."""
    return 1.0 / (1.0 + 0.04 * np.log2(gpus))


def compute_hours(frame: pd.DataFrame, gpus: FloatArray, mfu: FloatArray | float) -> FloatArray:
    """Wall-clock hours of updates plus rollouts on ``gpus`` GPUs at utilisation ``mfu``."""
    throughput = gpus * peak_flops_per_gpu(frame) * mfu * scaling_efficiency(gpus)
    update_seconds = update_flops(frame) / throughput
    rollout_seconds = rollout_tokens(frame) / (gpus * decode_tokens_per_gpu_second(frame))
    return (update_seconds + rollout_seconds) / SECONDS_PER_HOUR


def analytic_estimate(frame: pd.DataFrame) -> tuple[FloatArray, FloatArray]:
    """The analytic-FLOPs answer alone: (GPUs from memory, hours at the nominal MFU)."""
    gpus = min_gpus_for_memory(frame)
    return gpus, compute_hours(frame, gpus, NOMINAL_MFU)


# --- quantization -----------------------------------------------------------------

# Reference calibration sets: GPTQ uses 128 random 2048-token C4 segments (Frantar et
# al. 2022, sec. 5); AWQ 128 samples of 512 tokens from the Pile (Lin et al. 2023, sec. 5).
REFERENCE_CALIBRATION_TOKENS = {"gptq": 128.0 * 2048.0, "awq": 128.0 * 512.0}
# GPTQ: ~4 GPU-hours for OPT-175B / BLOOM-176B on one A100-80GB (Frantar et al. 2022).
GPTQ_HOURS_PER_BILLION = 4.0 / 175.0
# AWQ: ~10-15 min at 7B, ~1 h at 70B on one A100 (Lin et al. 2023; AutoAWQ reports).
AWQ_HOURS_PER_BILLION = 0.0125
# Loading fp16 weights and writing the quantized ones (~2.55 bytes/param) at ~0.5 GB/s
# of storage, after a fixed start-up of ~5 minutes (process, tokenizer, calibration set).
QUANT_FIXED_HOURS = 0.08
QUANT_IO_GB_PER_S = 0.5
REFERENCE_GPU = "a100-80gb"


def quantization_gpus(frame: pd.DataFrame) -> FloatArray:
    """GPTQ and AWQ quantize one layer at a time on one GPU; bitsandbytes quantizes while
    loading, so the 4-bit model must fit on the GPUs (power of two)."""
    params = _column(frame, "params_billion")
    usable = _gpu_attr(frame, "memory_gb") * USABLE_MEMORY_FRACTION
    needed = np.maximum(1.0, QLORA_BYTES_PER_PARAM * params / usable)
    by_memory = 2.0 ** np.ceil(np.log2(needed))
    layer_wise = frame["algorithm"].astype(str).isin(["gptq", "awq"]).to_numpy()
    return np.where(layer_wise, 1.0, by_memory)


def quantization_gpu_hours(frame: pd.DataFrame) -> FloatArray:
    """Noise-free GPU-hours: fixed load-and-save plus params x calibration tokens.

    Layer-wise quantization streams each layer's weights and calibration activations,
    so we scale its speed with HBM bandwidth relative to the A100-80GB (assumption).
    """
    params = _column(frame, "params_billion")
    algorithm = frame["algorithm"].astype(str).to_numpy()
    calibration = _column(frame, "calibration_samples") * _column(frame, "calibration_seq_len_tokens")
    speed = _gpu_attr(frame, "hbm_tb_per_s") / GPU_SPECS[REFERENCE_GPU].hbm_tb_per_s
    per_billion = np.select(
        [algorithm == "gptq", algorithm == "awq"],
        [
            GPTQ_HOURS_PER_BILLION * calibration / REFERENCE_CALIBRATION_TOKENS["gptq"],
            AWQ_HOURS_PER_BILLION * calibration / REFERENCE_CALIBRATION_TOKENS["awq"],
        ],
        default=0.0,  # bitsandbytes: no offline pass, it quantizes at load
    )
    io_hours = 2.55 * params / QUANT_IO_GB_PER_S / SECONDS_PER_HOUR
    wall_hours = QUANT_FIXED_HOURS + io_hours + per_billion * params / speed
    return wall_hours * quantization_gpus(frame)
