"""The measures of a simulated week: utilization, waiting, real-time served, promises kept,
and the committed grids.

An hour's allocation is its commit, and from the moment each amendment was made, the
amendment's additions too: a real-time GPU added at :30 serves the second half of the hour
(half a GPU-hour), a batch job started at :30 runs from then on.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.scenario import BatchJob, Instance, JobKind, Pool, RealtimeJob
from gpuplan.app.core.bridge import STEP, pool_of
from gpuplan.app.core.config import PROMISE_SLACK_HOURS
from gpuplan.app.core.job_models import model_key

if TYPE_CHECKING:
    from contract.records import Amendment, Assignment, Commit
    from contract.scenario import Grid, Instance

from gpuplan.app.lab.simulate.fairness import TeamsMetrics, team_metrics
from gpuplan.app.lab.simulate.loop import PolicyRun
from gpuplan.app.lab.simulate.setup import HOURS_PER_DAY, FloatArray, IntArray, Setup
from gpuplan.app.lab.workload import SimJob
from scheduler.metrics import realtime_moves

log = logging.getLogger(__name__)

#: A promise is kept when the job starts no later than this after its promised start (the
#: issue's judgement, whatever slack the plans are given).
PROMISE_SLACK = timedelta(hours=PROMISE_SLACK_HOURS)

# --- measuring ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyMetrics:
    """One policy's week, measured against what really happened (actual durations and traffic)."""

    policy: str
    utilization: float  # batch GPU-hours really run + real-time GPU-hours served, over GPU-hours
    value: float  # priority x (batch GPU-hours run + real-time GPU-hours served)
    rt_served: float  # share of the real-time GPU-demand served
    rt_unmet_gpu_hours: float
    rt_unmet_gpu_hours_worst_hour: float  # the most GPU-hours of need unmet in one hour
    rt_idle_gpu_hours: float  # GPU-hours real-time apps held beyond what their traffic needed
    amendments_per_day: float
    promised: int  # jobs whose plan at submit gave a start, judged: started, or due before the end
    promise_kept: float  # share of those started no later than 1 h after it (1 with none)
    promise_delay_h_p50: float  # actual start - promised start, hours
    promise_delay_h_p90: float
    plan_kept: float  # share of the same judgement against the plan's start at submit
    promise_lead_h_p50: float  # promised start - the plan's start it was made from, hours
    promise_lead_h_p90: float
    rt_moves: int  # GPUs the apps gained or lost from one committed hour to the next
    #: Per simulated day, the moves beyond the change in how many GPUs each app holds: a GPU
    #: swapped for another (one out, one in: two moves) buys nothing and restarts a replica.
    rt_moves_per_day: float
    wait_p50_h: float
    wait_p99_h: float
    wait_by_kind: dict[str, tuple[float, float]]  # kind -> (p50, p99) hours
    completed: int
    started: int
    submitted: int
    cycle_ms_p50: float
    cycle_ms_p99: float
    amend_ms_p50: float
    amend_ms_p99: float
    promise_ms_p50: float  # the promises of one cycle's new jobs made, after its plan
    promise_ms_p99: float
    #: On a cluster of several pools, each pool's share of the measures (empty on one pool).
    pools: Mapping[str, PoolMetrics] = field(default_factory=dict)
    #: With teams, theirs (:mod:`gpuplan.app.lab.simulate.fairness`; None without teams).
    teams: TeamsMetrics | None = None

    def as_json(self) -> dict[str, Any]:
        found = self._json()
        if self.pools:
            found["pools"] = {name: m.as_json() for name, m in self.pools.items()}
        if self.teams is not None:
            found.update(self.teams.as_json())
        return found

    def _json(self) -> dict[str, Any]:
        return {
            "utilization": round(self.utilization, 6),
            "value": round(self.value, 3),
            "rt_served": round(self.rt_served, 6),
            "rt_unmet_gpu_hours": round(self.rt_unmet_gpu_hours, 3),
            "wait_p50_h": round(self.wait_p50_h, 4),
            "wait_p99_h": round(self.wait_p99_h, 4),
            "completed": self.completed,
            "cycle_ms_p50": round(self.cycle_ms_p50, 3),
            "cycle_ms_p99": round(self.cycle_ms_p99, 3),
            "amend_ms_p50": round(self.amend_ms_p50, 3),
            "amend_ms_p99": round(self.amend_ms_p99, 3),
            "rt_idle_gpu_hours": round(self.rt_idle_gpu_hours, 3),
            "rt_unmet_gpu_hours_worst_hour": round(self.rt_unmet_gpu_hours_worst_hour, 3),
            "amendments_per_day": round(self.amendments_per_day, 3),
            "promised": self.promised,
            "promise_kept": round(self.promise_kept, 6),
            "promise_delay_h_p50": round(self.promise_delay_h_p50, 4),
            "promise_delay_h_p90": round(self.promise_delay_h_p90, 4),
            "plan_kept": round(self.plan_kept, 6),
            "promise_lead_h_p50": round(self.promise_lead_h_p50, 4),
            "promise_lead_h_p90": round(self.promise_lead_h_p90, 4),
            "promise_ms_p50": round(self.promise_ms_p50, 3),
            "promise_ms_p99": round(self.promise_ms_p99, 3),
            "rt_moves": self.rt_moves,
            "rt_moves_per_day": round(self.rt_moves_per_day, 3),
            "started": self.started,
            "submitted": self.submitted,
            "wait_by_kind_h": {
                k: {"p50": round(a, 4), "p99": round(b, 4)} for k, (a, b) in self.wait_by_kind.items()
            },
        }


