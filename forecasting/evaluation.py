"""Held-out evaluation of the job estimators, as printed by ``gpuplan train``.

The split is by submit time (the last ``test_fraction`` of jobs), as the estimators
will be used: trained on the past, asked about the next jobs.

Beyond the averages, a forecast is judged per slice: P90 coverage and sharpness (the
median P90 / P50) in each quintile of the predicted P50 hours, and per predicted GPU
count. The pinball (quantile) loss at 0.5 and 0.9 scores each quantile as a whole
(Koenker & Bassett 1978; Gneiting & Raftery 2007 call it a proper scoring rule): on
log hours and log2 GPUs, so a 2x miss costs the same for a short and a long job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from features.job_features import QUANTIZATION_SCHEMA, TRAINING_SCHEMA
from forecasting.quantiles import pinball_loss

TEST_FRACTION = 0.2


class _Predictor(Protocol):
    def predict(self, x: pd.DataFrame) -> pd.DataFrame: ...


def time_split(
    jobs: pd.DataFrame, *, test_fraction: float = TEST_FRACTION
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(earlier jobs, later jobs) by ``submit_time``."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1); got {test_fraction}.")
    ordered = jobs.sort_values("submit_time", kind="stable").reset_index(drop=True)
    cut = round(len(ordered) * (1.0 - test_fraction))
    return ordered.iloc[:cut].reset_index(drop=True), ordered.iloc[cut:].reset_index(drop=True)


@dataclass(frozen=True, slots=True)
class TrainingMetrics:
    model: str
    jobs: int
    log_mae_hours: float  # mean |log(P50 hours) - log(actual hours)|
    p90_coverage: float  # share of jobs done within the P90 hours
    pinball_p50_log_hours: float
    pinball_p90_log_hours: float
    gpu_accuracy: float  # share of jobs whose P50 GPU count is exact
    gpu_p90_coverage: float  # share of jobs within the P90 GPU count
    pinball_p50_log2_gpus: float
    pinball_p90_log2_gpus: float


@dataclass(frozen=True, slots=True)
class SliceMetrics:
    """One slice of the held-out jobs by predicted P50: coverage and sharpness."""

    target: str  # "hours" or "gpus"
    slice: str  # "Q1".."Q5" for hours, the predicted GPU count for GPUs
    jobs: int
    p50_range: str
    p90_coverage: float
    median_p90_over_p50: float
    analytic_p90_coverage: float  # the analytic-FLOPs baseline on the same jobs


@dataclass(frozen=True, slots=True)
class QuantizationMetrics:
    model: str
    jobs: int
    coverage: float  # share of jobs whose GPU-hours fit the P90 reservation
    mean_over_provision_gpu_hours: float  # reserved minus used, 0 for an overrun
    mean_actual_gpu_hours: float
    log_mae_gpu_hours: float  # of the P50


def training_metrics(
    name: str, model: _Predictor, test: pd.DataFrame, *, predicted: pd.DataFrame | None = None
) -> TrainingMetrics:
    """MAE of log(hours) at the P50, P90 coverage, pinball losses, exact GPU counts.
    ``predicted``: ``model``'s predictions of ``test``, when the caller made them already."""
    if predicted is None:
        predicted = model.predict(test[list(TRAINING_SCHEMA.names)])
    log_hours = np.log(test["duration_hours"].to_numpy(dtype=float))
    log_p50 = np.log(predicted["hours_p50"].to_numpy(dtype=float))
    log_p90 = np.log(predicted["hours_p90"].to_numpy(dtype=float))
    log2_gpus = np.log2(test["gpus"].to_numpy(dtype=float))
    log2_p50 = np.log2(predicted["gpus_p50"].to_numpy(dtype=float))
    log2_p90 = np.log2(predicted["gpus_p90"].to_numpy(dtype=float))
    return TrainingMetrics(
        model=name,
        jobs=len(test),
        log_mae_hours=float(np.mean(np.abs(log_p50 - log_hours))),
        p90_coverage=float(np.mean(log_hours <= log_p90)),
        pinball_p50_log_hours=pinball_loss(log_hours, log_p50, 0.5),
        pinball_p90_log_hours=pinball_loss(log_hours, log_p90, 0.9),
        gpu_accuracy=float(np.mean(log2_p50 == log2_gpus)),
        gpu_p90_coverage=float(np.mean(log2_gpus <= log2_p90)),
        pinball_p50_log2_gpus=pinball_loss(log2_gpus, log2_p50, 0.5),
        pinball_p90_log2_gpus=pinball_loss(log2_gpus, log2_p90, 0.9),
    )


