"""GPU count and duration of a training job, P50 and P90, from its 22 features.

``TrainingEstimator`` fits LightGBM with the quantile (pinball) objective (Koenker &
Bassett 1978; Ke et al. 2017 for LightGBM): one model per target (log2 GPUs, log hours)
and quantile. Two inputs are derived inside the pipeline from the analytic cost model
(features/job_costs.py), the memory-bound GPU count and the FLOPs-bound hours, so the
trees learn the corrections the formulas miss (utilisation, overheads, over-asks)
instead of rediscovering 6N. Monotone constraints keep the physics: more tokens,
epochs or rollouts never shorten a job; a larger model never needs fewer GPUs. (The
pinball loss is a custom objective because LightGBM's built-in ``quantile`` objective
refuses monotone constraints.) The P90 hours are then conformalized on the latest jobs
(Romano, Patterson & Candes 2019) so that they cover 90% out of sample.

The two baselines the evaluation compares against live here too:
``SizeOnlyBaseline`` (what a model's size alone tells) and ``AnalyticBaseline`` (the
published formulas at a textbook utilisation, no learning beyond a P90 margin).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import pandas as pd
from lightgbm import LGBMRegressor
from sklearn.base import BaseEstimator

from contract.errors import InputError
from features import job_costs
from features.job_features import TRAINING_SCHEMA, FeatureType
from forecasting.job_forecast import (
    P50P90,
    FloatArray,
    JobForecast,
    job_model_provenance,
    require_fitted,
    round_to_power_of_two,
)

logger = logging.getLogger(__name__)

QUANTILES = (0.5, 0.9)
TARGETS = ("log2_gpus", "log_hours")
# Where boosting starts. GPUs start from the analytic memory count, so the trees only
# learn over-asks. Hours start from the overall quantile: a start at the analytic hours
# would leave the trees the residual, which falls with the analytic hours (start-up
# overheads weigh on short jobs), and a +1 constraint on that input would forbid it.
BOOST_FROM_ANALYTIC: dict[str, str | None] = {
    "log2_gpus": "analytic_log2_gpus",
    "log_hours": None,
}
PREDICTION_COLUMNS = ("gpus_p50", "gpus_p90", "hours_p50", "hours_p90")
#: Fewer completed jobs than this cannot fit the quantile models and calibrate the P90.
MIN_TRAINING_JOBS = 50

# +1: the target never decreases as the feature grows; -1: never increases.
MONOTONE: dict[str, dict[str, int]] = {
    "log_hours": {
        "dataset_tokens_million": 1,
        "epochs": 1,
        "rollout_samples_per_prompt": 1,
        "rollout_new_tokens": 1,
        "analytic_log_hours": 1,
    },
    "log2_gpus": {
        "params_billion": 1,
        "num_layers": 1,
        "hidden_size": 1,
        "seq_len_tokens": 1,
        "micro_batch_size": 1,
        "lora_rank": 1,
        "reward_model_params_billion": 1,
        "gpu_memory_gb": -1,
        "analytic_log2_gpus": 1,
    },
}


class PinballObjective:
    """The quantile (pinball) loss as a LightGBM custom objective.

    LightGBM's built-in ``quantile`` objective refuses monotone constraints (it renews
    leaf values after each tree, which could break them); a custom objective skips
    that renewal, so both hold. The pinball loss has no curvature, so the Hessian is
    taken as 1: each tree then takes a bounded gradient step toward the quantile
    (Friedman 2001, gradient boosting with least-absolute-deviation-like losses).
    """

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha

    def __call__(
        self, y_true: npt.NDArray[Any] | None, y_pred: npt.NDArray[Any]
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        if y_true is None:
            raise ValueError("the pinball objective needs the training labels")
        above = y_true > y_pred
        grad = np.where(above, -self.alpha, 1.0 - self.alpha)
        return grad, np.ones_like(y_pred)


def design_matrix(features: pd.DataFrame) -> pd.DataFrame:
    """The model's input: the 22 validated features plus the two analytic estimates.

    Categories get the schema's fixed category list, so a category absent from one
    history still maps to the same code.
    """
    design = pd.DataFrame(index=features.index)
    for feature in TRAINING_SCHEMA.features:
        column = features[feature.name]
        if feature.type is FeatureType.CATEGORY:
            design[feature.name] = pd.Categorical(column, categories=feature.categories)
        else:
            design[feature.name] = column.astype(float)
    gpus, hours = job_costs.analytic_estimate(features)
    design["analytic_log2_gpus"] = np.log2(gpus)
    design["analytic_log_hours"] = np.log(hours)
    return design


def _targets(y: pd.DataFrame, *, rows: int) -> dict[str, FloatArray]:
    """log2 GPUs and log hours from ``y``'s ``gpus`` and ``duration_hours`` columns."""
    for column in ("gpus", "duration_hours"):
        if column not in y.columns:
            raise InputError("y", "a frame with columns gpus and duration_hours", list(y.columns))
    if len(y) != rows:
        raise InputError("y", f"{rows} rows, one per job of x", len(y))
    gpus = y["gpus"].to_numpy(dtype=float)
    hours = y["duration_hours"].to_numpy(dtype=float)
    if not (np.isfinite(gpus).all() and (gpus >= 1).all()):
        raise InputError("y.gpus", "finite GPU counts >= 1", float(np.nanmin(gpus)))
    if not (np.isfinite(hours).all() and (hours > 0).all()):
        raise InputError("y.duration_hours", "finite durations > 0 hours", float(np.nanmin(hours)))
    return {"log2_gpus": np.log2(gpus), "log_hours": np.log(hours)}