@dataclass(frozen=True)
class PoolMetrics:
    """One pool's part of a policy's run: the batch work that ran on it and the apps serving on it."""

    gpu_model: str
    gpus: int
    utilization: float  # its GPU-hours busy (batch run, real-time served) over its GPU-hours
    value: float  # the value of the work done on it (a policy's ``value`` is the pools' sum)
    rt_served: float  # share of its apps' demand served (1 with none)
    started: int  # batch jobs started on it

    def as_json(self) -> dict[str, Any]:
        return {
            "gpu_model": self.gpu_model,
            "gpus": self.gpus,
            "utilization": round(self.utilization, 6),
            "value": round(self.value, 3),
            "rt_served": round(self.rt_served, 6),
            "started": self.started,
        }


@dataclass(frozen=True, eq=False)
class Hourly:
    """Per simulated hour: GPUs really busy with batch work, and real-time demand, held, served."""

    batch_gpus: FloatArray
    rt_demand: IntArray
    rt_held: FloatArray  # GPU-hours held in the hour (an amendment's GPUs from when it was made)
    rt_served: FloatArray

    def utilization(self, gpus: int) -> FloatArray:
        used: FloatArray = (self.batch_gpus + self.rt_served) / gpus
        return used


@dataclass(frozen=True, eq=False)
class AppHours:
    """One app's simulated hours: GPUs held and demand served, in GPU-hours; the GPUs its
    actual traffic needed on the pool it served on, at its rate there; and that pool."""

    held: FloatArray
    served: FloatArray
    demand: IntArray
    pools: tuple[str | None, ...]  # per hour (None on one pool): :func:`serving_pools`

    def on(self, pool: Pool) -> AppHours:
        """Its hours on ``pool`` alone (nothing in the hours it served on another)."""
        mask = np.array([name == pool.name for name in self.pools], dtype=bool)
        return AppHours(
            np.where(mask, self.held, 0.0),
            np.where(mask, self.served, 0.0),
            np.where(mask, self.demand, 0),
            self.pools,
        )


def serving_pools(setup: Setup, run: PolicyRun) -> dict[str, list[Pool | None]]:
    """Per app and simulated hour, the pool it served on (None on one pool): that of the GPUs it
    held in the hour; in an hour it held none, the pool it held last (before its first hour
    held, the first it held; never held, :meth:`Setup.app_pool`)."""
    held = realtime_sets(setup, run)
    found: dict[str, list[Pool | None]] = {}
    for s in setup.series:
        masks = held[s.app.id]
        if not setup.pooled:
            found[s.app.id] = [None] * setup.hours
            continue
        on = [pool_of(setup.pools, (mask & -mask).bit_length() - 1) if mask else None for mask in masks]
        last = next((pool for pool in on if pool is not None), setup.app_pool(s.app.id))
        pools = []
        for pool in on:
            last = pool if pool is not None else last
            pools.append(last)
        found[s.app.id] = pools
    return found


