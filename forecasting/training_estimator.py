"""GPU count and duration of a training job, P50 and P90, from its 22 features.

``TrainingEstimator`` fits LightGBM with the quantile (pinball) objective (Koenker &
Bassett 1978; Ke et al. 2017 for LightGBM). Two inputs are derived inside the pipeline
from the analytic cost model (features/job_costs.py), the memory-bound GPU count and the
FLOPs-bound hours, so the trees learn the corrections the formulas miss (utilisation,
overheads, over-asks) instead of rediscovering 6N. Monotone constraints keep the
physics: more tokens, epochs or rollouts never shorten a job; a larger model never
needs fewer GPUs. (The pinball loss is a custom objective because LightGBM's built-in
``quantile`` objective refuses monotone constraints.)

The P90 hours are conditional on the job, in two steps:

1. **Quantile-boosted margin.** A second model boosts the 0.9 quantile of the log
   residual against the job's own P50, so the margin follows the job (a LoRA job's
   utilisation varies more than a full fine-tune's) instead of one offset for all.
   Boosting the P90 from one global start could not reach short jobs: a pinball step
   down is only 0.1 x the learning rate, so a 20-minute job kept a 20-hour P90.
2. **Mondrian conformal calibration** (conformalized quantile regression, Romano,
   Patterson & Candes 2019; Mondrian taxonomies, Vovk et al. 2005 ch. 4): fitted on
   the earlier jobs, scored on the latest ``calibration_fraction``, the shift that
   brings the P90 to 90% coverage is taken separately in each quintile of the
   predicted P50, so short and long jobs are each covered, not only on average.

Physics kept after the fit: the P90 is at least ``min_p90_ratio`` x the P50; a LoRA
job never takes more GPU-hours (or GPUs) than full fine-tuning of the same job; a spec
that fits in GPU memory on no GPU count is refused (features.job_costs).

The two baselines the evaluation compares against live here too:
``SizeOnlyBaseline`` (what a model's size alone tells) and ``AnalyticBaseline`` (the
published formulas at a textbook utilisation, no learning beyond a P90 margin).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import pandas as pd
from lightgbm import Booster, LGBMRegressor
from sklearn.base import BaseEstimator

from contract.errors import InputError
from contract.scenario import JobKind
from features import job_costs
from features.job_features import TRAINING_SCHEMA, FeatureType, is_lora, technique_of
from forecasting.by_model import ModelHours, forecast_by_model
from forecasting.job_forecast import (
    P50P90,
    FloatArray,
    JobForecast,
    job_model_provenance,
    require_fitted,
    round_to_power_of_two,
)
from forecasting.quantiles import conformal_quantile

logger = logging.getLogger(__name__)

QUANTILES = (0.5, 0.9)
TARGETS = ("log2_gpus", "log_hours")
P90_QUANTILE = 0.9
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
        JobForecast(JobKind.TRAINING, P50P90(gpus_p50, gpus_p90), P50P90(hours_p50, hours_p90))
        for gpus_p50, gpus_p90, hours_p50, hours_p90 in zip(*columns, strict=True)
    ]


@dataclass(frozen=True, slots=True)
class _QuantileModel:
    """One boosted quantile: the trees (a LightGBM booster, saved in its text format) and the
    constant added to the start they boost from."""

    booster: Booster
    offset: float


@dataclass(frozen=True, slots=True)
class _HoursModels:
    """The log-hours P50 and the P90 margin boosted on top of it."""

    p50: _QuantileModel
    margin_p90: _QuantileModel


@dataclass(frozen=True, slots=True, eq=False)
class _RawForecast:
    """The models' output for some jobs; ``full`` is the output for the LoRA rows
    (``lora``) recast as full fine-tuning, which caps them."""

    index: pd.Index
    gpus_p50: FloatArray
    gpus_p90: FloatArray
    log_p50: FloatArray
    log_p90: FloatArray
    lora: npt.NDArray[np.bool_]
    full: _RawForecast | None


@dataclass(frozen=True, slots=True)
class MondrianShift:
    """Conformal shifts of the log-hours P90, one per bin of the predicted log P50.

    Bins are the quintiles (``edges``) of the calibration jobs' predicted P50, each
    with its own shift (a Mondrian taxonomy, Vovk et al. 2005 ch. 4). Between bin
    centres the shift is interpolated (flat beyond the ends), and no segment falls
    faster than the P50 rises, so a longer P50 never gets a shorter P90.
    """

    edges_log_hours: tuple[float, ...]
    centres_log_hours: tuple[float, ...]
    shifts_log_hours: tuple[float, ...]

    @classmethod
    def bins_of(cls, log_p50: FloatArray, bins: int) -> MondrianShift:
        """Bins of ``log_p50``'s quantiles, no shift yet."""
        edges = np.quantile(log_p50, np.linspace(0.0, 1.0, bins + 1)[1:-1])
        bin_of = np.searchsorted(edges, log_p50, side="right")
        centres = tuple(float(np.median(log_p50[bin_of == index])) for index in range(bins))
        return cls(tuple(float(e) for e in edges), centres, (0.0,) * bins)

    def bin_of(self, log_p50: FloatArray) -> npt.NDArray[np.intp]:
        return np.searchsorted(np.asarray(self.edges_log_hours), log_p50, side="right")

    def raised_by(self, log_p50: FloatArray, scores: FloatArray) -> MondrianShift:
        """The shifts plus, per bin, the conformal P90 of ``scores`` (log actual minus
        log P90 of calibration jobs under the current shifts)."""
        bin_of = self.bin_of(log_p50)
        shifts = [
            shift + conformal_quantile(scores[bin_of == index], P90_QUANTILE)
            if (bin_of == index).any()
            else shift
            for index, shift in enumerate(self.shifts_log_hours)
        ]
        centres = self.centres_log_hours
        for index in range(1, len(shifts)):
            # Raise (never lower) a shift so that log P50 + shift stays non-decreasing.
            shifts[index] = max(shifts[index], shifts[index - 1] - (centres[index] - centres[index - 1]))
        return MondrianShift(self.edges_log_hours, centres, tuple(shifts))

    def __call__(self, log_p50: FloatArray) -> FloatArray:
        shift: FloatArray = np.interp(log_p50, self.centres_log_hours, self.shifts_log_hours)
        return shift


