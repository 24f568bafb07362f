"""The batch jobs a simulation submits: drawn from the job history, or read from a CSV.

**Default workload.** The bundled job history is split by submit time, as
``gpuplan train`` evaluates: the estimators are fitted on the earlier 80% of jobs, and
simulated jobs are drawn from the later 20%. Each simulated job therefore carries a real
feature vector the estimators have never seen, and the duration it really ran (failed
and cancelled jobs included, which stop early), so the forecast misses exactly as it
would on the next jobs of that history. Jobs arrive as a Poisson process whose hourly
rate follows the daily and weekly pattern of Alibaba's openb GPU trace
(:mod:`training_data.arrivals`), scaled so that the batch work asked equals
:data:`OFFERED_LOAD` of the GPU-hours real-time demand leaves free. Priorities follow
the benchmark ranges per kind (``gpuplan/app/lab/synthetic.py``); a latency-sensitive pod of the
trace takes the upper half of its range, a best-effort one the lower half.

**CSV workload** (``--workload FILE``), one job a row: ``id, submit_hour, kind,
priority, gpus, actual_hours`` and either ``forecast_hours`` or the feature columns of
the job's kind (``gpuplan forecast job --schema``). Rows that break this get an
:class:`~contract.errors.InputError` naming the row and the column.

**With teams** (a config's ``teams:``) a row may name its team in a ``team`` column (empty:
no team); the job is submitted as that team's (docs/teams.md).

**On a cluster of several pools** (a config's ``cluster.pools``) a row may also say where the
job may run and how long it takes on each GPU model M of the pools (docs/pools.md):
``gpu_models`` (``any``, the default, or models joined by ``|``), ``forecast_hours:M`` and
``actual_hours:M``. ``forecast_hours`` and ``actual_hours`` are on the reference model, the
first pool's. A row with ``forecast_hours:M`` states its hours per model (``hours: {M: ...}``
in its spec): those columns and, on the reference model, ``forecast_hours``; a model it gives
no hours on is not one it runs on. Without them, the service moves the hours to each model
as it does a spec's (:mod:`gpuplan.app.core.job_models`). A job runs ``actual_hours:M`` on a
pool of M, or, where that is empty, ``actual_hours`` times its forecast's ratio on M to its
estimate's hours. The drawn workload on pools draws each job's models (``any`` for
``any_share`` of them, else one model) and its hours on each model from the reference
model's, times a factor per model and kind (:data:`~features.gpu_models.speed`'s ratio
unless given).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.errors import InputError
from contract.files import read_csv
from contract.records import Outcome
from contract.scenario import JobKind
from features.gpu_models import GPU_SPECS, known_model, speed
from features.job_features import SCHEMAS
from forecasting.evaluation import time_split
from forecasting.persistence import save_model
from forecasting.quantization_estimator import QuantizationEstimator
from forecasting.training_estimator import TrainingEstimator
from gpuplan.app.core.models import MODEL_FILES, load_job_estimator
from training_data.history import completed_jobs

if TYPE_CHECKING:
    import pandas as pd

    from training_data.arrivals import ArrivalPattern

#: Batch GPU-hours asked, as a share of the GPU-hours left after mean real-time demand.
#: Above 1 a FIFO cluster with peak reservations falls behind; that is the regime
#: where scheduling matters, and the benchmark shapes use 0.6-2.0.
OFFERED_LOAD = 0.9
#: A job may hold at most this share of the cluster (a wider one would wait for an
#: empty cluster under any policy, and the history's widest jobs are 512 GPUs).
MAX_JOB_SHARE = 0.25
#: Longer jobs are left out of the default draw: a two-day job is already two horizons.
MAX_JOB_HOURS = 48.0
#: A cluster is never empty on a Monday: the default workload starts with the queue of
#: the day before (jobs submitted in these hours before the first simulated hour).
BACKLOG_HOURS = 24
#: Priority ranges per kind, as in the benchmark shapes (gpuplan/app/lab/synthetic.py).
PRIORITY_RANGES: dict[JobKind, tuple[int, int]] = {
    JobKind.TRAINING: (40, 90),
    JobKind.BATCH_INFERENCE: (20, 60),
    JobKind.QUANTIZATION: (30, 70),
}
HELD_OUT_FRACTION = 0.2
#: On a cluster of several pools, the share of drawn jobs that may run on any of them.
ANY_SHARE = 0.5
#: The columns every workload CSV row has.
REQUIRED_COLUMNS = ("id", "submit_hour", "kind", "priority", "gpus", "actual_hours")


@dataclass(frozen=True, slots=True)
class SimJob:
    """One batch job of a simulation: what is submitted, and how long it really runs.

    ``gpus`` and ``forecast_hours`` are None when the estimators decide them from
    ``features`` at submission, as in production.
    """

    id: str
    submit_hour: float  # hours since the simulation starts (< 0: queued before it starts)
    kind: JobKind
    priority: float
    actual_hours: float
    gpus: int | None = None
    forecast_hours: float | None = None
    features: Mapping[str, Any] = field(default_factory=dict)
    outcome: Outcome = Outcome.OK
    #: The GPU models it may run on (datasheet names); empty: ``any``.
    gpu_models: tuple[str, ...] = ()
    #: Its stated hours per GPU model (empty: ``forecast_hours``, on the reference model).
    forecast_by_model: Mapping[str, float] = field(default_factory=dict)
    #: How long it really runs on a pool of each model (a model not here: see the module).
    actual_by_model: Mapping[str, float] = field(default_factory=dict)
    #: The team it is submitted for (the workload's ``team`` column; None: no team).
    team: str | None = None

    def spec(self) -> dict[str, Any]:
        """The submission as the service's submit use case takes it (features by name)."""
        spec: dict[str, Any] = {"id": self.id, "kind": self.kind.value, "priority": self.priority}
        if self.gpus is not None:
            spec["gpus"] = self.gpus
        if self.forecast_by_model:
            spec["hours"] = dict(self.forecast_by_model)
        elif self.forecast_hours is not None:
            spec["hours"] = self.forecast_hours
        if self.gpu_models:
            spec["gpu_models"] = list(self.gpu_models)
        return {**spec, **self.features}


