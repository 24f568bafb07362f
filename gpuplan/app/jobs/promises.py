"""What a job is promised at submit: the plan's start, moved later by the work expected to
arrive before it and outrank it (docs/closed-loop.md, "The promise").

The plan at submit sees only the jobs already queued. Higher-priority work that arrives
while a job waits goes ahead of it, so a start far out in that plan is the start the job
gets only if nothing better arrives. The promise counts what the recent arrivals say will
come: the batch GPU-hours submitted in the last ``lookback_hours`` by jobs of a higher
priority, per hour, are a share ``load`` of the GPUs the plan leaves to batch work (the
cluster less its down and real-time GPUs, on the mean over the plan's horizon). While the
job waits, that share of the batch GPUs goes to arrivals ahead of it, so what is ahead of it
drains at ``1 - load`` of the pace the plan assumes: a start ``lead`` hours after the submit
in the plan is promised ``lead / (1 - load)`` hours after it, to the hour, with ``load`` at
most :data:`MAX_LOAD` (then the promise is at most ``1 / (1 - MAX_LOAD)`` times the plan's
lead). A job the plan starts by the submit, or one nothing outranks, is promised the plan's
start. The arrivals never enter a plan: they only move the promise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from contract.records import Job, PlanRun
from gpuplan.app.core.bridge import STEP, planned_hours, planned_places
from gpuplan.app.core.config import PlanWith, ServiceConfig

if TYPE_CHECKING:
    from storage.store import Store

#: The highest share of the batch GPUs the arrivals ahead of a job are taken to claim.
MAX_LOAD = 0.75


def batch_gpus(run: PlanRun) -> float:
    """The GPUs ``run`` leaves to batch work, on the mean over its horizon: the cluster less
    the GPUs down and those it plans for real-time apps."""
    horizon = len(run.grid[0]) if run.grid else 0
    if not horizon:
        return float(len(run.grid))
    realtime = {job["id"] for job in run.scenario.get("jobs", []) if job.get("kind") == "realtime"}
    held = sum(cell in realtime for row in run.grid for cell in row)
    down = sum(
        max(0, min(horizon, int(w["end"])) - max(0, int(w["start"]))) for w in run.scenario.get("down", [])
    )
    return max(0.0, len(run.grid) - (held + down) / horizon)


def arrival_load(
    job: Job, arrivals: Sequence[Job], *, lookback_hours: int, capacity: float, plan_with: PlanWith
) -> float:
    """The share of ``capacity`` GPUs that the ``arrivals`` before ``job`` (in submission
    order, within the ``lookback_hours`` before its submission) of a higher priority claimed
    per hour (their planned GPU-hours), at most :data:`MAX_LOAD`. The hours before the
    first of them, when it came later, are not counted; the work submitted after ``job`` is
    in the plan its promise is made from."""
    order = [a.id for a in arrivals]
    before = arrivals[: order.index(job.id)] if job.id in order else arrivals
    since = job.submitted_at - timedelta(hours=lookback_hours)
    recent = [a for a in before if since <= a.submitted_at <= job.submitted_at and a.estimate is not None]
    if not recent or lookback_hours <= 0 or capacity <= 0:
        return 0.0
    hours = min(float(lookback_hours), max(1.0, (job.submitted_at - recent[0].submitted_at) / STEP))
    ahead = sum(
        a.estimate.gpus * planned_hours(a.estimate, plan_with)
        for a in recent
        if a.estimate is not None and a.priority > job.priority
    )
    return min(MAX_LOAD, ahead / hours / capacity)


def expected_starts(
    planned: Mapping[str, datetime],
    jobs: Sequence[Job],
    arrivals: Sequence[Job],
    now: datetime,
    *,
    capacity: float,
    lookback_hours: int,
    plan_with: PlanWith,
) -> dict[str, datetime]:
    """The promise at ``now`` for each of ``jobs`` with a ``planned`` start: that start,
    moved by the load of the higher-priority ``arrivals`` (:func:`arrival_load`) on the
    ``capacity`` GPUs the plan leaves to batch work. Hours, as promises are kept."""

    def load(job: Job) -> float:
        return arrival_load(
            job, arrivals, lookback_hours=lookback_hours, capacity=capacity, plan_with=plan_with
        )

    return {job.id: _moved(planned[job.id], now, load(job)) for job in jobs if job.id in planned}


def _moved(start: datetime, now: datetime, load: float) -> datetime:
    lead = (start - now) / STEP
    if lead <= 0 or load <= 0:
        return start
    return start + round(lead * load / (1 - load)) * STEP


def arrivals_since(jobs: Sequence[Job], config: ServiceConfig) -> datetime:
    """The first submission time :func:`promised_starts` counts for any of ``jobs`` (not
    empty): the config's lookback before the first of them."""
    return min(job.submitted_at for job in jobs) - timedelta(hours=config.promises.lookback_hours)


def recent_arrivals(store: Store, jobs: Sequence[Job], config: ServiceConfig) -> list[Job]:
    """The stored jobs submitted within the config's lookback before the first of ``jobs``:
    the arrivals :func:`promised_starts` counts for any of them."""
    if config.promises.lookback_hours <= 0 or not jobs:
        return []
    return store.jobs(submitted_since=arrivals_since(jobs, config))


def promised_starts(
    store: Store,
    run: PlanRun,
    jobs: Sequence[Job],
    now: datetime,
    config: ServiceConfig,
    *,
    planned: Mapping[str, datetime] | None = None,
    arriving: Sequence[Job] = (),
    stored: Sequence[Job] | None = None,
    capacity: float | None = None,
) -> dict[str, datetime]:
    """:func:`expected_starts` of ``jobs`` from ``run`` (their ``planned`` starts, by
    default those ``run`` plans), with the stored jobs and then ``arriving`` (not stored
    yet) as the arrivals, on the config's terms. ``stored`` (:func:`recent_arrivals`, read
    by default) and ``capacity`` (:func:`batch_gpus` of ``run``, by default): read once by a
    caller that promises several jobs of one run."""
    if planned is None:
        places = planned_places(run)
        planned = {job.id: places[job.id][0] for job in jobs if job.id in places}
    if stored is None:
        stored = recent_arrivals(store, jobs, config)
    known = {job.id for job in stored}
    arrivals = [*stored, *(job for job in arriving if job.id not in known)]
    return expected_starts(
        planned,
        jobs,
        arrivals,
        now,
        capacity=batch_gpus(run) if capacity is None else capacity,
        lookback_hours=config.promises.lookback_hours,
        plan_with=config.plan_with,
    )