def serving_demand(setup: Setup, pools: Mapping[str, Sequence[Pool | None]]) -> dict[str, IntArray]:
    """Per app and simulated hour, the GPUs its actual traffic needed on the pool it served on
    then (``pools``: :func:`serving_pools`), at its requests per GPU-hour there."""
    found = {}
    for s in setup.series:
        need = np.zeros(setup.hours, dtype=np.int64)
        hours = pools[s.app.id]
        distinct: list[Pool | None] = list({pool.name: pool for pool in hours if pool is not None}.values())
        for pool in distinct or [None]:
            mask = np.array([p == pool for p in hours], dtype=bool)
            on = setup.needs_on(s.app.id, pool)[s.history_hours : s.history_hours + setup.hours]
            need[mask] = on[mask]
        found[s.app.id] = need
    return found


def realtime_hours(setup: Setup, run: PolicyRun) -> dict[str, AppHours]:
    """Per app and simulated hour, GPU-hours held and served: the commit's GPUs all hour,
    each amendment's from when it was made; served against its need on the pool it held."""
    pools = serving_pools(setup, run)
    demand = serving_demand(setup, pools)
    segments: dict[str, dict[int, list[tuple[float, int]]]] = {s.app.id: {} for s in setup.series}
    for commit in run.commits:
        h = (commit.hour - setup.start) // STEP
        for assignment in commit.assignments:
            if assignment.job in segments and 0 <= h < setup.hours:
                segments[assignment.job].setdefault(h, []).append((0.0, len(assignment.gpus)))
    for amendment in run.amendments:
        h = (amendment.hour - setup.start) // STEP
        at = (amendment.made_at - amendment.hour) / STEP
        for assignment in amendment.assignments:
            if assignment.job in segments and 0 <= h < setup.hours:
                segments[assignment.job].setdefault(h, []).append((at, len(assignment.gpus)))
    hours: dict[str, AppHours] = {}
    for app, by_hour in segments.items():
        held, served = np.zeros(setup.hours), np.zeros(setup.hours)
        for h, parts in by_hour.items():
            parts.sort()
            bounds = [at for at, _ in parts] + [1.0]
            count = 0
            for (at, added), end in zip(parts, bounds[1:], strict=True):
                count += added
                held[h] += count * (end - at)
                served[h] += min(count, int(demand[app][h])) * (end - at)
        names = tuple(None if pool is None else pool.name for pool in pools[app])
        hours[app] = AppHours(held, served, demand[app], names)
    return hours


def realtime_sets(setup: Setup, run: PolicyRun) -> dict[str, list[int]]:
    """Per app, the bitmask of GPUs it held in each simulated hour: its commit's, with every
    amendment's additions."""
    held = {s.app.id: [0] * setup.hours for s in setup.series}
    committed: list[Commit | Amendment] = [*run.commits, *run.amendments]
    for hour in committed:
        h = (hour.hour - setup.start) // STEP
        if 0 <= h < setup.hours:
            for assignment in hour.assignments:
                if assignment.job in held:
                    held[assignment.job][h] |= sum(1 << gpu for gpu in set(assignment.gpus))
    return held


def hourly(setup: Setup, run: PolicyRun, pool: Pool | None = None) -> Hourly:
    """The hours of the whole cluster, or of ``pool`` only (its batch jobs and apps)."""
    batch = np.zeros(setup.hours)
    for job in setup.jobs:
        start = run.started.get(job.id)
        if start is None or (pool is not None and job_pool_of(setup, run, job.id) != pool):
            continue
        begin = (start - setup.start) / STEP
        end = begin + setup.actual_hours(job, run.first_gpus.get(job.id, 0))
        for h in range(int(begin), min(setup.hours, math.ceil(end))):
            batch[h] += run.gpus[job.id] * (min(end, h + 1) - max(begin, h))
    apps = realtime_hours(setup, run)
    if pool is not None:  # each app's hours on it
        apps = {app: hours.on(pool) for app, hours in apps.items()}
    zeros = np.zeros(setup.hours)
    return Hourly(
        batch_gpus=batch,
        rt_demand=sum((a.demand for a in apps.values()), np.zeros(setup.hours, dtype=np.int64)),
        rt_held=sum((a.held for a in apps.values()), zeros),
        rt_served=sum((a.served for a in apps.values()), zeros),
    )


def swap_moves(masks: Sequence[int]) -> int:
    """Of one app's moves over its held-GPU bitmasks per hour, those beyond the change in
    how many it holds (what its demand curve's own changes ask for)."""
    return sum(
        (now ^ before).bit_count() - abs(now.bit_count() - before.bit_count())
        for before, now in itertools.pairwise(masks)
    )