def _to_forecasts(predictions: pd.DataFrame) -> list[JobForecast]:
    columns = [predictions[name].to_numpy(dtype=float) for name in PREDICTION_COLUMNS]
    return [
        JobForecast("training", P50P90(gpus_p50, gpus_p90), P50P90(hours_p50, hours_p90))
        for gpus_p50, gpus_p90, hours_p50, hours_p90 in zip(*columns, strict=True)
    ]


@dataclass(frozen=True, slots=True)
class _QuantileModel:
    """One boosted quantile: the trees and the start they boost from."""

    regressor: LGBMRegressor
    offset: float


class _JobEstimatorMixin:
    """The shared shell: validate a frame or one spec, then call ``predict``."""

    def predict(self, x: pd.DataFrame) -> pd.DataFrame:  # pragma: no cover - overridden
        raise NotImplementedError

    def forecast(self, x: pd.DataFrame) -> list[JobForecast]:
        """One :class:`JobForecast` per row of ``x``."""
        return _to_forecasts(self.predict(x))

    def forecast_spec(self, spec: Mapping[str, object], *, source: str) -> JobForecast:
        """The forecast for one job spec (feature name -> value)."""
        return self.forecast(TRAINING_SCHEMA.validate_record(spec, source=source))[0]


class TrainingEstimator(_JobEstimatorMixin, BaseEstimator):  # type: ignore[misc]  # sklearn is untyped
    """P50 and P90 of a training job's GPU count and wall-clock hours.

    Parameters
    ----------
    n_estimators, learning_rate, num_leaves, min_child_samples:
        LightGBM's boosting parameters, the same for every target and quantile.
    random_state:
        Seed for LightGBM (its fits are deterministic with ``deterministic=True``).
    n_jobs:
        Threads for LightGBM. One by default: these fits are small, and on a shared
        2-core machine OpenMP threads spin-wait and ran 7x slower than one thread.

    Fitted attributes: ``models_`` (target -> quantile -> boosted model),
    ``p90_log_hours_shift_``, ``feature_names_in_`` and ``provenance_``.
    """

    def __init__(
        self,
        *,
        n_estimators: int = 400,
        learning_rate: float = 0.05,
        num_leaves: int = 31,
        min_child_samples: int = 20,
        calibration_fraction: float = 0.2,
        random_state: int = 0,
        n_jobs: int = 1,
    ) -> None:
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_child_samples = min_child_samples
        self.calibration_fraction = calibration_fraction
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _regressor(self, target: str, alpha: float, columns: list[str]) -> LGBMRegressor:
        constraints = [MONOTONE[target].get(name, 0) for name in columns]
        return LGBMRegressor(
            objective=PinballObjective(alpha),
            n_estimators=self.n_estimators,
            learning_rate=self.learning_rate,
            num_leaves=self.num_leaves,
            min_child_samples=self.min_child_samples,
            monotone_constraints=constraints,
            random_state=self.random_state,
            n_jobs=self.n_jobs,
            deterministic=True,
            force_row_wise=True,
            verbose=-1,
        )

    @staticmethod
    def _start(design: pd.DataFrame, target: str) -> FloatArray:
        column = BOOST_FROM_ANALYTIC[target]
        if column is None:
            return np.zeros(len(design))
        return design[column].to_numpy(dtype=float)

    def _fit_quantile(
        self, design: pd.DataFrame, values: FloatArray, target: str, alpha: float
    ) -> _QuantileModel:
        # A custom objective boosts from 0: start from the analytic estimate (or 0)
        # shifted by the residual's quantile, so the trees learn what is left.
        residual = values - self._start(design, target)
        offset = float(np.quantile(residual, alpha))
        regressor = self._regressor(target, alpha, list(design.columns))
        regressor.fit(design, residual - offset)
        logger.info("fitted %s at quantile %.2f on %d jobs", target, alpha, len(design))
        return _QuantileModel(regressor, offset)

    def _predict_quantile(self, model: _QuantileModel, design: pd.DataFrame, target: str) -> FloatArray:
        raw = np.asarray(model.regressor.predict(design), dtype=float)
        return raw + model.offset + self._start(design, target)

    def _conformal_shift(self, design: pd.DataFrame, log_hours: FloatArray) -> float:
        """How far to raise the log-hours P90 so it covers 90% of held-out jobs.

        Conformalized quantile regression (Romano, Patterson & Candes 2019): fit the
        P90 on the earlier jobs, score the later ones by how far they exceed it, and
        take the ceil((n + 1) * 0.9)-th smallest score. Pinball-loss boosting covers
        well in-sample but drifts out of sample; this puts it back on 90%.
        """
        cut = round(len(design) * (1.0 - self.calibration_fraction))
        if cut < 50 or len(design) - cut < 20:
            logger.info("too few jobs to calibrate the P90; leaving it uncalibrated")
            return 0.0
        head = self._fit_quantile(design.iloc[:cut], log_hours[:cut], "log_hours", 0.9)
        tail = design.iloc[cut:]
        scores = log_hours[cut:] - self._predict_quantile(head, tail, "log_hours")
        rank = min(len(scores), int(np.ceil((len(scores) + 1) * 0.9)))
        return float(np.sort(scores)[rank - 1])

    def fit(
        self,
        x: pd.DataFrame,
        y: pd.DataFrame,
        *,
        submit_times: pd.Series | None = None,
        now: datetime | None = None,
    ) -> Self:
        """Fit on completed jobs ``x`` (the 22 features) and ``y`` (``gpus``,
        ``duration_hours``), one row per job in submit-time order: the latest
        ``calibration_fraction`` of them calibrate the P90. ``submit_times`` feed the
        provenance's window."""
        if not 0.0 <= self.calibration_fraction < 1.0:
            raise InputError("calibration_fraction", "in [0, 1)", self.calibration_fraction)
        features = TRAINING_SCHEMA.validate_frame(x, source="TrainingEstimator.fit(x)")
        if len(features) < MIN_TRAINING_JOBS:
            raise InputError("x", f"at least {MIN_TRAINING_JOBS} completed training jobs", len(features))
        targets = _targets(y, rows=len(features))
        design = design_matrix(features)
        self.p90_log_hours_shift_ = (
            self._conformal_shift(design, targets["log_hours"]) if self.calibration_fraction > 0 else 0.0
        )
        self.models_ = {
            target: {alpha: self._fit_quantile(design, targets[target], target, alpha) for alpha in QUANTILES}
            for target in TARGETS
        }
        self.feature_names_in_ = np.array(TRAINING_SCHEMA.names, dtype=object)
        self.provenance_ = job_model_provenance(type(self).__name__, features, y, submit_times, now)
        return self

    def predict(self, x: pd.DataFrame) -> pd.DataFrame:
        """Columns ``gpus_p50``, ``gpus_p90`` (powers of two), ``hours_p50``, ``hours_p90``."""
        require_fitted(self, "models_")
        features = TRAINING_SCHEMA.validate_frame(x, source="TrainingEstimator.predict(x)")
        design = design_matrix(features)
        raw = {
            (target, alpha): self._predict_quantile(model, design, target)
            for target, by_alpha in self.models_.items()
            for alpha, model in by_alpha.items()
        }
        # Separate quantile fits can cross; the P90 is at least the P50.
        gpus_p50 = round_to_power_of_two(raw["log2_gpus", 0.5])
        gpus_p90 = np.maximum(gpus_p50, round_to_power_of_two(raw["log2_gpus", 0.9]))
        hours_p50 = np.exp(raw["log_hours", 0.5])
        hours_p90 = np.maximum(hours_p50, np.exp(raw["log_hours", 0.9] + self.p90_log_hours_shift_))
        return pd.DataFrame(
            {
                "gpus_p50": gpus_p50.astype(int),
                "gpus_p90": gpus_p90.astype(int),
                "hours_p50": hours_p50,
                "hours_p90": hours_p90,
            },
            index=x.index,
        )


