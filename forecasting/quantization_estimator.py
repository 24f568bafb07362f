"""GPU-hours of a post-training quantization job, by calibration tier.

Quantization cost is close to a formula: a fixed load-and-save plus work that grows
with parameters x calibration tokens (GPTQ: Frantar et al. 2022, ~4 GPU-hours for 175B
on one A100; AWQ: Lin et al. 2023; bitsandbytes quantizes at load). So the estimator is
small and explainable: the jobs are cut into tiers by parameter count, and for each
algorithm x tier an ordinary least-squares fit (statsmodels) of log GPU-hours on log
parameters, log calibration tokens and log GPU memory bandwidth. Where a cell holds too
few jobs, the algorithm's fit over all tiers stands in (statsforecast's fallback-model
habit). The P90 is the median times a safety margin, by default the cell's 90th
percentile of residuals, rounded up to whole GPU-hours so a reservation is never short
by a fraction.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import pandas as pd
import statsmodels.api as sm
from sklearn.base import BaseEstimator

from contract.errors import InputError
from contract.scenario import JobKind
from features.job_costs import GPU_SPECS
from features.job_features import QUANTIZATION_SCHEMA, QuantAlgorithm
from forecasting.by_model import ModelHours, forecast_by_model
from forecasting.job_forecast import (
    P50P90,
    FloatArray,
    JobForecast,
    ceil_gpu_hours,
    job_model_provenance,
    require_fitted,
    round_to_power_of_two,
)

logger = logging.getLogger(__name__)

DEFAULT_TIER_BOUNDS_BILLION = (8.0, 16.0, 40.0, 80.0)  # the last tier is everything larger


@dataclass(frozen=True, slots=True)
class CellModel:
    """One algorithm x tier: OLS coefficients on the log design, the multiplicative
    safety margin, and the GPUs such jobs held (P50, P90)."""

    coefficients: tuple[float, ...]
    margin: float
    gpus_log2_p50: float
    gpus_log2_p90: float
    jobs: int
    pooled: bool  # True: too few jobs in the tier, the algorithm's all-tier fit


def _uses_calibration(algorithm: str) -> bool:
    return algorithm != QuantAlgorithm.BITSANDBYTES.value


def _design(features: pd.DataFrame, algorithm: str) -> FloatArray:
    """Columns: 1, log params, [log calibration tokens,] log HBM bandwidth."""
    bandwidth = features["gpu_type"].map(lambda name: GPU_SPECS[str(name)].hbm_tb_per_s)
    columns = [
        np.ones(len(features)),
        np.log(features["params_billion"].to_numpy(dtype=float)),
    ]
    if _uses_calibration(algorithm):
        tokens = features["calibration_samples"].to_numpy(dtype=float) * features[
            "calibration_seq_len_tokens"
        ].to_numpy(dtype=float)
        columns.append(np.log(tokens))
    columns.append(np.log(bandwidth.to_numpy(dtype=float)))
    return np.column_stack(columns)


class QuantizationEstimator(BaseEstimator):  # type: ignore[misc]  # sklearn is untyped
    """P50 and P90 GPU-hours (and GPUs, hours) of a quantization job.

    Parameters
    ----------
    tier_bounds_billion:
        Upper bounds of the parameter tiers; a last tier takes everything larger.
    safety_margin:
        Multiplier from the median to the P90 (e.g. 1.3). None: each cell's own
        ``margin_quantile`` of exp(residual).
    margin_quantile:
        The residual quantile behind the default margin.
    min_jobs_per_tier:
        Fewer jobs than this in a cell and the algorithm's all-tier fit stands in.

    Fitted attributes: ``cells_`` ((algorithm, tier) -> CellModel), ``pooled_``
    (algorithm -> CellModel), ``provenance_``.
    """

    def __init__(
        self,
        *,
        tier_bounds_billion: tuple[float, ...] = DEFAULT_TIER_BOUNDS_BILLION,
        safety_margin: float | None = None,
        margin_quantile: float = 0.9,
        min_jobs_per_tier: int = 12,
    ) -> None:
        self.tier_bounds_billion = tier_bounds_billion
        self.safety_margin = safety_margin
        self.margin_quantile = margin_quantile
        self.min_jobs_per_tier = min_jobs_per_tier

    def tier_of(self, params_billion: FloatArray) -> npt.NDArray[np.intp]:
        """Tier index of each parameter count: 0 for <= the first bound, and so on."""
        return np.searchsorted(np.asarray(self.tier_bounds_billion), params_billion, side="left")

    def _check_params(self) -> None:
        bounds = list(self.tier_bounds_billion)
        if not bounds or bounds != sorted(set(bounds)) or bounds[0] <= 0:
            raise InputError("tier_bounds_billion", "increasing positive parameter counts", bounds)
        if self.safety_margin is not None and not self.safety_margin >= 1.0:
            raise InputError("safety_margin", "None or a multiplier >= 1", self.safety_margin)
        if not 0.5 <= self.margin_quantile < 1.0:
            raise InputError("margin_quantile", "in [0.5, 1)", self.margin_quantile)
        if self.min_jobs_per_tier < 5:
            raise InputError("min_jobs_per_tier", "at least 5", self.min_jobs_per_tier)

    def _fit_cell(
        self, features: pd.DataFrame, log_gpu_hours: FloatArray, gpus: FloatArray, algorithm: str
    ) -> CellModel:
        design = _design(features, algorithm)
        # pinv-based OLS: a tier with one GPU type or one calibration size is rank
        # deficient, and the minimum-norm solution is still the right prediction there.
        result = sm.OLS(log_gpu_hours, design).fit(method="pinv")
        residuals = log_gpu_hours - design @ result.params
        margin = (
            self.safety_margin
            if self.safety_margin is not None
            else max(1.0, math.exp(float(np.quantile(residuals, self.margin_quantile))))
        )
        log2_gpus = np.log2(gpus)
        return CellModel(
            coefficients=tuple(float(c) for c in result.params),
            margin=margin,
            gpus_log2_p50=float(np.quantile(log2_gpus, 0.5)),
            gpus_log2_p90=float(np.quantile(log2_gpus, 0.9)),
            jobs=len(features),
            pooled=False,
        )

    def fit(
        self,
        x: pd.DataFrame,
        y: pd.DataFrame,
        *,
        submit_times: pd.Series | None = None,
        now: datetime | None = None,
    ) -> Self:
        """Fit on completed quantization jobs ``x`` and ``y`` (``gpus``, ``duration_hours``)."""
        self._check_params()
        features = QUANTIZATION_SCHEMA.validate_frame(x, source="QuantizationEstimator.fit(x)")
        if not {"gpus", "duration_hours"} <= set(y.columns) or len(y) != len(features):
            raise InputError("y", f"{len(features)} rows with columns gpus and duration_hours", y.shape)
        gpus = y["gpus"].to_numpy(dtype=float)
        gpu_hours = gpus * y["duration_hours"].to_numpy(dtype=float)
        if not (np.isfinite(gpu_hours).all() and (gpu_hours > 0).all() and (gpus >= 1).all()):
            raise InputError("y", "GPUs >= 1 and durations > 0 hours", y.describe().to_dict())
        features = features.reset_index(drop=True)
        algorithms = features["algorithm"].to_numpy()
        tiers = self.tier_of(features["params_billion"].to_numpy(dtype=float))
        cells: dict[tuple[str, int], CellModel] = {}
        pooled: dict[str, CellModel] = {}
        for algorithm in (a.value for a in QuantAlgorithm):
            in_algorithm = algorithms == algorithm
            if in_algorithm.sum() < self.min_jobs_per_tier:
                logger.warning(
                    "only %d %s jobs in the history: %s jobs cannot be forecast",
                    in_algorithm.sum(),
                    algorithm,
                    algorithm,
                )
                continue
            pooled[algorithm] = self._fit_cell(
                features[in_algorithm],
                np.log(gpu_hours[in_algorithm]),
                gpus[in_algorithm],
                algorithm,
            )
            for tier in range(len(self.tier_bounds_billion) + 1):
                rows = in_algorithm & (tiers == tier)
                if rows.sum() >= self.min_jobs_per_tier:
                    cells[algorithm, tier] = self._fit_cell(
                        features[rows], np.log(gpu_hours[rows]), gpus[rows], algorithm
                    )
        if not pooled:
            raise InputError(
                "x",
                f"at least {self.min_jobs_per_tier} completed jobs of one algorithm",
                len(features),
            )
        self.cells_ = cells
        self.pooled_ = pooled
        self.provenance_ = job_model_provenance(type(self).__name__, features, y, submit_times, now)
        return self

    # ------------------------------------------------------------------ as data
    def to_state(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The fitted cells as JSON-ready values (no boosters): what
        :func:`forecasting.persistence.save_model` writes."""
        require_fitted(self, "cells_")
        state = {
            "cells": [{"algorithm": a, "tier": t, **asdict(cell)} for (a, t), cell in self.cells_.items()],
            "pooled": [{"algorithm": a, **asdict(cell)} for a, cell in self.pooled_.items()],
        }
        return state, {}

    @classmethod
    def from_state(cls, params: dict[str, Any], state: dict[str, Any], boosters: dict[str, str]) -> Self:
        """The estimator :meth:`to_state` described."""
        params = {**params, "tier_bounds_billion": tuple(map(float, params["tier_bounds_billion"]))}
        estimator = cls(**params)

        def cell(entry: dict[str, Any]) -> CellModel:
            return CellModel(
                coefficients=tuple(map(float, entry["coefficients"])),
                margin=float(entry["margin"]),
                gpus_log2_p50=float(entry["gpus_log2_p50"]),
                gpus_log2_p90=float(entry["gpus_log2_p90"]),
                jobs=int(entry["jobs"]),
                pooled=bool(entry["pooled"]),
            )

        estimator.cells_ = {(str(e["algorithm"]), int(e["tier"])): cell(e) for e in state["cells"]}
        estimator.pooled_ = {str(e["algorithm"]): cell(e) for e in state["pooled"]}
        return estimator

    def cell(self, algorithm: str, tier: int) -> CellModel:
        """The model for one algorithm and tier, or the algorithm's all-tier fallback."""
        require_fitted(self, "cells_")
        if (algorithm, tier) in self.cells_:
            return self.cells_[algorithm, tier]
        if algorithm in self.pooled_:
            fallback = self.pooled_[algorithm]
            return CellModel(
                fallback.coefficients,
                fallback.margin,
                fallback.gpus_log2_p50,
                fallback.gpus_log2_p90,
                fallback.jobs,
                pooled=True,
            )
        raise InputError(
            "algorithm",
            f"one the history holds jobs of ({', '.join(sorted(self.pooled_))})",
            algorithm,
            hint="Add completed jobs of it to the history and run `gpuplan train`.",
        )

    def predict(self, x: pd.DataFrame) -> pd.DataFrame:
        """Columns gpus_p50/p90, hours_p50/p90 and gpu_hours_p50/p90 (P90 in whole GPU-hours)."""
        require_fitted(self, "cells_")
        features = QUANTIZATION_SCHEMA.validate_frame(
            x, source="QuantizationEstimator.predict(x)"
        ).reset_index(drop=True)
        tiers = self.tier_of(features["params_billion"].to_numpy(dtype=float))
        columns: dict[str, FloatArray] = {
            name: np.zeros(len(features))
            for name in ("gpus_p50", "gpus_p90", "gpu_hours_p50", "gpu_hours_p90")
        }
        algorithms = features["algorithm"].to_numpy()
        for algorithm, tier in sorted(set(zip(algorithms, tiers.tolist(), strict=True))):
            rows = np.flatnonzero((algorithms == algorithm) & (tiers == tier))
            model = self.cell(str(algorithm), tier)
            group = features.iloc[rows]
            median = np.exp(_design(group, str(algorithm)) @ np.asarray(model.coefficients))
            columns["gpu_hours_p50"][rows] = median
            columns["gpu_hours_p90"][rows] = [ceil_gpu_hours(v * model.margin) for v in median]
            columns["gpus_p50"][rows] = model.gpus_log2_p50
            columns["gpus_p90"][rows] = model.gpus_log2_p90
        gpus_p50 = round_to_power_of_two(columns["gpus_p50"])
        gpus_p90 = np.maximum(gpus_p50, round_to_power_of_two(columns["gpus_p90"]))
        gpu_hours_p90 = np.maximum(columns["gpu_hours_p50"], columns["gpu_hours_p90"])
        return pd.DataFrame(
            {
                "gpus_p50": gpus_p50.astype(int),
                "gpus_p90": gpus_p90.astype(int),
                "hours_p50": columns["gpu_hours_p50"] / gpus_p50,
                "hours_p90": gpu_hours_p90 / gpus_p50,
                "gpu_hours_p50": columns["gpu_hours_p50"],
                "gpu_hours_p90": gpu_hours_p90,
            },
            index=x.index,
        )

    def forecast(self, x: pd.DataFrame) -> list[JobForecast]:
        """One :class:`JobForecast` per row of ``x``."""
        predicted = self.predict(x)
        names = ("gpus_p50", "gpus_p90", "hours_p50", "hours_p90", "gpu_hours_p50")
        columns = [predicted[name].to_numpy(dtype=float) for name in (*names, "gpu_hours_p90")]
        return [
            JobForecast(
                JobKind.QUANTIZATION,
                P50P90(gpus_p50, gpus_p90),
                P50P90(hours_p50, hours_p90),
                P50P90(gpu_hours_p50, gpu_hours_p90),
            )
            for gpus_p50, gpus_p90, hours_p50, hours_p90, gpu_hours_p50, gpu_hours_p90 in zip(
                *columns, strict=True
            )
        ]

    def forecast_spec(self, spec: Mapping[str, object], *, source: str) -> JobForecast:
        """The forecast for one job spec (feature name -> value)."""
        return self.forecast(QUANTIZATION_SCHEMA.validate_record(spec, source=source))[0]

    def forecast_on_models(
        self, spec: Mapping[str, object], models: Mapping[str, int], *, source: str
    ) -> ModelHours:
        """One job spec forecast on each of ``models`` (:func:`forecasting.by_model.forecast_by_model`)."""
        features = QUANTIZATION_SCHEMA.validate_record(spec, source=source)
        return forecast_by_model(self, JobKind.QUANTIZATION, features, models, source=source)
