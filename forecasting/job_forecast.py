"""What a batch-job forecaster returns, and the helpers both job estimators share."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt
import pandas as pd

from contract.errors import NotFittedError
from contract.scenario import JobKind
from forecasting.persistence import Provenance, make_provenance

__all__ = ["P50P90", "JobForecast", "data_bytes", "require_fitted"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class P50P90:
    """A median and a 90th percentile; ``p90 >= p50`` always."""

    p50: float
    p90: float

    def __post_init__(self) -> None:
        if not self.p90 >= self.p50:
            raise ValueError(f"p90 must be >= p50; got p50={self.p50}, p90={self.p90}.")

    def to_json(self) -> dict[str, float]:
        return {"p50": self.p50, "p90": self.p90}


@dataclass(frozen=True, slots=True)
class JobForecast:
    """One batch job's needs: GPUs (powers of two), wall-clock hours and, for
    quantization, GPU-hours. The scheduler uses the P90 duration by default."""

    kind: JobKind
    gpus: P50P90
    duration_hours: P50P90
    gpu_hours: P50P90 | None = None

    def to_json(self) -> dict[str, dict[str, float]]:
        gpus: dict[str, float] = {"p50": int(self.gpus.p50), "p90": int(self.gpus.p90)}
        result = {"gpus": gpus, "hours": self.duration_hours.to_json()}
        if self.gpu_hours is not None:
            result["gpu_hours"] = self.gpu_hours.to_json()
        return result


def require_fitted(estimator: object, attribute: str) -> None:
    """Raise :class:`~contract.errors.NotFittedError` (a ValueError and an AttributeError)."""
    if not hasattr(estimator, attribute):
        name = type(estimator).__name__
        raise NotFittedError(
            f"This {name} instance is not fitted yet. Call `fit` with a job history first "
            f"(`gpuplan train` fits and saves one)."
        )


def submit_window(submit_times: pd.Series | None) -> tuple[object, object]:
    """(first, last) submit time of the jobs a model learned from, for its provenance."""
    if submit_times is None or submit_times.empty:
        return None, None
    return submit_times.min(), submit_times.max()


def data_bytes(frame: pd.DataFrame) -> bytes:
    """A stable byte image of a frame, for the provenance hash."""
    return pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes()


def job_model_provenance(
    model: str,
    features: pd.DataFrame,
    y: pd.DataFrame | pd.Series,
    submit_times: pd.Series | None,
    now: datetime | None,
) -> Provenance:
    """Provenance of a job estimator fitted on ``features`` -> ``y`` (rows, window, data hash)."""
    start, end = submit_window(submit_times)
    return make_provenance(
        model,
        rows=len(features),
        data_bytes=data_bytes(pd.concat([features, y.reset_index(drop=True)], axis=1)),
        window_start=start,
        window_end=end,
        now=now,
    )


def round_to_power_of_two(log2_gpus: FloatArray) -> FloatArray:
    """GPUs come in power-of-two blocks (the allocation contract): round in log space."""
    return np.asarray(2.0 ** np.clip(np.round(log2_gpus), 0, None), dtype=float)


def ceil_gpu_hours(gpu_hours: float) -> float:
    """Whole GPU-hours, never zero: a job that ran holds its GPUs for a step."""
    return float(max(1, math.ceil(gpu_hours - 1e-9)))