class SizeOnlyBaseline(_JobEstimatorMixin, BaseEstimator):  # type: ignore[misc]  # sklearn is untyped
    """What the model size alone tells: per size seen in the history, the median and
    90th percentile of GPUs and hours; an unseen size takes the nearest seen one (in
    log space)."""

    def fit(self, x: pd.DataFrame, y: pd.DataFrame) -> Self:
        features = TRAINING_SCHEMA.validate_frame(x, source="SizeOnlyBaseline.fit(x)")
        targets = _targets(y, rows=len(features))
        frame = pd.DataFrame({"size": features["params_billion"].to_numpy(), **targets}, index=features.index)
        grouped = frame.groupby("size")
        self.sizes_ = np.array(sorted(frame["size"].unique()), dtype=float)
        self.table_ = pd.concat(
            {
                f"{target}_{int(alpha * 100)}": grouped[target].quantile(alpha)
                for target in TARGETS
                for alpha in QUANTILES
            },
            axis=1,
        ).reindex(self.sizes_)
        return self

    def predict(self, x: pd.DataFrame) -> pd.DataFrame:
        require_fitted(self, "table_")
        features = TRAINING_SCHEMA.validate_frame(x, source="SizeOnlyBaseline.predict(x)")
        log_sizes = np.log(self.sizes_)
        wanted = np.log(features["params_billion"].to_numpy(dtype=float))
        nearest = np.abs(wanted[:, None] - log_sizes[None, :]).argmin(axis=1)
        rows = self.table_.iloc[nearest]
        gpus_p50 = round_to_power_of_two(rows["log2_gpus_50"].to_numpy(dtype=float))
        gpus_p90 = np.maximum(gpus_p50, round_to_power_of_two(rows["log2_gpus_90"].to_numpy(dtype=float)))
        hours_p50 = np.exp(rows["log_hours_50"].to_numpy(dtype=float))
        return pd.DataFrame(
            {
                "gpus_p50": gpus_p50.astype(int),
                "gpus_p90": gpus_p90.astype(int),
                "hours_p50": hours_p50,
                "hours_p90": np.maximum(hours_p50, np.exp(rows["log_hours_90"].to_numpy())),
            },
            index=x.index,
        )


