"""Held-out evaluation of the job estimators, as printed by ``gpuplan train``.

The split is by submit time (the last ``test_fraction`` of jobs), as the estimators
will be used: trained on the past, asked about the next jobs.
"""

from __future__ import annotations

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


def training_metrics(name: str, model: _Predictor, test: pd.DataFrame) -> dict[str, object]:
    """MAE of log(hours) at the P50, P90 coverage of hours, share of exact GPU counts."""
    predicted = model.predict(test[list(TRAINING_SCHEMA.names)])
    actual_hours = test["duration_hours"].to_numpy(dtype=float)
    log_error = np.log(predicted["hours_p50"].to_numpy(dtype=float)) - np.log(actual_hours)
    return {
        "model": name,
        "jobs": len(test),
        "log_mae_hours": float(np.mean(np.abs(log_error))),
        "p90_coverage": float(np.mean(actual_hours <= predicted["hours_p90"].to_numpy())),
        "gpu_accuracy": float(np.mean(predicted["gpus_p50"].to_numpy() == test["gpus"].to_numpy())),
        "gpu_p90_coverage": float(np.mean(test["gpus"].to_numpy() <= predicted["gpus_p90"])),
    }


def quantization_metrics(name: str, model: _Predictor, test: pd.DataFrame) -> dict[str, object]:
    """Share of jobs whose GPU-hours fit the prediction, and the mean GPU-hours held
    beyond need (over-provisioning; 0 for a job that overran)."""
    predicted = model.predict(test[list(QUANTIZATION_SCHEMA.names)])
    actual = (test["duration_hours"] * test["gpus"]).to_numpy(dtype=float)
    reserved = predicted["gpu_hours_p90"].to_numpy(dtype=float)
    return {
        "model": name,
        "jobs": len(test),
        "coverage": float(np.mean(actual <= reserved)),
        "mean_over_provision_gpu_hours": float(np.mean(np.maximum(reserved - actual, 0.0))),
        "mean_actual_gpu_hours": float(np.mean(actual)),
        "log_mae_gpu_hours": float(
            np.mean(np.abs(np.log(predicted["gpu_hours_p50"].to_numpy(dtype=float) / actual)))
        ),
    }


def format_table(rows: list[dict[str, object]]) -> str:
    """A plain-text table over the union of the rows' keys (floats to 3 decimals)."""
    if not rows:
        return "(no rows)"
    columns = list(dict.fromkeys(key for row in rows for key in row))

    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.3f}"
        return "" if value is None else str(value)

    cells = [[cell(row.get(column)) for column in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)