#: Per target: the actual column of the test jobs, and the unit of its forecasts.
SLICE_TARGETS = {"hours": ("duration_hours", "h"), "gpus": ("gpus", "GPUs")}


def slice_metrics(
    model: _Predictor,
    analytic: _Predictor,
    test: pd.DataFrame,
    *,
    predicted: pd.DataFrame | None = None,
    baseline: pd.DataFrame | None = None,
) -> list[SliceMetrics]:
    """P90 coverage and median P90/P50 per quintile of predicted P50 hours, and per
    predicted P50 GPU count (GPU counts are few distinct powers of two, so quintiles
    would split equal forecasts at random); the analytic baseline on the same slices.
    ``predicted``, ``baseline``: the two models' predictions of ``test``, when made already."""
    inputs = test[list(TRAINING_SCHEMA.names)]
    if predicted is None:
        predicted = model.predict(inputs)
    if baseline is None:
        baseline = analytic.predict(inputs)
    # Quintiles by rank, so ties cannot leave a quintile empty.
    rank = pd.Series(predicted["hours_p50"].to_numpy(dtype=float)).rank(method="first")
    quintile = np.asarray(pd.qcut(rank, 5, labels=False), dtype=int)
    gpus_p50 = predicted["gpus_p50"].to_numpy(dtype=float)
    slices = {
        "hours": [(f"Q{index + 1}", quintile == index) for index in range(5)],
        "gpus": [(f"{int(count)}", gpus_p50 == count) for count in np.unique(gpus_p50)],
    }
    rows = []
    for target, named in slices.items():
        column, unit = SLICE_TARGETS[target]
        actual = test[column].to_numpy(dtype=float)
        p50 = predicted[f"{target}_p50"].to_numpy(dtype=float)
        p90 = predicted[f"{target}_p90"].to_numpy(dtype=float)
        baseline_p90 = baseline[f"{target}_p90"].to_numpy(dtype=float)
        for name, in_slice in named:
            low, high = p50[in_slice].min(), p50[in_slice].max()
            rows.append(
                SliceMetrics(
                    target=target,
                    slice=name,
                    jobs=int(in_slice.sum()),
                    p50_range=f"{low:.3g} {unit}" if low == high else f"{low:.3g}-{high:.3g} {unit}",
                    p90_coverage=float(np.mean(actual[in_slice] <= p90[in_slice])),
                    median_p90_over_p50=float(np.median(p90[in_slice] / p50[in_slice])),
                    analytic_p90_coverage=float(np.mean(actual[in_slice] <= baseline_p90[in_slice])),
                )
            )
    return rows


def quantization_metrics(name: str, model: _Predictor, test: pd.DataFrame) -> QuantizationMetrics:
    """Share of jobs whose GPU-hours fit the prediction, and the mean GPU-hours held
    beyond need (over-provisioning; 0 for a job that overran)."""
    predicted = model.predict(test[list(QUANTIZATION_SCHEMA.names)])
    actual = (test["duration_hours"] * test["gpus"]).to_numpy(dtype=float)
    reserved = predicted["gpu_hours_p90"].to_numpy(dtype=float)
    median = predicted["gpu_hours_p50"].to_numpy(dtype=float)
    return QuantizationMetrics(
        model=name,
        jobs=len(test),
        coverage=float(np.mean(actual <= reserved)),
        mean_over_provision_gpu_hours=float(np.mean(np.maximum(reserved - actual, 0.0))),
        mean_actual_gpu_hours=float(np.mean(actual)),
        log_mae_gpu_hours=float(np.mean(np.abs(np.log(median / actual)))),
    )
