"""From the service's state and its forecasts to a contract scenario, and from a plan back.

The only place where forecasts meet the scheduler:

- a batch job's estimate (GPUs, P50 or P90 hours) becomes a ``BatchJob`` of whole steps;
- an app's P90 requests per hour become GPUs per step (``gpus_needed``), then the least
  curve its swap cap can follow, computed over twice the horizon so that a rise just
  after the horizon is started in time inside it;
- running work is pinned (batch jobs on their blocks for their remaining estimate, at
  least one step while they overrun; real-time apps on last hour's committed GPUs, so
  the swap cap holds across runs);
- column 0 of a plan becomes the hour's commit.

Everything here is a pure function of values; the tick (:mod:`gpuplan.app.cycle.tick`) loads
and saves.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from contract.curves import swap_capped_curve
from contract.records import (
    Amendment,
    App,
    AppForecast,
    Assignment,
    Cluster,
    Commit,
    Job,
    JobEstimate,
    PlanRun,
    RunMode,
)
from contract.scenario import Pool
from contract.scenario_io import MAX_HORIZON_STEPS, MAX_PRIORITY
from forecasting.gpu_mapping import gpus_needed
from gpuplan.app.core.config import OVERRUN_FACTOR, PlanWith, PromiseTerms
from gpuplan.app.core.job_models import job_pools, model_key
from storage.store import EncodedJSON

if TYPE_CHECKING:
    from storage.store import Store

STEP = timedelta(hours=1)
#: The power of the wait in a queued job's aged priority (:func:`aged_priority`).
AGING_POWER = 4

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AppDemand:
    """One app's forecast from the plan's first hour on: requests P50/P90 per hour, the
    requests its GPUs are planned for (``reserve``: the P90, raised in the hours at surge
    risk; None: the P90), and the GPUs per hour those need under the swap cap (computed
    once, over the whole forecast)."""

    app: App
    p50: Sequence[float]
    p90: Sequence[float]
    reserve: Sequence[float] | None = None
    gpus: Sequence[int] = field(init=False)

    def __post_init__(self) -> None:
        planned = self.p90 if self.reserve is None else self.reserve
        object.__setattr__(self, "gpus", gpu_demand(planned, self.app, len(planned)))


@dataclass(frozen=True)
class Snapshot:
    """What one planning run knows, as of the wall-clock hour ``start`` of its step 0."""

    start: datetime
    cluster: Cluster
    queued: Sequence[Job]
    running: Sequence[Job]
    demand: Sequence[AppDemand]
    # app -> GPUs it held in the hour before ``start``, when that hour is committed (empty: none)
    realtime_sets: Mapping[str, tuple[int, ...]]
    #: The finished jobs the teams' past use and arrivals read (docs/teams.md; none without teams).
    finished: Sequence[Job] = ()


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def duration_steps(hours: float, step_minutes: int) -> int:
    """Whole steps a run of ``hours`` holds its GPUs (at least one)."""
    return max(1, math.ceil(hours * 60 / step_minutes - 1e-9))


def planned_hours(estimate: JobEstimate, plan_with: PlanWith, pool: Pool | None = None) -> float:
    """The hours the plan gives ``estimate`` (P50 or P90), on ``pool`` when given (its GPU
    model's hours, where the estimate has them)."""
    p50, p90 = estimate.hours_p50, estimate.hours_p90
    if pool is not None:
        p50, p90 = estimate.hours_on(model_key(pool.gpu_model)) or (p50, p90)
    return p50 if plan_with is PlanWith.P50 else p90


def pool_of(pools: Sequence[Pool], gpu: int | None) -> Pool | None:
    """The pool of ``pools`` (the config's, their ``first_gpu`` set) that holds ``gpu``."""
    return next((pool for pool in pools if gpu is not None and pool.first_gpu <= gpu < pool.end_gpu), None)


def time_limit(job: Job, factor: float = OVERRUN_FACTOR, pools: Sequence[Pool] = ()) -> datetime | None:
    """When a running ``job`` overruns: its spec's ``time_limit_hours`` after its start, or its
    P90 hours (on its pool of ``pools``, the config's) times ``factor`` (the config's
    ``overrun_factor``; None: not started or not estimated)."""
    if job.started_at is None:
        return None
    hours = job.spec.get("time_limit_hours")
    if hours is None:
        if job.estimate is None:
            return None
        hours = planned_hours(job.estimate, PlanWith.P90, pool_of(pools, job.first_gpu)) * factor
    return job.started_at + float(hours) * STEP


def gpu_demand(p90_requests: Sequence[float], app: App, horizon_steps: int) -> list[int]:
    """GPUs per step for ``horizon_steps`` steps: need from P90, then the swap-capped curve.

    ``p90_requests`` may run past the horizon; the curve is computed over all of it and
    cut, so that rises after the horizon's end are started early enough.
    """

    need = [int(n) for n in gpus_needed(p90_requests, app.requests_per_gpu_hour, app.headroom)]
    return swap_capped_curve(need, app.swap_cap)[:horizon_steps]


def gpus_for(app: App, requests: float) -> int:
    """GPUs ``app`` needs for ``requests`` in an hour, its headroom included."""

    return int(gpus_needed([requests], app.requests_per_gpu_hour, app.headroom)[0])


def promise_step(promised: datetime, start: datetime) -> int:
    """A promised start as the scenario's ``promise``: steps from the plan's ``start``.

    A promise further in the past than the scenario takes (``MAX_HORIZON_STEPS``, four
    weeks of hours: a job that has waited a month, or a daemon restarted after one) is
    carried at that edge. It is broken whatever the plan does either way, and each step of
    delay costs the same, so the plan is the one the older promise would give; only the
    promise's cost is counted from four weeks back, not more.
    """
    return max(-MAX_HORIZON_STEPS, math.floor((promised - start) / STEP))


def aged_priority(priority: float, waited_hours: float, aging_hours: float | None, ceiling: float) -> float:
    """A queued job's priority in the plan after ``waited_hours`` in the queue:
    ``priority x (1 + (waited / aging_hours) ** 4)``, at most ``ceiling`` (never below its own;
    None or 0: no aging). At the default 64 hours: x1.02 after a day, x1.32 after two, x3.4
    after 80 hours, x6.1 after four days: the fourth power leaves the waits of the ordinary
    queue almost as they were and lifts only the long ones."""
    if not aging_hours or waited_hours <= 0:
        return priority
    grown = priority * (1 + (waited_hours / aging_hours) ** AGING_POWER)
    return max(priority, min(ceiling, grown, MAX_PRIORITY))


#: What a queued job's aging counts: ``"fifo"``, the hours it has waited beyond what FIFO
#: would have made it wait (:func:`fifo_waits`); ``"queue"``, every hour it has waited.
AGING_BASIS = "fifo"


def fifo_waits(snapshot: Snapshot, plan_with: PlanWith) -> dict[str, float]:
    """Per queued job, the hours FIFO would make it wait at least: the GPU-hours still to run
    of the work submitted before it (queued, and running for the hours it has left) over the
    GPUs the apps leave free on average over the plan's horizon. The work ahead that has
    finished already is not counted, so a job past this wait is past FIFO's."""
    start = snapshot.start
    capacity = _fifo_capacity(snapshot)
    work: list[tuple[datetime, float]] = []
    for job in snapshot.running:
        if job.estimate is None or job.started_at is None:
            continue
        left = planned_hours(job.estimate, plan_with) - (start - job.started_at) / STEP
        work.append((job.submitted_at, (job.gpus or job.estimate.gpus) * max(0.0, left)))
    for job in snapshot.queued:
        assert job.estimate is not None
        work.append((job.submitted_at, job.estimate.gpus * planned_hours(job.estimate, plan_with)))
    work.sort(key=lambda w: w[0])
    arrivals = [at for at, _ in work]
    ahead = list(itertools.accumulate((gpu_hours for _, gpu_hours in work), initial=0.0))
    return {
        job.id: ahead[bisect.bisect_left(arrivals, job.submitted_at)] / capacity for job in snapshot.queued
    }


#: Among the jobs past their FIFO start, each later one's priority is this share below the
#: one before it (:func:`queued_priorities`): the longest overdue is placed first.
OVERDUE_STEP = 1e-4


def fifo_starts(snapshot: Snapshot, plan_with: PlanWith) -> dict[str, datetime]:
    """Per queued job, the latest start FIFO would give it, counted at its submit: its submit
    time plus the GPU-hours of the work submitted before it, as that work stood then (running
    for the hours it had left, queued whole), over the GPUs FIFO leaves the batch jobs (each
    app holding its peak over the horizon). Work ahead that has ended since is not in the
    snapshot, so the start is at most FIFO's, never later.

    The work not started is summed once, in submit order (prefix sums); only the started jobs,
    whose hours left depend on the submit, are gone over for each queued job."""
    capacity = _fifo_capacity(snapshot, peak=True)
    work = [job for job in (*snapshot.running, *snapshot.queued) if job.estimate is not None]
    started = [job for job in work if job.started_at is not None]
    waiting = sorted((job for job in work if job.started_at is None), key=lambda job: job.submitted_at)
    arrivals = [job.submitted_at for job in waiting]
    whole = list(itertools.accumulate((_gpu_hours(job, plan_with, 0.0) for job in waiting), initial=0.0))
    due = {}
    for job in snapshot.queued:
        at = job.submitted_at
        ahead = whole[bisect.bisect_left(arrivals, at)]
        for other in started:
            if other.submitted_at < at:
                assert other.started_at is not None
                ahead += _gpu_hours(other, plan_with, max(0.0, (at - other.started_at) / STEP))
        due[job.id] = at + ahead / capacity * STEP
    return due


def _gpu_hours(job: Job, plan_with: PlanWith, ran: float) -> float:
    """The GPU-hours ``job`` has left to run after ``ran`` hours of its planned ones."""
    assert job.estimate is not None
    return (job.gpus or job.estimate.gpus) * max(0.0, planned_hours(job.estimate, plan_with) - ran)


def queued_priorities(
    snapshot: Snapshot, plan_with: PlanWith, aging_hours: float | None, *, fifo_deadline: bool = False
) -> dict[str, float]:
    """The queued jobs whose priority in the plan is not their own, and what it is.

    With ``fifo_deadline``, a job whose FIFO start (:func:`fifo_starts`) has come is lifted to
    :func:`aging_ceiling`, the longest overdue highest, so that the plan places it first: a
    deadline at FIFO's start. Else, with ``aging_hours``, each job's :func:`aged_priority` for
    the hours it has waited beyond its FIFO wait (:func:`fifo_waits`).
    """
    start = snapshot.start
    if fifo_deadline:
        most = min(MAX_PRIORITY, aging_ceiling(snapshot))
        own = {job.id: job.priority for job in snapshot.queued}
        overdue = sorted(
            (at, job_id) for job_id, at in fifo_starts(snapshot, plan_with).items() if at <= start
        )
        return {
            job_id: max(own[job_id], most * (1 - rank * OVERDUE_STEP))
            for rank, (_, job_id) in enumerate(overdue)
        }
    if not aging_hours:
        return {}
    ceiling = aging_ceiling(snapshot)
    fifo = fifo_waits(snapshot, plan_with) if AGING_BASIS == "fifo" else {}
    lifted = {}
    for job in snapshot.queued:
        waited = (start - job.submitted_at) / STEP - fifo.get(job.id, 0.0)
        aged = aged_priority(job.priority, waited, aging_hours, ceiling)
        if aged != job.priority:
            lifted[job.id] = aged
    return lifted


def _fifo_capacity(snapshot: Snapshot, *, peak: bool = False) -> float:
    """The GPUs the apps leave free on average over the plan's horizon, or (``peak``) when
    each holds its peak over it, as FIFO reserves them (at least one)."""
    horizon = snapshot.cluster.horizon_steps
    held = [d.gpus[:horizon] for d in snapshot.demand]
    apps = sum(max(g, default=0) if peak else sum(g) / max(1, len(g)) for g in held)
    return max(1.0, snapshot.cluster.gpus - apps)


def aging_ceiling(snapshot: Snapshot) -> float:
    """The most a queued job's priority ages to in the plan of ``snapshot``: twice the highest
    batch priority there, and no more than what the cheapest app's unserved GPU-hour costs
    (its priority x (1 + rt_penalty)), so that an aged job outranks any fresh one and never a
    real-time app's need."""
    batch = [job.priority for job in (*snapshot.queued, *snapshot.running)]
    ceiling = 2 * max(batch, default=0.0)
    if snapshot.demand:
        cheapest = min(d.app.priority for d in snapshot.demand)
        ceiling = min(ceiling, cheapest * (1 + snapshot.cluster.rt_penalty))
    return ceiling


def scenario_document(
    snapshot: Snapshot,
    plan_with: PlanWith,
    *,
    name: str,
    promises: PromiseTerms | None = None,
    aging_hours: float | None = None,
    fifo_deadline: bool = False,
    pools: Sequence[Pool] = (),
    app_pools: Mapping[str, str] | None = None,
    app_rates: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, Any]:
    """The contract scenario (CONTRACT.md) of a snapshot: what the planner sees.

    With several ``pools`` (the config's ``cluster.pools``), the scenario has its ``pools``
    section and each app its ``pool`` (``app_pools``, default: the first pool), or, for an
    app of several GPU models (``app_rates``: pool -> requests per GPU-hour), its GPUs per
    step on each of those pools (``demand_by_pool``), of which the plan picks one; and the plan
    chooses each batch job's pool: a job whose estimate has hours per GPU model
    (``JobEstimate.by_model``) may run on the pools of those models that can hold it, for its
    hours on each (its ``pools`` and ``duration_by_pool``); one without, on every pool for the
    same hours. A running job is pinned in its pool for that pool's hours.

    With ``promises`` of a penalty above 0, each queued job's promised start becomes its
    ``promise`` (steps from the plan's start, negative once passed) and the scenario
    carries the terms; without, the scenario is the contract's as it always was.
    With ``fifo_deadline`` or ``aging_hours``, a queued job's ``priority`` is its
    :func:`queued_priorities`: a job starved by a stream of higher-priority work comes to
    outrank it. The scenario stays the contract's.
    """
    terms = {} if promises is None else promises.scenario_keys(snapshot.cluster.step_minutes)
    cluster, start = snapshot.cluster, snapshot.start
    planned_pools = tuple(pools) if len(pools) > 1 else ()
    horizon = cluster.horizon_steps
    jobs: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    for job in snapshot.running:
        assert job.started_at is not None and job.first_gpu is not None and job.gpus is not None
        assert job.estimate is not None
        elapsed = (
            duration_steps((start - job.started_at) / STEP, cluster.step_minutes)
            if start > job.started_at
            else 0
        )
        pool = pool_of(planned_pools, job.first_gpu)
        planned = duration_steps(planned_hours(job.estimate, plan_with, pool), cluster.step_minutes)
        # A job that overruns its forecast stays pinned: one more step at a time.
        remaining = max(1, planned - elapsed)
        entry = _batch_entry(job, gpus=job.gpus, steps=elapsed + remaining, order=len(jobs))
        if pool is not None and job.estimate.by_model is not None:
            entry["pools"] = [pool.name]
        jobs.append(entry)
        running.append(
            {
                "id": job.id,
                "gpus": list(range(job.first_gpu, job.first_gpu + job.gpus)),
                "remaining": remaining,
            }
        )
    lifted = queued_priorities(snapshot, plan_with, aging_hours, fifo_deadline=fifo_deadline)
    for job in snapshot.queued:
        entry = queued_entry(job, plan_with, step_minutes=cluster.step_minutes, order=len(jobs))
        if not _place_in_pools(entry, job, plan_with, planned_pools, cluster.step_minutes):
            continue
        if job.id in lifted:
            entry["priority"] = lifted[job.id]
        if terms and job.promised_start is not None:
            entry["promise"] = promise_step(job.promised_start, start)
        jobs.append(entry)
    app_pool = {
        demand.app.id: named_pool(planned_pools, (app_pools or {}).get(demand.app.id))
        for demand in snapshot.demand
    }
    rates = {app: by_pool for app, by_pool in (app_rates or {}).items() if planned_pools}
    for demand in snapshot.demand:
        app = demand.app
        pool = app_pool[app.id]
        most = cluster.gpus if pool is None else pool.gpus
        entry = {
            "id": app.id,
            "kind": "realtime",
            "priority": app.priority,
            "swap_cap": app.swap_cap,
            # No more than its pool: a surge far above it asks for all of it, not more.
            "demand": [min(gpus, most) for gpus in demand.gpus[:horizon]],
        }
        if app.id in rates:
            del entry["demand"]
            entry["demand_by_pool"] = _demand_by_pool(demand, rates[app.id], planned_pools, horizon)
        elif pool is not None:
            entry["pool"] = pool.name
        jobs.append(entry)
    down = _down_steps(cluster, start, pinned={r["id"]: r for r in running})
    for demand in snapshot.demand:
        pool = app_pool[demand.app.id]
        # An app of the committed hour before, even one that held no GPU there, carries its
        # set over: the swap cap counts step 0 against it (constraint 4).
        inherited = demand.app.id in snapshot.realtime_sets
        held = snapshot.realtime_sets.get(demand.app.id, ())
        if demand.app.id in rates:  # the pool it serves on now, if it may still
            pool = pool_of(planned_pools, min(held)) if held else None
            pool = pool if pool is not None and pool.name in rates[demand.app.id] else None
            inherited = inherited and (pool is not None or not held)
            held = held if pool is not None else ()
        if pool is not None:  # GPUs outside its pool (the pools changed) are let go
            held = tuple(gpu for gpu in held if pool.first_gpu <= gpu < pool.end_gpu)
        kept = sheddable(held, down, demand.app.swap_cap)
        if kept or inherited:
            running.append({"id": demand.app.id, "gpus": kept})
    document = {
        "name": name,
        "gpus": cluster.gpus,
        "horizon": horizon,
        "step_minutes": cluster.step_minutes,
        "decay": cluster.decay,
        "rt_penalty": cluster.rt_penalty,
        "jobs": jobs,
        "running": running,
        "down": down,
    }
    if planned_pools:
        document["pools"] = [
            {"name": pool.name, "gpu_model": pool.gpu_model, "gpus": pool.gpus} for pool in planned_pools
        ]
    return {**document, **terms}


def _demand_by_pool(
    demand: AppDemand, rates: Mapping[str, float], pools: Sequence[Pool], horizon: int
) -> dict[str, list[int]]:
    """An app's GPUs per step on each pool it may serve on: the requests its GPUs are planned
    for at its requests per GPU-hour there, swap-capped, no more than the pool."""
    planned = demand.p90 if demand.reserve is None else demand.reserve
    out = {}
    for pool in pools:
        if pool.name in rates:
            app = replace(demand.app, requests_per_gpu_hour=rates[pool.name])
            out[pool.name] = [
                min(gpus, pool.gpus) for gpus in gpu_demand(planned, app, len(planned))[:horizon]
            ]
    return out


def named_pool(pools: Sequence[Pool], name: str | None) -> Pool | None:
    """The pool an app serves on: the one it names, else the first (None: no pools)."""
    if not pools:
        return None
    return next((pool for pool in pools if pool.name == name), pools[0])


def sheddable(held: Sequence[int], down: Sequence[Mapping[str, int]], swap_cap: int) -> list[int]:
    """The carried-over GPUs an app can keep: the contract needs a running set to shed its
    GPUs before they go down at ``swap_cap`` per step (N(u) <= swap_cap x (u + 1) with N(u)
    of them down by step u). GPUs that would break that leave the set, earliest down first;
    the others stay, so the swap cap keeps holding across runs."""
    first_down: dict[int, int] = {}
    for window in down:
        first_down[window["gpu"]] = min(first_down.get(window["gpu"], window["start"]), window["start"])
    kept = sorted(held, key=lambda gpu: first_down.get(gpu, 1 << 30))
    while kept:
        deadlines = sorted(first_down[gpu] for gpu in kept if gpu in first_down)
        if all(count <= swap_cap * (step + 1) for count, step in enumerate(deadlines, start=1)):
            break
        kept.pop(0)
    return sorted(kept)


def _down_steps(
    cluster: Cluster, start: datetime, pinned: Mapping[str, dict[str, Any]]
) -> list[dict[str, int]]:
    """Down windows as steps of the plan starting at ``start``.

    A window that hits a running batch job's block is moved past the job's pinned run: the
    job holds its GPUs until it is reported done (``gpuplan done``), the contract cannot pin
    work on a GPU that is down, and the plan must stay legal (logged).
    """
    horizon = cluster.horizon_steps
    end_of_plan = start + horizon * STEP
    down = []
    for window in cluster.down:
        window_end = window.end or end_of_plan
        if window_end <= start or window.start >= end_of_plan:
            continue
        first = max(0, math.floor((window.start - start) / STEP))
        last = min(horizon, math.ceil((window_end - start) / STEP))
        for job_id, entry in pinned.items():
            if window.gpu in entry["gpus"] and first < entry["remaining"]:
                log.warning(
                    "GPU %d goes down under running job %s; kept up until it ends", window.gpu, job_id
                )
                first = entry["remaining"]
        if first < last:
            down.append({"gpu": window.gpu, "start": first, "end": last})
    return down


def queued_entry(job: Job, plan_with: PlanWith, *, step_minutes: int, order: int) -> dict[str, Any]:
    """A queued job as the scenario's batch entry: its estimate's GPUs for its P50 or P90 hours."""
    assert job.estimate is not None
    steps = duration_steps(planned_hours(job.estimate, plan_with), step_minutes)
    return _batch_entry(job, gpus=job.estimate.gpus, steps=steps, order=order)


def _place_in_pools(
    entry: dict[str, Any], job: Job, plan_with: PlanWith, pools: Sequence[Pool], step_minutes: int
) -> bool:
    """A queued job's entry given the pools it may run on and its steps on each (``pools``,
    ``duration_by_pool``: its hours per GPU model among ``pools``, those that can hold it);
    False when none of them can (logged: the job stays queued)."""
    assert job.estimate is not None
    if not pools or job.estimate.by_model is None:
        return True
    steps = {
        pool.name: duration_steps(p50 if plan_with is PlanWith.P50 else p90, step_minutes)
        for pool, (p50, p90) in job_pools(job.estimate, pools)
        if pool.gpus >= job.estimate.gpus
    }
    if not steps:
        log.warning("job %s fits in none of the pools its GPU models allow; left queued", job.id)
        return False
    entry["pools"] = list(steps)
    entry["duration_by_pool"] = steps
    entry["duration"] = next(iter(steps.values()))
    return True


def _batch_entry(job: Job, *, gpus: int, steps: int, order: int) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "priority": job.priority,
        "gpus": gpus,
        "duration": steps,
        "release": 0,
        "order": order,
    }


