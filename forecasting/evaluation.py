"""Held-out evaluation of the job estimators, as printed by ``gpuplan train``.

The split is by submit time (the last ``test_fraction`` of jobs), as the estimators
will be used: trained on the past, asked about the next jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from features.job_features import QUANTIZATION_SCHEMA, TRAINING_SCHEMA

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
    gpu_accuracy: float  # share of jobs whose P50 GPU count is exact
    gpu_p90_coverage: float  # share of jobs within the P90 GPU count


@dataclass(frozen=True, slots=True)
class QuantizationMetrics:
    model: str
    jobs: int
    coverage: float  # share of jobs whose GPU-hours fit the P90 reservation
    mean_over_provision_gpu_hours: float  # reserved minus used, 0 for an overrun
    mean_actual_gpu_hours: float
    log_mae_gpu_hours: float  # of the P50


def training_metrics(name: str, model: _Predictor, test: pd.DataFrame) -> TrainingMetrics:
    """MAE of log(hours) at the P50, P90 coverage of hours, share of exact GPU counts."""
    predicted = model.predict(test[list(TRAINING_SCHEMA.names)])
    actual_hours = test["duration_hours"].to_numpy(dtype=float)
    log_error = np.log(predicted["hours_p50"].to_numpy(dtype=float)) - np.log(actual_hours)
    return TrainingMetrics(
        model=name,
        jobs=len(test),
        log_mae_hours=float(np.mean(np.abs(log_error))),
        p90_coverage=float(np.mean(actual_hours <= predicted["hours_p90"].to_numpy())),
        gpu_accuracy=float(np.mean(predicted["gpus_p50"].to_numpy() == test["gpus"].to_numpy())),
        gpu_p90_coverage=float(np.mean(test["gpus"].to_numpy() <= predicted["gpus_p90"])),
    )


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