NO_SHIFT = MondrianShift((), (0.0,), (0.0,))
MIN_JOBS_PER_BIN = 20
#: Rounds of re-calibration through the caps. On the bundled history they move the
#: shifts by at most 0.046, 0.014, 0.008 and 0.007 log-hours: enough to settle.
CALIBRATION_ROUNDS = 4


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


def full_fine_tuning_of(features: pd.DataFrame) -> pd.DataFrame:
    """The same jobs as full fine-tuning: same technique, no adapters, a 16-bit base."""
    return features.assign(
        variant="full_" + technique_of(features),
        lora_rank=0.0,
        base_4bit=False,
    )


class TrainingEstimator(_JobEstimatorMixin, BaseEstimator):  # type: ignore[misc]  # sklearn is untyped
    """P50 and P90 of a training job's GPU count and wall-clock hours.

    Parameters
    ----------
    n_estimators, learning_rate, num_leaves, min_child_samples:
        LightGBM's boosting parameters, the same for every target and quantile.
    margin_estimators:
        Trees of the P90 margin model; it learns a small correction, so fewer suffice.
    calibration_fraction:
        The latest share of the jobs that calibrates the P90 (0: no calibration).
    calibration_bins:
        Bins of the predicted P50 with their own conformal shift (Mondrian); fewer when
        a bin would hold under 20 calibration jobs.
    min_p90_ratio:
        The least P90 / P50 of hours: no job's duration is known to better than this.
    random_state:
        Seed for LightGBM (its fits are deterministic with ``deterministic=True``).
    n_jobs:
        Threads for LightGBM. One by default: these fits are small, and on a shared
        2-core machine OpenMP threads spin-wait and ran 7x slower than one thread.

    Fitted attributes: ``gpu_models_`` (quantile -> boosted log2-GPU model),
    ``hours_models_``, ``p90_shift_`` (:class:`MondrianShift`), ``feature_names_in_`` and
    ``provenance_``.
    """

    def __init__(
        self,
        *,
        n_estimators: int = 200,
        learning_rate: float = 0.1,
        num_leaves: int = 31,
        min_child_samples: int = 20,
        margin_estimators: int = 100,
        calibration_fraction: float = 0.2,
        calibration_bins: int = 5,
        min_p90_ratio: float = 1.1,
        random_state: int = 0,
        n_jobs: int = 1,
    ) -> None:
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_child_samples = min_child_samples
        self.margin_estimators = margin_estimators
        self.calibration_fraction = calibration_fraction
        self.calibration_bins = calibration_bins
        self.min_p90_ratio = min_p90_ratio
        self.random_state = random_state
        self.n_jobs = n_jobs

    # ------------------------------------------------------------------ boosting
    def _regressor(self, target: str, alpha: float, columns: list[str], n_estimators: int) -> LGBMRegressor:
        constraints = [MONOTONE[target].get(name, 0) for name in columns]
        return LGBMRegressor(
            objective=PinballObjective(alpha),
            n_estimators=n_estimators,
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

    def _fit_quantile(
        self,
        design: pd.DataFrame,
        values: FloatArray,
        start: FloatArray,
        target: str,
        alpha: float,
        *,
        n_estimators: int | None = None,
    ) -> _QuantileModel:
        # A custom objective boosts from 0: start from ``start`` shifted by the
        # residual's quantile, so the trees learn what is left.
        residual = values - start
        offset = float(np.quantile(residual, alpha))
        regressor = self._regressor(target, alpha, list(design.columns), n_estimators or self.n_estimators)
        regressor.fit(design, residual - offset)
        logger.info("fitted %s at quantile %.2f on %d jobs", target, alpha, len(design))
        return _QuantileModel(regressor.booster_, offset)

    @staticmethod
    def _predict_quantile(model: _QuantileModel, design: pd.DataFrame, start: FloatArray) -> FloatArray:
        # A custom objective's booster predicts the raw score, as the fitted regressor did.
        return np.asarray(model.booster.predict(design), dtype=float) + model.offset + start

    def _fit_gpus(self, design: pd.DataFrame, log2_gpus: FloatArray) -> dict[float, _QuantileModel]:
        # GPUs start from the analytic memory count, so the trees only learn over-asks.
        start = design["analytic_log2_gpus"].to_numpy(dtype=float)
        return {
            alpha: self._fit_quantile(design, log2_gpus, start, "log2_gpus", alpha) for alpha in QUANTILES
        }

    def _fit_hours(self, design: pd.DataFrame, log_hours: FloatArray) -> _HoursModels:
        # The P50 starts from the overall median: a start at the analytic hours would
        # leave the trees a residual that falls with the analytic hours (start-up
        # overheads weigh on short jobs), which a +1 constraint on it would forbid.
        zeros = np.zeros(len(design))
        p50 = self._fit_quantile(design, log_hours, zeros, "log_hours", 0.5)
        # The P90 margin starts from the job's own P50, so it only learns the spread.
        # Its constraints are the P50's: the P90 is P50 + margin, both non-decreasing.
        start = self._predict_quantile(p50, design, zeros)
        margin = self._fit_quantile(
            design, log_hours, start, "log_hours", P90_QUANTILE, n_estimators=self.margin_estimators
        )
        return _HoursModels(p50, margin)

    # --------------------------------------------------------------- prediction
    def _predict_raw(
        self, features: pd.DataFrame, gpu_models: dict[float, _QuantileModel], hours: _HoursModels
    ) -> _RawForecast:
        """What the boosted models say, before calibration and caps; for LoRA rows, also
        what they say about the same jobs as full fine-tuning."""
        design = design_matrix(features)
        gpu_start = design["analytic_log2_gpus"].to_numpy(dtype=float)
        gpus_p50 = round_to_power_of_two(self._predict_quantile(gpu_models[0.5], design, gpu_start))
        gpus_p90 = np.maximum(
            gpus_p50, round_to_power_of_two(self._predict_quantile(gpu_models[0.9], design, gpu_start))
        )
        log_p50 = self._predict_quantile(hours.p50, design, np.zeros(len(design)))
        log_p90 = self._predict_quantile(hours.margin_p90, design, log_p50)
        lora = is_lora(features).to_numpy(dtype=bool)
        full = (
            self._predict_raw(full_fine_tuning_of(features[lora]), gpu_models, hours) if lora.any() else None
        )
        return _RawForecast(features.index, gpus_p50, gpus_p90, log_p50, log_p90, lora, full)

    def _finish(self, raw: _RawForecast, shift: MondrianShift, *, calibrating: bool = False) -> pd.DataFrame:
        """The forecast from the models' raw output: P90 shifted and at least
        ``min_p90_ratio`` x P50, LoRA capped by full fine-tuning.

        ``calibrating`` leaves the P90 as the models give it (the first conformal scores
        are measured on it): no shift, no minimum ratio, no P90 cap.
        """
        log_p50, log_p90 = raw.log_p50, raw.log_p90
        if not calibrating:
            log_p90 = np.maximum(log_p90 + shift(log_p50), log_p50 + math.log(self.min_p90_ratio))
        predicted = pd.DataFrame(
            {
                "gpus_p50": raw.gpus_p50,
                "gpus_p90": raw.gpus_p90,
                "hours_p50": np.exp(log_p50),
                "hours_p90": np.exp(np.maximum(log_p90, log_p50)),
            },
            index=raw.index,
        )
        if raw.full is not None:
            full = self._finish(raw.full, shift, calibrating=calibrating)
            predicted.loc[raw.lora] = self._cap_by_full(
                predicted.loc[raw.lora], full, calibrating=calibrating
            )
        return predicted

    def _cap_by_full(self, lora: pd.DataFrame, full: pd.DataFrame, *, calibrating: bool) -> pd.DataFrame:
        """LoRA never takes more GPUs or GPU-hours than full fine-tuning of the same job.

        It trains fewer weights with fewer FLOPs per token (4N vs 6N, Hu et al. 2021) in
        less memory; a forecast saying otherwise learned the history's lower LoRA
        utilisation, not physics. Each quantile is capped on its own, so what the boosted
        models keep monotone (more tokens never shorten a job) the cap keeps too: a cap
        that shrank the P50 by the P90's factor would shorten a job whose margin grew.
        The P50 then stays at most the P90 / ``min_p90_ratio``.
        """
        gpus_p50 = np.minimum(lora["gpus_p50"].to_numpy(), full["gpus_p50"].to_numpy())
        gpus_p90 = np.maximum(gpus_p50, np.minimum(lora["gpus_p90"].to_numpy(), full["gpus_p90"].to_numpy()))
        full_gpu_hours_p50 = (full["gpus_p50"] * full["hours_p50"]).to_numpy()
        hours_p50 = np.minimum(lora["hours_p50"].to_numpy(), full_gpu_hours_p50 / gpus_p50)
        hours_p90 = lora["hours_p90"].to_numpy()
        if calibrating:
            # The first conformal scores are measured on the models' own margin.
            hours_p90 = hours_p90 * hours_p50 / lora["hours_p50"].to_numpy()
        else:
            # The P90 reservation too, however GPUs and hours are paired.
            bound = np.minimum(
                (full["gpus_p90"] * full["hours_p90"]).to_numpy() / gpus_p90,
                (full["gpus_p50"] * full["hours_p90"]).to_numpy() / gpus_p50,
            )
            hours_p90 = np.minimum(hours_p90, bound)
            hours_p50 = np.minimum(hours_p50, hours_p90 / self.min_p90_ratio)
        return pd.DataFrame(
            {"gpus_p50": gpus_p50, "gpus_p90": gpus_p90, "hours_p50": hours_p50, "hours_p90": hours_p90},
            index=lora.index,
        )

    # -------------------------------------------------------------------- fitting
    def _calibrate(
        self, features: pd.DataFrame, log_hours: FloatArray, gpu_models: dict[float, _QuantileModel]
    ) -> MondrianShift:
        """Mondrian split-conformal shifts of the log-hours P90 (Romano et al. 2019).

        Fit the hours models on the earlier jobs, score the later ones by how far they
        exceed the P90, and take the conformal quantile of the scores within each
        quintile of the predicted P50: pinball-loss boosting covers well in-sample but
        drifts out of sample, and by different amounts for short and long jobs. The
        scores are re-measured on the finished forecast (minimum ratio, LoRA capped by
        full fine-tuning) for a few rounds: a capped LoRA P90 only rises when the full
        job's does, so its bin's shift must carry both.
        """
        cut = round(len(features) * (1.0 - self.calibration_fraction))
        held_out = len(features) - cut
        if self.calibration_fraction == 0 or cut < 50 or held_out < MIN_JOBS_PER_BIN:
            logger.info("too few jobs to calibrate the P90; leaving it uncalibrated")
            return NO_SHIFT
        head = self._fit_hours(design_matrix(features.iloc[:cut]), log_hours[:cut])
        tail_features, tail_hours = features.iloc[cut:], log_hours[cut:]
        raw = self._predict_raw(tail_features, gpu_models, head)
        first = self._finish(raw, NO_SHIFT, calibrating=True)
        log_p50 = np.log(first["hours_p50"].to_numpy(dtype=float))
        bins = max(1, min(self.calibration_bins, held_out // MIN_JOBS_PER_BIN))
        shift = MondrianShift.bins_of(log_p50, bins)
        shift = shift.raised_by(log_p50, tail_hours - np.log(first["hours_p90"].to_numpy(dtype=float)))
        for _ in range(CALIBRATION_ROUNDS):
            final = self._finish(raw, shift)
            scores = tail_hours - np.log(final["hours_p90"].to_numpy(dtype=float))
            shift = shift.raised_by(np.log(final["hours_p50"].to_numpy(dtype=float)), scores)
        return shift

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
        if not self.min_p90_ratio >= 1.0:
            raise InputError("min_p90_ratio", "a ratio >= 1", self.min_p90_ratio)
        if self.calibration_bins < 1:
            raise InputError("calibration_bins", "an integer >= 1", self.calibration_bins)
        features = TRAINING_SCHEMA.validate_frame(x, source="TrainingEstimator.fit(x)")
        if len(features) < MIN_TRAINING_JOBS:
            raise InputError("x", f"at least {MIN_TRAINING_JOBS} completed training jobs", len(features))
        targets = _targets(y, rows=len(features))
        design = design_matrix(features)
        self.gpu_models_ = self._fit_gpus(design, targets["log2_gpus"])
        # The GPU models are fitted once, on every job, and serve the calibration too:
        # the P90 shift depends on them only through the LoRA cap.
        self.p90_shift_ = self._calibrate(features, targets["log_hours"], self.gpu_models_)
        self.hours_models_ = self._fit_hours(design, targets["log_hours"])
        self.feature_names_in_ = np.array(TRAINING_SCHEMA.names, dtype=object)
        self.provenance_ = job_model_provenance(type(self).__name__, features, y, submit_times, now)
        return self

    # ------------------------------------------------------------------ as data
    def to_state(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The fitted numbers (offsets, the P90 shift) and the boosters in LightGBM's text
        format, by name: what :func:`forecasting.persistence.save_model` writes."""
        require_fitted(self, "hours_models_")
        models = {
            **{f"gpus_p{round(alpha * 100)}": model for alpha, model in self.gpu_models_.items()},
            "hours_p50": self.hours_models_.p50,
            "hours_margin_p90": self.hours_models_.margin_p90,
        }
        shift = self.p90_shift_
        state = {
            "offsets": {name: model.offset for name, model in models.items()},
            "p90_shift": {
                "edges_log_hours": list(shift.edges_log_hours),
                "centres_log_hours": list(shift.centres_log_hours),
                "shifts_log_hours": list(shift.shifts_log_hours),
            },
            "feature_names": [str(name) for name in self.feature_names_in_],
        }
        return state, {name: model.booster.model_to_string() for name, model in models.items()}

    @classmethod
    def from_state(cls, params: dict[str, Any], state: dict[str, Any], boosters: dict[str, str]) -> Self:
        """The estimator :meth:`to_state` described."""
        estimator = cls(**params)

        def model(name: str) -> _QuantileModel:
            return _QuantileModel(Booster(model_str=boosters[name]), float(state["offsets"][name]))

        estimator.gpu_models_ = {alpha: model(f"gpus_p{round(alpha * 100)}") for alpha in QUANTILES}
        estimator.hours_models_ = _HoursModels(model("hours_p50"), model("hours_margin_p90"))
        shift = state["p90_shift"]
        estimator.p90_shift_ = MondrianShift(
            tuple(map(float, shift["edges_log_hours"])),
            tuple(map(float, shift["centres_log_hours"])),
            tuple(map(float, shift["shifts_log_hours"])),
        )
        estimator.feature_names_in_ = np.array(state["feature_names"], dtype=object)
        return estimator

    def predict(self, x: pd.DataFrame) -> pd.DataFrame:
        """Columns ``gpus_p50``, ``gpus_p90`` (powers of two), ``hours_p50``, ``hours_p90``.

        A job that fits in GPU memory on no GPU count is refused (InputError saying why
        and what would fit), not forecast.
        """
        require_fitted(self, "hours_models_")
        source = "TrainingEstimator.predict(x)"
        features = TRAINING_SCHEMA.validate_frame(x, source=source)
        job_costs.require_fits_in_memory(features, source=source)
        logger.info(
            "%d of %d jobs fit only with more sharding than declared: forecast as sharding every state",
            int((~job_costs.fits_as_declared(features)).sum()),
            len(features),
        )
        raw = self._predict_raw(features, self.gpu_models_, self.hours_models_)
        predicted = self._finish(raw, self.p90_shift_)
        return predicted.astype({"gpus_p50": int, "gpus_p90": int}).set_axis(x.index)

    def forecast_on_models(
        self, spec: Mapping[str, object], models: Mapping[str, int], *, source: str
    ) -> ModelHours:
        """One job spec forecast on each of ``models`` (:func:`forecasting.by_model.forecast_by_model`)."""
        features = TRAINING_SCHEMA.validate_record(spec, source=source)
        return forecast_by_model(self, JobKind.TRAINING, features, models, source=source)

    def forecast_spec(self, spec: Mapping[str, object], *, source: str) -> JobForecast:
        """The forecast for one job spec; a spec that fits in no GPU memory is refused
        with an error naming ``source``, why, and what would fit."""
        features = TRAINING_SCHEMA.validate_record(spec, source=source)
        job_costs.require_fits_in_memory(features, source=source)
        if not job_costs.fits_as_declared(features)[0]:
            logger.warning(
                "%s: with sharding %s the job fits on no GPU count; forecast as sharding every "
                "state (ZeRO-3/FSDP), as the memory model and the job history do",
                source,
                features["sharding"].iloc[0],
            )
        return self.forecast(features)[0]


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