def app_forecasts(snapshot: Snapshot) -> tuple[AppForecast, ...]:
    """The hours of each app's forecast that the plan used (its horizon)."""
    horizon = snapshot.cluster.horizon_steps
    rows = []
    for demand in snapshot.demand:
        gpus = demand.gpus
        for t in range(horizon):
            rows.append(
                AppForecast(
                    app=demand.app.id,
                    hour=snapshot.start + t * STEP,
                    p50=float(demand.p50[t]),
                    p90=float(demand.p90[t]),
                    gpus=gpus[t],
                )
            )
    return tuple(rows)


def inputs_hash(document: Mapping[str, Any]) -> str:
    """A stable hash of a scenario (its name aside): two runs that saw the same inputs share it."""
    return _sha256(_inputs_text(document))


class EntryTexts:
    """The text of each job entry of the scenario encoded last, by the entry's identity.

    A submit batch's scenario is its base's with the new jobs after them: the same entry
    objects, but for the few a promise replaced since (entries are replaced, never changed in
    place). Encoded with these, only the new and the replaced entries are: a queue of a
    thousand jobs took longer to encode than the batch took to plan.
    """

    def __init__(self) -> None:
        self._texts: dict[int, tuple[Mapping[str, Any], str]] = {}

    def text(self, entries: Sequence[Mapping[str, Any]], *, allow_nan: bool) -> str:
        """``json.dumps(entries, sort_keys=True)``, the entries seen last time reused."""
        texts: dict[int, tuple[Mapping[str, Any], str]] = {}
        parts = []
        for entry in entries:
            kept = self._texts.get(id(entry))
            if kept is None or kept[0] is not entry:
                kept = (entry, json.dumps(entry, sort_keys=True, allow_nan=allow_nan))
            texts[id(entry)] = kept
            parts.append(kept[1])
        self._texts = texts
        return "[" + ", ".join(parts) + "]"