def job_pool_of(setup: Setup, run: PolicyRun, job_id: str) -> Pool | None:
    """The pool a started job ran in (None on one pool, or not started)."""
    first = run.first_gpus.get(job_id)
    return pool_of(setup.pools, first) if setup.pooled and first is not None else None


def batch_value(setup: Setup, run: PolicyRun, job: SimJob) -> float:
    """What a started job's run inside the simulated hours is worth: priority x its GPUs x the
    hours it ran, on a slower pool weighed by its fastest pool's hours over its hours there (a
    job's work is the same wherever it runs: docs/contract.md's pools)."""
    start = run.started[job.id]
    hours = setup.actual_hours(job, run.first_gpus.get(job.id, 0))
    ran_hours = min(hours, (setup.end - start) / STEP)
    return job.priority * run.gpus[job.id] * ran_hours * setup.fastest_hours(job) / hours


def pool_metrics(setup: Setup, run: PolicyRun) -> dict[str, PoolMetrics]:
    """Per pool of a cluster of several, its utilization, value and real-time served."""
    if not setup.pooled:
        return {}
    apps = realtime_hours(setup, run)
    found = {}
    for pool in setup.pools:
        per_hour = hourly(setup, run, pool)
        served = float(per_hour.rt_served.sum())
        demand = float(per_hour.rt_demand.sum())
        jobs = [
            job for job in setup.jobs if job.id in run.started and job_pool_of(setup, run, job.id) == pool
        ]
        value = sum(batch_value(setup, run, job) for job in jobs) + sum(
            s.app.priority * float(apps[s.app.id].on(pool).served.sum()) for s in setup.series
        )
        found[pool.name] = PoolMetrics(
            gpu_model=pool.gpu_model,
            gpus=pool.gpus,
            utilization=float(per_hour.batch_gpus.sum() + served) / (pool.gpus * setup.hours),
            value=value,
            rt_served=served / demand if demand else 1.0,
            started=len(jobs),
        )
    return found


def measure(setup: Setup, run: PolicyRun) -> PolicyMetrics:
    per_hour = hourly(setup, run)
    held = realtime_sets(setup, run)
    gpu_hours = setup.cluster.gpus * setup.hours
    apps = realtime_hours(setup, run)
    value = sum(s.app.priority * float(apps[s.app.id].served.sum()) for s in setup.series)
    completed = 0
    waits: dict[str, list[float]] = {}
    delays, kept = _judged(setup, run, run.promised)
    _, plan_kept = _judged(setup, run, run.planned)
    for job in setup.jobs:
        start = run.started.get(job.id)
        submitted = setup.start + timedelta(hours=job.submit_hour)
        # A job still waiting at the end has waited at least until the end.
        wait = ((start or setup.end) - submitted) / STEP
        waits.setdefault(job.kind.value, []).append(max(0.0, wait))
        if start is None:
            continue
        value += batch_value(setup, run, job)
        hours = setup.actual_hours(job, run.first_gpus.get(job.id, 0))
        completed += start + timedelta(hours=hours) <= setup.end
    every_wait = [w for kind in waits.values() for w in kind]
    leads = [(at - run.planned[job]) / STEP for job, at in run.promised.items() if job in run.planned]
    demand = float(per_hour.rt_demand.sum())
    served = float(per_hour.rt_served.sum())
    unmet = per_hour.rt_demand - per_hour.rt_served
    return PolicyMetrics(
        policy=run.policy.value,
        utilization=float(per_hour.batch_gpus.sum() + served) / gpu_hours,
        value=value,
        rt_served=served / demand if demand else 1.0,
        rt_unmet_gpu_hours=demand - served,
        rt_unmet_gpu_hours_worst_hour=float(unmet.max(initial=0.0)),
        rt_idle_gpu_hours=float(per_hour.rt_held.sum()) - served,
        amendments_per_day=len(run.amendments) * HOURS_PER_DAY / setup.hours,
        promised=len(delays),
        promise_kept=kept,
        promise_delay_h_p50=_percentile(delays, 50),
        promise_delay_h_p90=_percentile(delays, 90),
        plan_kept=plan_kept,
        promise_lead_h_p50=_percentile(leads, 50),
        promise_lead_h_p90=_percentile(leads, 90),
        rt_moves=sum(realtime_moves(masks) for masks in held.values()),
        rt_moves_per_day=sum(swap_moves(masks) for masks in held.values()) * HOURS_PER_DAY / setup.hours,
        wait_p50_h=_percentile(every_wait, 50),
        wait_p99_h=_percentile(every_wait, 99),
        wait_by_kind={k: (_percentile(v, 50), _percentile(v, 99)) for k, v in sorted(waits.items())},
        completed=completed,
        started=len(run.started),
        submitted=len(setup.jobs),
        cycle_ms_p50=_percentile(run.cycle_ms, 50),
        cycle_ms_p99=_percentile(run.cycle_ms, 99),
        amend_ms_p50=_percentile(run.amend_ms, 50),
        amend_ms_p99=_percentile(run.amend_ms, 99),
        promise_ms_p50=_percentile(run.promise_ms, 50),
        promise_ms_p99=_percentile(run.promise_ms, 99),
        pools=pool_metrics(setup, run),
        teams=team_metrics(setup, run),
    )


