"""How a job ends: done, failed or cancelled, stopped through the executor when it runs, with
its history row for the forecasters. Below the submit path (``jobs/``), so the cycle's own
stops (a job past its time limit) and the faces' ``done``/``cancel`` end a job the same way."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from contract.errors import InputError
from contract.records import ApiToken, Job, JobState, Outcome, Scope
from gpuplan.app.core.ports import Executor
from gpuplan.app.core.tokens import NotFoundError, require, require_job
from storage.store import Store

if TYPE_CHECKING:
    import pandas as pd

#: The longest run a job may report (a year): a mistyped year would teach the history a run of centuries.
MAX_HOURS = 24 * 365

OUTCOMES: dict[str, Outcome] = {"ok": Outcome.OK, "failed": Outcome.FAILED, "cancelled": Outcome.CANCELLED}


def finish(
    store: Store, job_id: str, at: datetime, outcome: Outcome, *, started_at: datetime | None = None
) -> Job:
    """Mark ``job_id`` done at ``at``; it enters the job history; its GPUs are free for the rest of
    the hour (an amendment may add them, :func:`gpuplan.app.cycle.amend.occupied`).

    ``started_at``: when it really started (Slurm's start), for its history row; by default
    its recorded start (the hour it was committed in, or its submission if that came later).
    """
    job = store.job(job_id)
    if job is None:
        raise InputError("job_id", "the id of a submitted job", job_id)
    if job.state is JobState.DONE:
        raise InputError("job_id", "a job that is queued or running", f"{job_id} (already done)")
    if job.started_at is not None and at < job.started_at:
        raise InputError(
            "at", f"a time at or after the job's start {job.started_at.isoformat()}", at.isoformat()
        )
    if at < job.submitted_at:
        raise InputError(
            "at", f"a time at or after the job's submission {job.submitted_at.isoformat()}", at.isoformat()
        )
    began = job.started_at or job.submitted_at
    if at > began + timedelta(hours=MAX_HOURS):
        # The history learns from the run: a mistyped year would teach it a run of centuries.
        which = "start" if job.started_at is not None else "submission"
        raise InputError(
            "at",
            f"a time within {MAX_HOURS:,} hours (a year, the longest run) of the job's {which} "
            f"{began.isoformat()}",
            at.isoformat(),
        )
    history: dict[str, object] | None = None
    if started_at is not None and job.state is JobState.RUNNING:
        history = {"start_time": started_at, "slurm": None}
    return finish_job(store, job_id, at, outcome, history)


def finish_job(
    store: Store, job_id: str, at: datetime, outcome: Outcome, history_row: dict[str, object] | None = None
) -> Job:
    """Mark the job done and append its history row, validated against the history schema, in one transaction.

    Columns missing from ``history_row`` come from the stored job: ``job_id``, ``kind``,
    ``submit_time``, ``start_time`` (``at`` for a job that never started), ``end_time``
    (``at``), ``gpus`` (held, else estimated), ``outcome`` and the spec's features. Kinds
    the forecasters do not learn (``batch_inference``), and jobs submitted with stated
    hours instead of features, get no history row: there is nothing to learn from. A job
    that never started cannot end ``completed``: its zero duration would teach the estimators.
    """
    outcome = Outcome(outcome)

    def history(job: Job) -> pd.DataFrame | None:
        from features.job_features import SCHEMAS
        from training_data.history import validate_history

        if job.state is JobState.DONE:
            raise InputError(
                "job_id",
                "a queued or running job",
                job_id,
                hint=f"It already ended at {job.ended_at} ({job.outcome}).",
            )
        if job.started_at is None and outcome is Outcome.OK:
            names = {value: name for name, value in OUTCOMES.items()}  # the submitter's words
            raise InputError(
                "outcome",
                f"{names[Outcome.FAILED]!r} or {names[Outcome.CANCELLED]!r} for a job that never started",
                names[outcome],
                hint=f"Job {job_id} is still queued.",
            )
        started = job.started_at or at
        if at < started:
            raise InputError("at", f"at or after the job's start {started.isoformat()}", at.isoformat())
        given = set(job.spec) | set(history_row or {})
        if not (job.kind.is_forecast and set(SCHEMAS[job.kind].names) <= given):
            return None
        import pandas as pd

        merged: dict[str, object] = {
            **job.spec,
            "job_id": job.id,
            "kind": job.kind.value,
            "submit_time": job.submitted_at,
            "start_time": started,
            "end_time": at,
            "gpus": job.gpus or (job.estimate.gpus if job.estimate else None) or 1,
            "outcome": outcome.value,
            **(history_row or {}),
        }
        return validate_history(pd.DataFrame([merged]), source=f"the history row of job {job_id}")

    return store.finish_job(job_id, at, outcome, history)


def known_job(store: Store, job_id: str, token: ApiToken | None = None) -> Job:
    """The stored job (NotFoundError otherwise); a token must be allowed to read it."""
    job = store.job(job_id)
    if job is None:
        raise NotFoundError("job_id", "the id of a submitted job", job_id)
    if token is not None:
        require(token, Scope.READ)
    return job


def cancel(
    store: Store, job_id: str, at: datetime, executor: Executor | None, *, token: ApiToken | None = None
) -> Job:
    """Cancel a job: a queued one leaves the queue, a running one is stopped through the
    executor first; both end ``cancelled`` (the history keeps a job that ran)."""
    job = known_job(store, job_id)
    if token is not None:
        require_job(token, job)
    if job.state is JobState.DONE:
        raise InputError("job_id", "a job that is queued or running", f"{job_id} (already {job.outcome})")
    if job.state is JobState.RUNNING and executor is not None:
        executor.stop(job_id, at)
    return finish_job(store, job_id, max(at, job.started_at or at), Outcome.CANCELLED)
