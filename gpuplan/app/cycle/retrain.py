"""The retrain use case: refit the job estimators and the real-time profiles, then save.

Order matters for the promise "a bad history overwrites no model": the models folder
is checked first (before minutes of fitting), the history is validated, every
estimator is fitted in memory, and only then is anything written, all files at once
(:func:`contract.files.replace_files`: staged beside the old ones, then renamed in).

Each job estimator is evaluated on a held-out, time-ordered split (fitted on the
earlier 80% of jobs, scored on the latest 20%) and then refitted on the whole history
for the saved model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.errors import InputError
from contract.files import check_writable_dir, replace_files
from contract.scenario import JobKind
from features.job_features import QUANTIZATION_SCHEMA, TRAINING_SCHEMA
from forecasting.evaluation import (
    TEST_FRACTION,
    quantization_metrics,
    slice_metrics,
    time_split,
    training_metrics,
)
from forecasting.persistence import model_files
from forecasting.quantization_estimator import QuantizationEstimator
from forecasting.realtime_training import fit_profiles
from forecasting.training_estimator import (
    MIN_TRAINING_JOBS,
    AnalyticBaseline,
    SizeOnlyBaseline,
    TrainingEstimator,
)
from gpuplan.app.core.models import QUANTIZATION_MODEL_FILE, TRAINING_MODEL_FILE, realtime_model_file
from training_data.history import completed_jobs

if TYPE_CHECKING:
    import pandas as pd

    from forecasting.evaluation import QuantizationMetrics, SliceMetrics, TrainingMetrics

#: Steps reported to ``progress`` (one call per finished step, with its description).
RETRAIN_STEPS = 7
#: How errors name the models folder (the command line's option).
MODELS_OPTION = "--models"


@dataclass(frozen=True)
class RetrainReport:
    """What a retrain learned from and how its models scored on held-out jobs."""

    history_source: str
    history_jobs: int
    training_jobs: int
    held_out_jobs: int
    training: list[TrainingMetrics]
    #: The estimator's P90 coverage and sharpness per quintile of predicted P50 hours
    #: and per predicted GPU count, beside the analytic baseline's coverage.
    training_slices: list[SliceMetrics]
    quantization: list[QuantizationMetrics]
    realtime: list[dict[str, object]]
    written: list[Path] = field(default_factory=list)


def _inputs(jobs: pd.DataFrame, names: tuple[str, ...]) -> pd.DataFrame:
    return jobs[list(names)]


def _targets(jobs: pd.DataFrame) -> pd.DataFrame:
    return jobs[["gpus", "duration_hours"]]


def retrain(
    history: pd.DataFrame,
    *,
    source: str,
    models_dir: Path,
    traffic_paths: Sequence[Path] | None = (),
    requests_column: str | None = None,
    progress: Callable[[str], None] = lambda step: None,
) -> RetrainReport:
    """Fit every forecaster on ``history`` (validated) and the traffic series; save them all.

    ``traffic_paths`` empty fits the bundled series' profiles; None fits no profile (the
    service keeps its apps' profiles in its database).
    """

    check_writable_dir(models_dir, MODELS_OPTION)
    training_jobs, quantization_jobs = _checked_history(history, source)
    progress("history loaded")

    # The traffic files are read (and the profiles fitted) before the long job fits, so a
    # bad file stops the retrain at once.
    staged: dict[str, Any] = {}
    realtime_rows = _fit_profiles(staged, models_dir, traffic_paths, requests_column)
    progress("real-time profiles fitted")
    training = _fit_training(staged, training_jobs, progress)
    quantization_rows = _fit_quantization(staged, quantization_jobs)
    progress("quantization estimator fitted")

    # Everything fitted: only now is anything written, every file or none.
    files: dict[str, bytes] = {}
    for name, model in staged.items():
        files.update(model_files(model, models_dir / name))
    replace_files(models_dir, files, MODELS_OPTION)
    written = [models_dir / name for name in staged]
    progress("saved")
    return RetrainReport(
        history_source=source,
        history_jobs=len(history),
        training_jobs=len(training_jobs),
        held_out_jobs=training.held_out_jobs,
        training=training.evaluation,
        training_slices=training.slices,
        quantization=quantization_rows,
        realtime=realtime_rows,
        written=written,
    )


def _checked_history(history: pd.DataFrame, source: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The completed training and quantization jobs of ``history``, each enough to fit on the
    earlier share of jobs (the evaluation's) and to evaluate on the rest."""

    training_jobs = completed_jobs(history, JobKind.TRAINING)
    quantization_jobs = completed_jobs(history, JobKind.QUANTIZATION)
    # The evaluation fits on the earlier share of jobs, which must reach the estimator's minimum.
    needed = math.ceil(MIN_TRAINING_JOBS / (1 - TEST_FRACTION))
    if len(training_jobs) < needed:
        raise InputError(
            "history",
            f"at least {needed} completed training jobs ({MIN_TRAINING_JOBS} to fit, plus the "
            f"{TEST_FRACTION:.0%} held out to evaluate)",
            f"{len(training_jobs)} completed training jobs among {len(history)} jobs",
            source=source,
        )
    if not quantization_jobs.empty:
        per_algorithm = time_split(quantization_jobs)[0]["algorithm"].value_counts()
        minimum = QuantizationEstimator().min_jobs_per_tier
        if per_algorithm.max(skipna=True) < minimum:
            raise InputError(
                "history",
                f"no completed quantization jobs, or at least {math.ceil(minimum / (1 - TEST_FRACTION))} "
                f"of one algorithm ({minimum} to fit, plus the {TEST_FRACTION:.0%} held out)",
                f"{len(quantization_jobs)} jobs: "
                + ", ".join(
                    f"{name} {count}" for name, count in quantization_jobs["algorithm"].value_counts().items()
                ),
                source=source,
            )
    return training_jobs, quantization_jobs