def _judged(setup: Setup, run: PolicyRun, promised: Mapping[str, datetime]) -> tuple[list[float], float]:
    """The delays (actual - promised start, hours) of the jobs judged on ``promised``, and
    the share of them started no later than the slack after it (1 with none).

    A job not started whose promise falls due after the end (its promised start plus the
    slack) is not judged: nothing it was told has been broken yet. A job never started
    counts its delay until the end.
    """
    delays = []
    kept = 0
    for job, at in promised.items():
        start = run.started.get(job)
        if start is None and at + PROMISE_SLACK >= setup.end:
            continue
        delay = ((start or setup.end) - at) / STEP
        delays.append(delay)
        kept += start is not None and delay <= PROMISE_SLACK_HOURS
    return delays, kept / len(delays) if delays else 1.0


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


class IllegalCommitError(RuntimeError):
    """A policy committed an hour that breaks the contract: a bug, never the user's input."""


def _allowed_pools(setup: Setup, run: PolicyRun, job_id: str, steps: int) -> dict[str, int] | None:
    """Where a job may run in the week's scenario, for the steps it held: the pools of the
    models its estimate allows (None on one pool). Constraint 6 then checks that it ran in one."""
    if not setup.pooled:
        return None
    estimate = setup.estimates[job_id]
    return {
        pool.name: steps
        for pool in setup.pools
        if estimate.hours_on(model_key(pool.gpu_model)) is not None and pool.gpus >= estimate.gpus
    }


def week_grid(setup: Setup, run: PolicyRun) -> tuple[Instance, Grid]:
    """The whole simulation as one contract scenario and grid, for ``check_plan``.

    Each batch job's duration is the hours it holds in the grid, its release the first hour
    after its submission; real-time demand is the actual need. A legal grid means no GPU
    was double-booked, every block was aligned and kept, and no swap cap was broken.
    """

    grid = committed_grid(setup, run)
    committed_hours: dict[str, int] = {}
    for column in zip(*grid, strict=True):
        for job in {job for job in column if job is not None}:
            committed_hours[job] = committed_hours.get(job, 0) + 1
    # A job an amendment started may start within the hour it was submitted in.
    amended = {a.job for amendment in run.amendments for a in amendment.assignments}
    services = week_services(setup, run, grid)
    instance = Instance(
        name=f"simulated-{run.policy.value}",
        gpus=setup.cluster.gpus,
        horizon_steps=setup.hours,
        batch_jobs=tuple(
            BatchJob(
                id=job.id,
                kind=JobKind(job.kind),
                priority=job.priority,
                gpus=run.gpus.get(job.id, setup.estimates[job.id].gpus),
                duration_steps=max(1, committed_hours.get(job.id, 1)),
                release_step=max(
                    0, math.floor(job.submit_hour) if job.id in amended else math.ceil(job.submit_hour - 1e-9)
                ),
                order=n,
                steps_by_pool=_allowed_pools(setup, run, job.id, max(1, committed_hours.get(job.id, 1))),
            )
            for n, job in enumerate(setup.jobs)
        ),
        realtime_jobs=services,
        pools=setup.pools,
    )
    return instance, tuple(tuple(row) for row in grid)