def encoded_scenario(
    document: Mapping[str, Any], *, entries: EntryTexts | None = None
) -> tuple[EncodedJSON, str]:
    """``document`` with the text the store writes for it, and its :func:`inputs_hash`, from
    one encoding (a scenario of the whole queue takes about a millisecond to encode at 500
    jobs): the hash's text, which leaves the name out and sorts the keys, with the name put
    first. NaN and Infinity are refused, as the store refuses them. ``entries``: the job
    entries' texts of the last scenario encoded, reused where the entries are the same."""
    text = _inputs_text(document, allow_nan=False, entries=entries)
    digest = _sha256(text)
    if "name" in document:
        name = json.dumps({"name": document["name"]})
        text = name[:-1] + (", " + text[1:] if text != "{}" else "}")
    return EncodedJSON(document, text), digest


def _inputs_text(
    document: Mapping[str, Any], *, allow_nan: bool = True, entries: EntryTexts | None = None
) -> str:
    payload = {key: value for key, value in document.items() if key != "name"}
    if entries is None:
        return json.dumps(payload, sort_keys=True, allow_nan=allow_nan)
    # json.dumps(payload, sort_keys=True) written out key by key, the jobs from ``entries``
    items = (
        json.dumps(key)
        + ": "
        + (
            entries.text(value, allow_nan=allow_nan)
            if key == "jobs"
            else json.dumps(value, sort_keys=True, allow_nan=allow_nan)
        )
        for key, value in sorted(payload.items())
    )
    return "{" + ", ".join(items) + "}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def run_record(
    document: dict[str, Any],
    *,
    start: datetime,
    created_at: datetime,
    mode: RunMode,
    policy: str,
    grid: Sequence[Sequence[str | None]],
    metrics: Mapping[str, float],
    latency_ms: float,
    status: str = "FEASIBLE",
    bound: float | None = None,
    forecasts: tuple[AppForecast, ...] = (),
    inputs_hash_: str | None = None,
) -> PlanRun:
    """The one way a plan of ``document`` becomes the run to store (the cycle, the simulation's
    baselines, the report figures and the storage benchmark all build their runs here).

    The objective is the metrics' ``objective``; the inputs' hash is ``document``'s unless given.
    """
    return PlanRun(
        start=start,
        created_at=created_at,
        mode=mode,
        policy=policy,
        inputs_hash=inputs_hash(document) if inputs_hash_ is None else inputs_hash_,
        objective=float(metrics.get("objective", 0.0)),
        bound=bound,
        latency_ms=latency_ms,
        status=status,
        scenario=document,
        grid=[list(row) for row in grid],
        metrics=dict(metrics),
        forecasts=forecasts,
    )