def _fit_profiles(
    staged: dict[str, Any],
    models_dir: Path,
    traffic_paths: Sequence[Path] | None,
    requests_column: str | None,
) -> list[dict[str, object]]:
    """Each traffic series' real-time profile into ``staged``; the report's rows."""

    realtime_rows = []
    fitted = [] if traffic_paths is None else fit_profiles(traffic_paths, requests_column=requests_column)
    for series, profile, row in fitted:
        staged[realtime_model_file(series)] = profile
        realtime_rows.append({**row, "path": str(models_dir / realtime_model_file(series))})
    return realtime_rows


@dataclass(frozen=True)
class _TrainingScores:
    """The training estimator and the baselines scored on the held-out jobs."""

    held_out_jobs: int
    evaluation: list[TrainingMetrics]
    slices: list[SliceMetrics]


def _fit_training(
    staged: dict[str, Any], training_jobs: pd.DataFrame, progress: Callable[[str], None]
) -> _TrainingScores:
    """The training estimator and both baselines fitted on the earlier jobs and scored on the
    later ones, then the estimator fitted on every job into ``staged``."""

    earlier, later = time_split(training_jobs)
    estimator, analytic = TrainingEstimator(), AnalyticBaseline()
    evaluation: list[TrainingMetrics] = []
    predictions: dict[str, pd.DataFrame] = {}  # each model predicts the test jobs once
    lightgbm, analytic_name = "lightgbm (P50/P90)", "analytic-FLOPs baseline"
    for name, candidate in (
        (lightgbm, estimator),
        ("size-only baseline", SizeOnlyBaseline()),
        (analytic_name, analytic),
    ):
        candidate.fit(_inputs(earlier, TRAINING_SCHEMA.names), _targets(earlier))
        predictions[name] = candidate.predict(_inputs(later, TRAINING_SCHEMA.names))
        evaluation.append(training_metrics(name, candidate, later, predicted=predictions[name]))
    slices = slice_metrics(
        estimator, analytic, later, predicted=predictions[lightgbm], baseline=predictions[analytic_name]
    )
    progress("training estimator evaluated")

    staged[TRAINING_MODEL_FILE] = TrainingEstimator().fit(
        _inputs(training_jobs, TRAINING_SCHEMA.names),
        _targets(training_jobs),
        submit_times=training_jobs["submit_time"],
    )
    progress("training estimator fitted")
    return _TrainingScores(len(later), evaluation, slices)


def _fit_quantization(staged: dict[str, Any], quantization_jobs: pd.DataFrame) -> list[QuantizationMetrics]:
    """The quantization estimator (if there are such jobs) scored on the later jobs, then fitted
    on every job into ``staged``."""

    quantization_rows: list[QuantizationMetrics] = []
    if not quantization_jobs.empty:
        earlier_q, later_q = time_split(quantization_jobs)
        held_out = QuantizationEstimator().fit(
            _inputs(earlier_q, QUANTIZATION_SCHEMA.names), _targets(earlier_q)
        )
        quantization_rows.append(quantization_metrics("tiered OLS + margin", held_out, later_q))
        staged[QUANTIZATION_MODEL_FILE] = QuantizationEstimator().fit(
            _inputs(quantization_jobs, QUANTIZATION_SCHEMA.names),
            _targets(quantization_jobs),
            submit_times=quantization_jobs["submit_time"],
        )
    return quantization_rows