def week_services(setup: Setup, run: PolicyRun, grid: list[list[str | None]]) -> tuple[RealtimeJob, ...]:
    """The apps as the week's services, their demand the actual need.

    An app of several pools (``Setup.app_rates``) has its need on each (``demand_by_pool``);
    the contract keeps a service on one pool for a whole plan, and the daemon moves an app only
    when it has stopped (a running app keeps its pool). So each run of hours it served on one
    pool, from a start after an hour it held no GPUs, is a service of its own, ``APP#2`` and
    on, its cells renamed in ``grid``: a move while it held GPUs stays in one service, and the
    checker reports it."""
    held = realtime_sets(setup, run)
    pools = serving_pools(setup, run)
    services = []
    for s in setup.series:
        app, rates = s.app, setup.app_rates.get(s.app.id)
        pool = setup.app_pool(app.id)
        if not setup.pooled or not rates:
            need = setup.needs_on(app.id, pool)[s.history_hours : s.history_hours + setup.hours]
            services.append(
                RealtimeJob(
                    id=app.id,
                    priority=app.priority,
                    demand=tuple(int(d) for d in need),
                    swap_cap=app.swap_cap,
                    pool=None if pool is None else pool.name,
                )
            )
            continue
        masks, hours = held[app.id], pools[app.id]
        starts = [0] + [
            h for h in range(1, setup.hours) if masks[h] and not masks[h - 1] and hours[h] != hours[h - 1]
        ]
        needs = {
            on.name: setup.needs_on(app.id, on)[s.history_hours : s.history_hours + setup.hours]
            for on in setup.pools
            if on.name in rates
        }
        for k, (begin, end) in enumerate(zip(starts, [*starts[1:], setup.hours], strict=True)):
            name = app.id if k == 0 else f"{app.id}#{k + 1}"
            for row in grid:
                for h in range(begin, end):
                    if row[h] == app.id:
                        row[h] = name
            by_pool = {
                on: tuple(int(need[h]) if begin <= h < end else 0 for h in range(setup.hours))
                for on, need in needs.items()
            }
            first = next(iter(by_pool))
            services.append(
                RealtimeJob(
                    id=name,
                    priority=app.priority,
                    demand=by_pool[first],
                    swap_cap=app.swap_cap,
                    pool=first,
                    demand_by_pool=by_pool,
                )
            )
    return tuple(services)


def committed_grid(setup: Setup, run: PolicyRun) -> list[list[str | None]]:
    """GPU x simulated hour -> the job committed there, or added by an amendment (None: idle).

    A cell changes hands within its hour where an amendment adds a GPU whose batch job had
    ended by then: the grid's cell is the addition's, and the job that ended holds none of
    its cells in that hour, its last (its block's hours end at the hour before).
    """
    grid: list[list[str | None]] = [[None] * setup.hours for _ in range(setup.cluster.gpus)]
    ends = actual_ends(setup, run)
    hours: list[tuple[datetime, datetime | None, tuple[Assignment, ...]]] = [
        (c.hour, None, c.assignments) for c in run.commits
    ]
    hours += [(a.hour, a.made_at, a.assignments) for a in sorted(run.amendments, key=lambda a: a.made_at)]
    for hour, made_at, assignments in hours:
        h = (hour - setup.start) // STEP
        if not 0 <= h < setup.hours:
            continue
        for assignment in assignments:
            for gpu in assignment.gpus:
                holder = grid[gpu][h]
                if holder is not None and made_at is not None and ends.get(holder, made_at + STEP) <= made_at:
                    for row in grid:  # the ended job leaves the hour, its whole block
                        if row[h] == holder:
                            row[h] = None
                elif holder is not None:
                    raise IllegalCommitError(
                        f"{run.policy.value} committed GPU {gpu} twice at hour {h}: "
                        f"to {holder} and to {assignment.job}"
                    )
                grid[gpu][h] = assignment.job
    return grid


def actual_ends(setup: Setup, run: PolicyRun) -> dict[str, datetime]:
    """When each started batch job really ended (or will): its start plus its actual hours."""
    actual = {job.id: timedelta(hours=job.actual_hours) for job in setup.jobs}
    return {job: at + actual[job] for job, at in run.started.items() if job in actual}


def busiest_day_grid(setup: Setup, run: PolicyRun, day: int) -> Grid:
    """The committed grid of simulated day ``day`` (24 hours)."""
    span = slice(day * HOURS_PER_DAY, (day + 1) * HOURS_PER_DAY)
    return tuple(tuple(row[span]) for row in committed_grid(setup, run))
