"""The job forecasters as the service uses them: loaded once, asked per job."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.errors import InputError
from gpuplan.app.models import MODEL_FILES, load_job_estimator
from storage.records import Job, JobEstimate

if TYPE_CHECKING:
    from forecasting.job_forecast import JobForecast

log = logging.getLogger(__name__)


class Forecasters:
    """Loads each kind's estimator from ``models_dir`` on first use and keeps it."""

    def __init__(self, models_dir: Path) -> None:
        self.models_dir = models_dir
        self._loaded: dict[str, Any] = {}

    def forecast(self, kind: str, features: dict[str, object], *, source: str) -> JobForecast:
        """P50/P90 GPUs and hours for one spec; InputError when the spec or the model is wrong."""
        if kind not in self._loaded:
            self._loaded[kind] = load_job_estimator(self.models_dir, kind)
        forecast: JobForecast = self._loaded[kind].forecast_spec(features, source=source)
        return forecast

    def estimate(self, job: Job) -> JobEstimate | None:
        """The estimate the plan uses for a stored job, or None (logged) when it cannot be had."""
        explicit = explicit_estimate(job.spec)
        if explicit is not None:
            return explicit
        if job.kind not in MODEL_FILES:
            log.warning("job %s (%s) gives no hours and has no forecaster; left queued", job.id, job.kind)
            return None
        features = {k: v for k, v in job.spec.items() if k not in SPEC_KEYS}
        try:
            forecast = self.forecast(job.kind, features, source=f"job {job.id}")
        except InputError as error:
            log.warning("job %s cannot be forecast: %s", job.id, error)
            return None
        return estimate_of(forecast)


#: Keys of a job spec that are not forecaster features.
SPEC_KEYS = frozenset({"id", "kind", "priority", "gpus", "hours"})


def explicit_estimate(spec: dict[str, Any]) -> JobEstimate | None:
    """A spec that states ``gpus`` and ``hours`` is planned as stated (no forecaster)."""
    if "hours" not in spec or "gpus" not in spec:
        return None
    hours = float(spec["hours"])
    return JobEstimate(gpus=int(spec["gpus"]), hours_p50=hours, hours_p90=hours)


def estimate_of(forecast: JobForecast) -> JobEstimate:
    """GPUs from the forecast's P50 (what the job is launched with), hours at P50 and P90."""
    return JobEstimate(
        gpus=max(1, int(forecast.gpus.p50)),
        hours_p50=float(forecast.duration_hours.p50),
        hours_p90=float(forecast.duration_hours.p90),
    )
