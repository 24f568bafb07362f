"""The job forecasters as the service uses them: loaded once, asked per job."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.errors import InputError
from contract.records import Job, JobEstimate
from features.gpu_models import known_model
from gpuplan.app.core.models import MODEL_FILES, load_job_estimator

if TYPE_CHECKING:
    from forecasting.by_model import ModelHours
    from forecasting.job_forecast import JobForecast

log = logging.getLogger(__name__)


class Forecasters:
    """Loads each kind's estimator from ``models_dir`` on first use and keeps it."""

    def __init__(self, models_dir: Path) -> None:
        self.models_dir = models_dir
        self._loaded: dict[str, Any] = {}

    def forecast(self, kind: str, features: dict[str, object], *, source: str) -> JobForecast:
        """P50/P90 GPUs and hours for one spec; InputError when the spec or the model is wrong."""
        forecast: JobForecast = self._estimator(kind).forecast_spec(features, source=source)
        return forecast

    def forecast_on_models(
        self, kind: str, features: dict[str, object], models: Mapping[str, int], *, source: str
    ) -> ModelHours:
        """One spec's GPUs and hours on each of ``models`` (model -> the GPUs of its largest
        pool): :mod:`forecasting.by_model`."""
        choice: ModelHours = self._estimator(kind).forecast_on_models(features, models, source=source)
        return choice

    def _estimator(self, kind: str) -> Any:
        if kind not in self._loaded:
            self._loaded[kind] = load_job_estimator(self.models_dir, kind)
        return self._loaded[kind]

    def estimates(self, jobs: Sequence[Job]) -> dict[str, JobEstimate]:
        """Estimates for stored jobs, one model call per kind; a job that cannot be forecast is
        left out (logged) and stays queued."""
        import pandas as pd

        from features.job_features import SCHEMAS

        found: dict[str, JobEstimate] = {}
        by_kind: dict[str, list[tuple[str, pd.DataFrame]]] = {}
        for job in jobs:
            explicit = explicit_estimate(job.spec)
            if explicit is not None:
                found[job.id] = explicit
            elif job.kind not in MODEL_FILES:
                log.warning("job %s (%s) gives no hours and has no forecaster; left queued", job.id, job.kind)
            else:
                features = {k: v for k, v in job.spec.items() if k not in SPEC_KEYS}
                try:
                    frame = SCHEMAS[job.kind].validate_record(features, source=f"job {job.id}")
                except InputError as error:
                    log.warning("job %s cannot be forecast: %s", job.id, error)
                    continue
                by_kind.setdefault(job.kind, []).append((job.id, frame))
        for kind, rows in by_kind.items():
            estimator = self._estimator(kind)
            forecasts = estimator.forecast(pd.concat([frame for _, frame in rows], ignore_index=True))
            found.update((job_id, estimate_of(f)) for (job_id, _), f in zip(rows, forecasts, strict=True))
        return found


#: Keys of a job spec that are not forecaster features.
SPEC_KEYS = frozenset(
    {"id", "kind", "priority", "gpus", "hours", "time_limit_hours", "slurm", "gpu_models", "team"}
)


def kind_and_features(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A job spec without its queue keys (``id``, ``priority``, ``gpus``, ``hours``): the
    document :func:`gpuplan.app.jobs.jobspec.parse_job_spec` checks against the kind's schema."""
    return {k: v for k, v in spec.items() if k not in SPEC_KEYS - {"kind"}}


def explicit_estimate(spec: dict[str, Any]) -> JobEstimate | None:
    """A spec that states ``gpus`` and ``hours`` is planned as stated (no forecaster). Hours
    stated per GPU model (a mapping) are its ``by_model``, keyed by datasheet name, and its
    hours those on the first model listed (:func:`gpuplan.app.core.job_models.estimate_on_pools`
    keeps the cluster's models)."""
    if "hours" not in spec or "gpus" not in spec:
        return None
    stated = spec["hours"]
    if isinstance(stated, Mapping):
        by_model = {
            known_model(str(model)) or str(model): (float(h), float(h)) for model, h in stated.items()
        }
        first = next(iter(by_model.values()))[0]
        return JobEstimate(gpus=int(spec["gpus"]), hours_p50=first, hours_p90=first, by_model=by_model)
    hours = float(stated)
    return JobEstimate(gpus=int(spec["gpus"]), hours_p50=hours, hours_p90=hours)


def estimate_of(forecast: JobForecast) -> JobEstimate:
    """GPUs from the forecast's P50 (what the job is launched with), hours at P50 and P90."""
    return JobEstimate(
        gpus=max(1, int(forecast.gpus.p50)),
        hours_p50=float(forecast.duration_hours.p50),
        hours_p90=float(forecast.duration_hours.p90),
    )
