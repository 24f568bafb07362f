"""One job's forecast on each GPU model it may run on, at one GPU count.

The estimators take the GPU model as a feature (``gpu_type``, and ``gpu_memory_gb`` for
training), so a job's hours on each model are its spec forecast with those features set to
the model's: one call for all the models. The plan keeps one GPU count per job (a block is
the same size on every pool), so the count is chosen once:

1. each model the job fits on in memory (on some GPU count) is forecast; a model whose
   largest pool is smaller than the GPUs it needs there is left out;
2. the job's count is its count on the model where its P50 GPU-hours are fewest (ties: the
   first in the cluster's order), at least the count its memory needs there;
3. every other model keeps the job only if the job fits in its memory at that count, with
   its hours moved to that count by the cost model's scaling (GPUs x per-GPU efficiency,
   ``features.job_costs.scaling_efficiency``).

A model gpuplan's datasheet does not know (a pool's own ``gpu_model``) is forecast as the
spec says (its own ``gpu_type`` and memory). A job that fits on none of its models is
refused, naming each model and what it would need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from contract.errors import InputError
from contract.scenario import JobKind
from features import job_costs
from features.gpu_models import GPU_SPECS
from forecasting.job_forecast import P50P90, JobForecast


@dataclass(frozen=True)
class ModelHours:
    """A job's GPU count and its hours on each model it may run on (in the order asked), and
    why each other model was left out."""

    gpus: int
    hours: Mapping[str, P50P90]
    left_out: Mapping[str, str]


def on_model(kind: JobKind, features: pd.DataFrame, model: str) -> pd.DataFrame:
    """The one-row ``features`` with the GPU model set to ``model`` (unchanged when the
    datasheet does not know it)."""
    spec = GPU_SPECS.get(model)
    if spec is None:
        return features
    if kind is JobKind.TRAINING:
        return features.assign(gpu_type=model, gpu_memory_gb=spec.memory_gb)
    return features.assign(gpu_type=model)


def _memory_gpus(kind: JobKind, frame: pd.DataFrame) -> int | None:
    """The fewest GPUs whose memory holds the job (None: no count does)."""
    if kind is JobKind.TRAINING:
        if not job_costs.fits_in_memory(frame)[0]:
            return None
        return int(job_costs.min_gpus_for_memory(frame)[0])
    return int(job_costs.quantization_gpus(frame)[0])


def _need(kind: JobKind, frame: pd.DataFrame, gpus: int | None = None) -> str:
    """What the job needs of a model's memory, in words (on ``gpus`` GPUs, or on the most)."""
    if kind is JobKind.TRAINING:
        most = float(gpus or 2**job_costs.MAX_GPUS_LOG2)
        per_gpu = float(job_costs.memory_per_gpu_gb(frame, np.array([most]))[0])
        usable = float(job_costs.usable_memory_gb(frame)[0])
        on = f"on {int(most):,} GPUs" if gpus else f"even on {int(most):,} GPUs"
        return f"{per_gpu:,.1f} GB per GPU {on}, {usable:,.1f} GB usable"
    return f"{int(job_costs.quantization_gpus(frame)[0])} GPUs to hold the 4-bit weights"


def _scaled(hours: P50P90, from_gpus: int, to_gpus: int) -> P50P90:
    """Hours on ``from_gpus`` GPUs moved to ``to_gpus`` (throughput: GPUs x efficiency)."""
    if from_gpus == to_gpus:
        return hours
    rate = job_costs.scaling_efficiency(np.array([float(from_gpus), float(to_gpus)]))
    factor = float(from_gpus * rate[0] / (to_gpus * rate[1]))
    return P50P90(hours.p50 * factor, hours.p90 * factor)


def forecast_by_model(
    estimator: Any, kind: JobKind, features: pd.DataFrame, models: Mapping[str, int], *, source: str
) -> ModelHours:
    """``features`` (one validated row of ``kind``) forecast on each of ``models`` (model ->
    the GPUs of its largest pool, in the cluster's order); InputError when it fits on none."""
    frames = {model: on_model(kind, features, model) for model in models}
    left_out: dict[str, str] = {}
    fitting: dict[str, int] = {}  # model -> the fewest GPUs its memory takes
    for model, frame in frames.items():
        least = _memory_gpus(kind, frame)
        if least is None:
            left_out[model] = _need(kind, frame)
        else:
            fitting[model] = least
    forecasts: dict[str, JobForecast] = {}
    if fitting:
        rows = pd.concat([frames[model] for model in fitting], ignore_index=True)
        forecasts = dict(zip(fitting, estimator.forecast(rows), strict=True))
    own: dict[str, int] = {}  # model -> the GPUs the job takes there
    for model, forecast in forecasts.items():
        gpus = max(int(forecast.gpus.p50), fitting[model])
        if gpus > models[model]:
            left_out[model] = f"needs {gpus} GPUs; its largest pool has {models[model]}"
        else:
            own[model] = gpus
    if not own:
        raise _fits_nowhere(list(models), left_out, source)
    best = min(own, key=lambda model: own[model] * forecasts[model].duration_hours.p50)
    gpus = own[best]
    hours: dict[str, P50P90] = {}
    for model in models:
        if model not in own:
            continue
        if fitting[model] > gpus:
            left_out[model] = f"does not fit on {gpus} GPUs: {_need(kind, frames[model], gpus)}"
            continue
        hours[model] = _scaled(forecasts[model].duration_hours, own[model], gpus)
    return ModelHours(gpus, hours, left_out)


def _fits_nowhere(models: list[str], left_out: Mapping[str, str], source: str) -> InputError:
    return InputError(
        "gpu_models",
        "GPU models of the cluster that can hold the job",
        models,
        source=source,
        hint="; ".join(f"{model}: {why}" for model, why in left_out.items())
        + ". Name a model with more memory per GPU, or change the job (gpuplan forecast job says what fits).",
    )