class AnalyticBaseline(_JobEstimatorMixin, BaseEstimator):  # type: ignore[misc]  # sklearn is untyped
    """The published formulas alone: GPUs from memory, hours from FLOPs at a textbook
    utilisation (features/job_costs.py). Fitting only learns the P90 margin: the 90th
    percentile of log(actual / analytic) hours on the history."""

    def fit(self, x: pd.DataFrame, y: pd.DataFrame) -> Self:
        features = TRAINING_SCHEMA.validate_frame(x, source="AnalyticBaseline.fit(x)")
        targets = _targets(y, rows=len(features))
        _, hours = job_costs.analytic_estimate(features)
        self.log_margin_p90_ = float(np.quantile(targets["log_hours"] - np.log(hours), 0.9))
        return self

    def predict(self, x: pd.DataFrame) -> pd.DataFrame:
        require_fitted(self, "log_margin_p90_")
        features = TRAINING_SCHEMA.validate_frame(x, source="AnalyticBaseline.predict(x)")
        gpus, hours = job_costs.analytic_estimate(features)
        return pd.DataFrame(
            {
                "gpus_p50": gpus.astype(int),
                "gpus_p90": gpus.astype(int),
                "hours_p50": hours,
                "hours_p90": np.maximum(hours, hours * np.exp(self.log_margin_p90_)),
            },
            index=x.index,
        )