def column_commit(grid: Sequence[Sequence[str | None]], hour: datetime, run_id: int | None = None) -> Commit:
    """Step 0 of a plan as the hour's commit: each job with the GPUs it holds, by job id."""
    held: dict[str, list[int]] = {}
    for gpu, row in enumerate(grid):
        if row and row[0] is not None:
            held.setdefault(row[0], []).append(gpu)
    return Commit(
        hour=hour,
        run_id=run_id,
        # In GPU order, as the store returns them: an executor walks the cluster once.
        assignments=tuple(
            sorted(
                (Assignment(job, tuple(gpus)) for job, gpus in held.items()), key=lambda a: (a.gpus[0], a.job)
            )
        ),
    )


def planned_place(run: PlanRun, job_id: str) -> tuple[datetime | None, int | None]:
    """Where a run plans ``job_id`` first: (wall-clock start, first GPU), or (None, None)."""
    for step in range(len(run.grid[0]) if run.grid else 0):
        gpus = [gpu for gpu, row in enumerate(run.grid) if row[step] == job_id]
        if gpus:
            return run.start + step * STEP, min(gpus)
    return None, None


def planned_places(run: PlanRun) -> dict[str, tuple[datetime, int]]:
    """Where a run plans each job first, (wall-clock start, first GPU), in one pass over the grid."""
    places: dict[str, tuple[datetime, int]] = {}
    for step in range(len(run.grid[0]) if run.grid else 0):
        for gpu, row in enumerate(run.grid):
            job = row[step]
            if job is not None and job not in places:
                places[job] = (run.start + step * STEP, gpu)
    return places


def realtime_sets(commit: Commit | None, app_ids: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """The GPUs each app held in a committed hour."""
    if commit is None:
        return {}
    wanted = set(app_ids)
    return {a.job: a.gpus for a in commit.assignments if a.job in wanted}


def merged_assignments(commit: Commit | None, amendments: Sequence[Amendment]) -> dict[str, tuple[int, ...]]:
    """A commit with its amendments' additions: job -> GPUs held in the hour."""
    held: dict[str, set[int]] = {}
    for assignments in [commit.assignments if commit else ()] + [a.assignments for a in amendments]:
        for a in assignments:
            held.setdefault(a.job, set()).update(a.gpus)
    return {job: tuple(sorted(gpus)) for job, gpus in held.items()}


def hour_allocation(store: Store, hour: datetime) -> Commit | None:
    """The hour's commit with its amendments added (None: the hour is not committed)."""
    commit = store.commit(hour)
    if commit is None:
        return None
    held = merged_assignments(commit, store.amendments(hour, hour + STEP))
    return Commit(commit.hour, commit.run_id, tuple(Assignment(j, g) for j, g in sorted(held.items())))