# --- the default workload ------------------------------------------------------------


@dataclass(frozen=True)
class JobPool:
    """History jobs the estimators did not learn from, with what they really did.

    ``jobs`` has the kind, the features of its kind, ``actual_hours``, ``outcome`` and
    the held-out estimators' ``gpus_p50/p90`` and ``hours_p50/p90``.
    """

    jobs: pd.DataFrame
    source: str

    def fitting(self, cluster_gpus: int) -> pd.DataFrame:
        """The jobs a cluster of ``cluster_gpus`` runs: narrow enough, at most two days."""
        jobs = self.jobs
        widest = max(1, int(cluster_gpus * MAX_JOB_SHARE))
        keep = (
            (jobs["gpus_p90"] <= widest)
            & (jobs["hours_p90"] <= MAX_JOB_HOURS)
            & (jobs["actual_hours"] <= MAX_JOB_HOURS)
        )
        return jobs[keep].reset_index(drop=True)


def held_out_split(history: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(earlier, later) jobs of a validated history, by submit time (all kinds together)."""

    return time_split(history, test_fraction=HELD_OUT_FRACTION)


def fit_held_out_models(earlier: pd.DataFrame, models_dir: Path) -> list[Path]:
    """Fit the job estimators on the earlier jobs only and save them in ``models_dir``."""

    written = []
    for kind, estimator in (("training", TrainingEstimator()), ("quantization", QuantizationEstimator())):
        jobs = completed_jobs(earlier, kind)  # type: ignore[arg-type]  # the literal kinds of the history
        if jobs.empty:
            continue
        estimator.fit(
            jobs[list(SCHEMAS[kind].names)],  # type: ignore[index]
            jobs[["gpus", "duration_hours"]],
            submit_times=jobs["submit_time"],
        )
        written.append(save_model(estimator, models_dir / MODEL_FILES[kind]))
    return written


def job_pool(later: pd.DataFrame, models_dir: Path, *, source: str) -> JobPool:
    """The later jobs with their actual hours and the forecasts of the models in ``models_dir``."""
    import pandas as pd

    frames = []
    for kind, schema in SCHEMAS.items():
        rows = later[later["kind"] == kind].reset_index(drop=True)
        if rows.empty:
            continue
        features = rows[list(schema.names)]
        forecast = load_job_estimator(models_dir, kind).predict(features)
        frame = pd.DataFrame(
            {
                "kind": kind,
                "features": features.to_dict(orient="records"),
                "actual_hours": (rows["end_time"] - rows["start_time"]).dt.total_seconds() / 3600.0,
                "outcome": rows["outcome"].to_numpy(),
                **{c: forecast[c].to_numpy() for c in ("gpus_p50", "gpus_p90", "hours_p50", "hours_p90")},
            }
        )
        frames.append(frame)
    jobs = pd.concat(frames, ignore_index=True)
    # A job that failed in its first second still held its GPUs for that second.
    jobs = jobs[jobs["actual_hours"] > 0].reset_index(drop=True)
    return JobPool(jobs=jobs, source=source)


def draw_workload(
    pool: JobPool,
    pattern: ArrivalPattern,
    *,
    hours: int,
    cluster_gpus: int,
    free_gpus: float,
    seed: int,
    models: Sequence[str] = (),
    hours_factor: Mapping[str, Mapping[JobKind, float]] | None = None,
    any_share: float = ANY_SHARE,
) -> list[SimJob]:
    """Jobs arriving over ``hours`` hours (and the :data:`BACKLOG_HOURS` before, with negative
    submit hours), asking :data:`OFFERED_LOAD` x ``free_gpus`` GPUs on average.

    ``free_gpus`` is the cluster minus the mean real-time demand the simulation expects
    (from history, so the draw does not peek at the simulated days).

    With several GPU ``models`` (the pools', datasheet names, the reference first), each job
    states its GPUs (its P50 count) and its hours per model (:func:`on_models`); the draw of
    arrivals and jobs is the one-pool draw's, the models drawn from a stream of their own.
    """
    candidates = pool.fitting(cluster_gpus)
    if candidates.empty:
        raise InputError(
            "--gpus",
            f"a cluster wide enough for the history's jobs (a job may take {MAX_JOB_SHARE:.0%} of it)",
            cluster_gpus,
        )
    rng = np.random.default_rng(seed)
    model_rng = np.random.default_rng([seed, 1])  # the pools' draws leave the one-pool draw as it was
    # Jobs launch with the P50 GPU count (gpuplan.app.core.forecasters.estimate_of).
    mean_gpu_hours = float((candidates["gpus_p50"] * candidates["actual_hours"]).mean())
    jobs_per_hour = OFFERED_LOAD * max(free_gpus, 0.0) / mean_gpu_hours
    kinds = candidates["kind"].to_numpy()
    jobs: list[SimJob] = []
    for hour in range(-BACKLOG_HOURS, hours):
        arrivals = int(rng.poisson(jobs_per_hour * pattern.rate[hour % pattern.rate.size]))
        for offset in np.sort(rng.uniform(0.0, 1.0, arrivals)):
            row = int(rng.integers(len(candidates)))
            kind = JobKind(str(kinds[row]))
            low, high = PRIORITY_RANGES[kind]
            middle = (low + high) // 2
            latency_sensitive = rng.random() < pattern.latency_sensitive_share
            priority = rng.integers(middle, high + 1) if latency_sensitive else rng.integers(low, middle)
            picked = candidates.iloc[row]
            job = SimJob(
                id=f"{kind.value}-{len(jobs):04d}",
                submit_hour=round(hour + float(offset), 4),
                kind=kind,
                priority=float(priority),
                actual_hours=float(picked["actual_hours"]),
                features=dict(picked["features"]),
                outcome=Outcome(str(picked["outcome"])),
            )
            if len(models) > 1:
                job = on_models(
                    job,
                    gpus=int(picked["gpus_p50"]),
                    forecast_hours=float(picked["hours_p90"]),
                    models=models,
                    factors=hours_factor or {},
                    rng=model_rng,
                    any_share=any_share,
                )
            jobs.append(job)
    return jobs


def on_models(
    job: SimJob,
    *,
    gpus: int,
    forecast_hours: float,
    models: Sequence[str],
    factors: Mapping[str, Mapping[JobKind, float]],
    rng: np.random.Generator,
    any_share: float,
) -> SimJob:
    """A drawn job on a cluster of ``models`` (the reference first): ``any`` for ``any_share``
    of the jobs, else one model drawn alike; on each model, its actual and forecast hours are
    the reference's times the model's factor for its kind (``factors``; default the datasheet's
    speed ratio, :func:`features.gpu_models.speed`, 1 for a model it does not know). It states
    ``gpus`` (rounded down to a power of two) and those hours, so the plan reads them as given."""
    allowed = tuple(models) if rng.random() < any_share else (models[int(rng.integers(len(models)))],)
    reference = models[0]

    def factor(model: str) -> float:
        given = factors.get(model, {}).get(job.kind)
        if given is not None:
            return float(given)
        if model in GPU_SPECS and reference in GPU_SPECS:
            return speed(job.kind, reference) / speed(job.kind, model)
        return 1.0

    return replace(
        job,
        gpus=1 << (max(1, gpus).bit_length() - 1),
        features={},
        gpu_models=() if len(allowed) == len(models) else allowed,
        forecast_by_model={m: round(forecast_hours * factor(m), 4) for m in allowed},
        actual_by_model={m: job.actual_hours * factor(m) for m in allowed},
    )


# --- a workload CSV --------------------------------------------------------------------


def read_workload(
    path: Path, *, cluster_gpus: int, models: Sequence[str] = (), teams: Sequence[str] = ()
) -> list[SimJob]:
    """The jobs of a workload CSV, validated; errors name the row and the column. ``models``:
    the GPU models of the cluster's pools (datasheet names, the reference first), which the
    columns of a cluster of several pools name (see the module); ``teams``: the config's team
    names, one of which a ``team`` cell must be (empty: the column is refused)."""
    import pandas as pd

    source = str(path)
    frame = read_csv(path, "--workload", dtype=str, keep_default_na=False)
    frame.columns = [str(c).strip() for c in frame.columns]
    per_model = _model_columns(list(frame.columns), models, source=source)
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(
            "columns",
            "to include " + ", ".join(REQUIRED_COLUMNS),
            sorted(frame.columns),
            source=source,
            hint=f"Missing: {', '.join(missing)}.",
        )
    if frame.empty:
        raise InputError("rows", "at least one job", 0, source=source)
    labels = pd.Series([_row_label(i) for i in range(len(frame))], index=frame.index)
    has_forecast = "forecast_hours" in frame.columns
    if "team" in frame.columns and not teams:
        raise InputError(
            "columns",
            "a team column only with the config's teams (--config with a teams: section)",
            "team",
            source=source,
        )
    seen: set[str] = set()
    jobs: list[SimJob] = []
    featured: dict[JobKind, list[int]] = {}
    for i, row in frame.iterrows():
        index = int(str(i))
        where = _row_label(index)

        def bad(column: str, expected: str, where: str = where, row: pd.Series = row) -> InputError:
            return InputError(
                column, expected, row[column], source=source, hint=f"Broken at {where}.", in_file=True
            )

        job_id = row["id"].strip()
        if not job_id or job_id in seen:
            raise bad("id", "a unique, non-empty job id")
        seen.add(job_id)
        submit_hour = _number(row["submit_hour"])
        if submit_hour is None or submit_hour < 0:
            raise bad("submit_hour", "a number of hours >= 0 since the simulation starts")
        try:
            kind = JobKind(row["kind"].strip().lower())
        except ValueError:
            kind = JobKind.REALTIME
        if not kind.is_batch:
            raise bad("kind", "one of training, batch_inference, quantization")
        priority = _number(row["priority"])
        if priority is None or priority <= 0:
            raise bad("priority", "a number > 0")
        gpus = _number(row["gpus"])
        if gpus is None or gpus < 1 or gpus != int(gpus) or int(gpus) & (int(gpus) - 1):
            raise bad("gpus", "a power of two (1, 2, 4, 8, ...)")
        if gpus > cluster_gpus:
            raise bad("gpus", f"at most the cluster's {cluster_gpus} GPUs (--gpus)")
        actual_hours = _number(row["actual_hours"])
        if actual_hours is None or actual_hours <= 0:
            raise bad("actual_hours", "a number of hours > 0")
        forecast_text = row["forecast_hours"].strip() if has_forecast else ""
        forecast_hours = _number(forecast_text) if forecast_text else None
        if forecast_text and (forecast_hours is None or forecast_hours <= 0):
            raise bad("forecast_hours", "a number of hours > 0, or empty to forecast from the features")
        if forecast_hours is None:
            if kind not in SCHEMAS:
                raise bad(
                    "forecast_hours" if has_forecast else "kind",
                    f"given for a {kind.value} job (only training and quantization jobs have features "
                    "the estimators forecast from)",
                )
            featured.setdefault(kind, []).append(index)
        job = SimJob(
            id=job_id,
            submit_hour=submit_hour,
            kind=kind,
            priority=priority,
            actual_hours=actual_hours,
            gpus=int(gpus),
            forecast_hours=forecast_hours,
        )
        if len(models) > 1:
            job = _row_on_models(job, row, per_model, models, bad)
        team = str(row.get("team", "")).strip()
        if team:
            if team not in teams:
                raise bad("team", f"one of the config's teams {list(teams)}, or empty for no team")
            job = replace(job, team=team)
        jobs.append(job)
    # Feature columns: the estimator schema checks every value and names rows and columns.
    for kind, rows in featured.items():
        schema = SCHEMAS[kind.value]  # type: ignore[index]
        features = schema.validate_frame(
            frame.loc[rows].replace("", None), source=source, row_labels=labels.loc[rows]
        )
        for index, record in zip(rows, features.to_dict(orient="records"), strict=True):
            jobs[index] = _with_features(jobs[index], {str(k): v for k, v in record.items()})
    return sorted(jobs, key=lambda job: job.submit_hour)


#: A workload column of hours on one GPU model: ``forecast_hours:M``, ``actual_hours:M``.
MODEL_HOURS_COLUMNS = ("forecast_hours", "actual_hours")


def _model_columns(columns: Sequence[str], models: Sequence[str], *, source: str) -> dict[str, str]:
    """The columns of hours per GPU model (column -> the model's datasheet name) and ``gpu_models``,
    checked: only on a cluster of several pools, each naming a model of its pools."""
    found: dict[str, str] = {}
    for column in columns:
        base, colon, name = column.partition(":")
        if not colon and column != "gpu_models":
            continue
        if len(models) <= 1:
            raise InputError(
                "columns",
                "gpu_models and hours per GPU model only on a cluster of several pools "
                "(--config with cluster.pools)",
                column,
                source=source,
            )
        if not colon:
            continue
        model = known_model(name) or name.strip()
        if base not in MODEL_HOURS_COLUMNS or model not in models:
            raise InputError(
                "columns",
                f"hours per GPU model as forecast_hours:M or actual_hours:M, M a GPU model of the "
                f"cluster's pools {list(models)}",
                column,
                source=source,
            )
        found[column] = model
    return found


def _row_on_models(
    job: SimJob,
    row: pd.Series,
    per_model: Mapping[str, str],
    models: Sequence[str],
    bad: Callable[[str, str], InputError],
) -> SimJob:
    """A row's ``gpu_models`` and hours per model (see the module), checked."""
    allowed: tuple[str, ...] = ()
    text = str(row.get("gpu_models", "")).strip()
    if text and text.lower() != "any":
        names = [name.strip() for name in text.split("|")]
        keys = [known_model(name) or name for name in names]
        if not all(names) or any(key not in models for key in keys):
            raise bad(
                "gpu_models", f"'any' or GPU models of the cluster's pools {list(models)} joined by '|'"
            )
        allowed = tuple(dict.fromkeys(keys))
    hours: dict[str, dict[str, float]] = {base: {} for base in MODEL_HOURS_COLUMNS}
    for column, model in per_model.items():
        cell = str(row[column]).strip()
        if not cell:
            continue
        value = _number(cell)
        if value is None or value <= 0:
            raise bad(column, "a number of hours > 0, or empty")
        hours[column.partition(":")[0]][model] = value
    forecast = hours["forecast_hours"]
    if forecast:
        if job.forecast_hours is not None:
            forecast = {models[0]: job.forecast_hours, **forecast}
        forecast = {model: forecast[model] for model in models if model in forecast}
    return replace(job, gpu_models=allowed, forecast_by_model=forecast, actual_by_model=hours["actual_hours"])


def _row_label(index: int) -> str:
    return f"row {index + 1} (line {index + 2})"


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _with_features(job: SimJob, features: Mapping[str, Any]) -> SimJob:
    plain = {k: v.item() if isinstance(v, np.generic) else v for k, v in features.items()}
    return replace(job, features=plain)
