"""The retrain use case: refit the job estimators and the real-time profiles, then save.

Order matters for the promise "a bad history overwrites no model": the history is
validated first, every estimator is fitted in memory, and only then is anything
written. Each job estimator is evaluated on a held-out, time-ordered split (fitted on
the earlier 80% of jobs, scored on the latest 20%) and then refitted on the whole
history for the saved model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.errors import InputError
from gpuplan.app.models import QUANTIZATION_MODEL_FILE, TRAINING_MODEL_FILE, realtime_model_file

if TYPE_CHECKING:
    import pandas as pd

    from forecasting.evaluation import QuantizationMetrics, TrainingMetrics

#: Steps reported to ``progress`` (one call per finished step, with its description).
RETRAIN_STEPS = 7


@dataclass(frozen=True)
class RetrainReport:
    """What a retrain learned from and how its models scored on held-out jobs."""

    history_source: str
    history_jobs: int
    training_jobs: int
    held_out_jobs: int
    training: list[TrainingMetrics]
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
    progress: Callable[[str], None] = lambda step: None,
) -> RetrainReport:
    """Fit every forecaster on ``history`` (validated) and the traffic series; save them all.

    ``traffic_paths`` empty fits the bundled series' profiles; None fits no profile (the
    service keeps its apps' profiles in its database).
    """
    from features.job_features import QUANTIZATION_SCHEMA, TRAINING_SCHEMA
    from forecasting.evaluation import quantization_metrics, time_split, training_metrics
    from forecasting.persistence import save_model
    from forecasting.quantization_estimator import QuantizationEstimator
    from forecasting.realtime_training import fit_profiles
    from forecasting.training_estimator import AnalyticBaseline, SizeOnlyBaseline, TrainingEstimator
    from training_data.history import completed_jobs

    training_jobs = completed_jobs(history, "training")
    quantization_jobs = completed_jobs(history, "quantization")
    if training_jobs.empty:
        raise InputError("kind", "at least some completed training jobs", "none", source=source)
    progress("history loaded")

    earlier, later = time_split(training_jobs)
    evaluation: list[TrainingMetrics] = []
    for name, candidate in (
        ("lightgbm (P50/P90)", TrainingEstimator()),
        ("size-only baseline", SizeOnlyBaseline()),
        ("analytic-FLOPs baseline", AnalyticBaseline()),
    ):
        candidate.fit(_inputs(earlier, TRAINING_SCHEMA.names), _targets(earlier))
        evaluation.append(training_metrics(name, candidate, later))
    progress("training estimator evaluated")

    staged: dict[str, Any] = {
        TRAINING_MODEL_FILE: TrainingEstimator().fit(
            _inputs(training_jobs, TRAINING_SCHEMA.names),
            _targets(training_jobs),
            submit_times=training_jobs["submit_time"],
        )
    }
    progress("training estimator fitted")

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
    progress("quantization estimator fitted")

    realtime_rows = []
    for series, profile, row in fit_profiles(traffic_paths) if traffic_paths is not None else []:
        staged[realtime_model_file(series)] = profile
        realtime_rows.append({**row, "path": str(models_dir / realtime_model_file(series))})
    progress("real-time profiles fitted")

    # Everything fitted: only now is anything written.
    written = [save_model(model, models_dir / name) for name, model in staged.items()]
    progress("saved")
    return RetrainReport(
        history_source=source,
        history_jobs=len(history),
        training_jobs=len(training_jobs),
        held_out_jobs=len(later),
        training=evaluation,
        quantization=quantization_rows,
        realtime=realtime_rows,
        written=written,
    )
