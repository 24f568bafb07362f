"""Reports on stored plans: pure functions from plan values to rows.

The horizon plan is itself a forecast: it shows idle capacity and real-time coverage risk
before they arrive. Each function here takes values (an :class:`Instance` with its grid
and wall-clock start, a :class:`PlanRun`, commits, apps, traffic) and returns frozen row
dataclasses whose fields are the report's columns, in order. Nothing here reads a store,
a clock or a file; :mod:`gpuplan.app.views.report_inputs` loads the values, the command line
formats the rows.

Times in rows are wall-clock UTC ``datetime``; an interval is ``[start, end)``. A plan
step ``t`` is the wall-clock time ``start + t * step_minutes``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from statistics import NormalDist
from typing import Any

from contract.curves import swap_capped_curve
from contract.errors import InputError
from contract.records import Amendment, App, Cluster, Commit, PlanRun, TrafficHour
from contract.scenario import Cell, Instance, JobKind, Pool, gpus_of, pool_at
from contract.scenario_io import parse_scenario
from forecasting.gpu_mapping import gpus_needed
from gpuplan.app.core.bridge import gpu_demand
from scheduler.board import free_block_starts
from scheduler.warm import read_allocation, trimmed_realtime

#: The quantile whose GPUs a run's forecast stores (``AppForecast.gpus``) and plans for.
PLANNED_QUANTILE = 0.9


def pool_column() -> Any:
    """A row's ``pool``: the pool of its GPUs on a cluster of several pools, None on one pool,
    where the faces leave the column out (``gpuplan.table``: a ``when_set`` column)."""
    return field(default=None, metadata={"when_set": True})


def report_pools(instance: Instance, pool: str | None) -> tuple[Pool, ...]:
    """The pools a report on ``instance`` covers: all of them, or the one ``pool`` names (the
    faces' ``--pool``/``?pool=``; InputError naming ``pool`` when the plan has no such pool)."""
    if pool is None:
        return instance.pools
    if pool not in instance.pools_by_name:
        names = [p.name for p in instance.pools] if instance.pooled else []
        expected = f"one of the plan's pools {names}" if names else "absent: the plan is over one pool"
        raise InputError("pool", expected, pool)
    return (instance.pools_by_name[pool],)


def _pool_name(instance: Instance, pool: Pool) -> str | None:
    """A row's ``pool`` value: the pool's name on a cluster of several pools, else None."""
    return pool.name if instance.pooled else None


def pool_block_starts(free: int, pool: Pool, block_gpus: int) -> int:
    """Bit ``a`` set iff the block ``[a, a + block_gpus)`` lies inside ``free`` and inside
    ``pool``, aligned from the pool's first GPU (a block never straddles two pools; on one
    pool this is :func:`scheduler.board.free_block_starts`)."""
    if block_gpus > pool.gpus:
        return 0
    inside = free >> pool.first_gpu & ((1 << pool.gpus) - 1)
    return free_block_starts(inside, pool.gpus, block_gpus) << pool.first_gpu


# ---------------------------------------------------------------------------------------
# The grid's free cells


def run_instance(run: PlanRun) -> Instance:
    """The run's scenario as an :class:`Instance` (its exported ``scenario.json``), each app of
    several pools on the pool the run's grid serves it on, with its demand there."""
    instance = parse_scenario(run.scenario, source=f"run {run.id}", default_name=f"run-{run.id}")
    if len(run.grid) != instance.gpus:  # no grid of this scenario's: its apps as they were read
        return instance
    return instance.as_served(run.grid)


def free_masks(instance: Instance, grid: Sequence[Sequence[Cell]], open_from: int = 0) -> list[int]:
    """Per step, the GPUs that are free: not down, and planned for no job or held by a
    real-time app above its need that step (its demand: the P90 plus headroom, swap-capped
    from what it holds when the step comes).

    A plan keeps an app's idle GPUs where nothing else takes them (each give-back is a
    replica stopped): those are bookable, and a job submitted onto them gets them. The room
    is the one a submit is placed in (:func:`scheduler.warm.trimmed_realtime`: each app held to
    its need, the GPUs it gives back those that free the widest aligned block). Steps before
    ``open_from`` (committed hours: decided already) have nothing free."""
    if len(grid) != instance.gpus or any(len(row) != instance.horizon_steps for row in grid):
        shape = f"{len(grid)} rows of {sorted({len(row) for row in grid})} cells"
        raise InputError(
            "grid", f"{instance.gpus} rows (GPUs) of {instance.horizon_steps} cells (steps)", shape
        )
    taken = [0] * instance.horizon_steps
    for gpu, row in enumerate(grid):
        for t, cell in enumerate(row):
            if cell is not None:
                taken[t] |= 1 << gpu
    allocation = read_allocation(instance, grid)
    if allocation is not None:  # a legal plan (a stored one is): the apps held to their need
        trimmed = trimmed_realtime(instance, allocation, kept_steps=open_from)
        for job in instance.realtime_jobs:
            needed = trimmed.realtime[job.id]
            for t, held in enumerate(allocation.realtime[job.id]):
                taken[t] &= ~(held & ~needed[t])
    return [
        0 if t < open_from else instance.all_gpus_mask & ~(busy | down)
        for t, (busy, down) in enumerate(zip(taken, instance.down_masks, strict=True))
    ]


def _steps_of_hours(hours: float, step_minutes: int, field: str) -> int:
    if not hours >= 1:
        raise InputError(field, "a number of hours >= 1", hours)
    return math.ceil(hours * 60 / step_minutes - 1e-9)


def _step_times(start: datetime, step_minutes: int) -> _Clock:
    return _Clock(start, timedelta(minutes=step_minutes))


@dataclass(frozen=True, slots=True)
class _Clock:
    start: datetime
    step: timedelta

    def at(self, t: int) -> datetime:
        return self.start + t * self.step

    @property
    def hours_per_step(self) -> float:
        return self.step.total_seconds() / 3600


def _block_sizes(cluster_gpus: int, smallest: int = 1) -> list[int]:
    """Powers of two from the smallest one >= ``smallest`` up to the cluster size."""
    size = 1
    while size < smallest:
        size <<= 1
    sizes = []
    while size <= cluster_gpus:
        sizes.append(size)
        size <<= 1
    return sizes


# ---------------------------------------------------------------------------------------
# Idle windows


@dataclass(frozen=True, slots=True)
class IdleWindow:
    """GPUs ``first_gpu .. first_gpu + gpus - 1`` free from ``start`` up to (not including) ``end``.

    ``reaches_horizon``: the window runs to the plan's last step, so it may last longer.
    """

    start: datetime
    end: datetime
    first_gpu: int
    gpus: int
    hours: float
    gpu_hours: float
    reaches_horizon: bool
    pool: str | None = pool_column()


@dataclass(frozen=True, slots=True)
class IdleWindows:
    """The listed windows and, so that nothing idle is hidden, what they leave out."""

    rows: tuple[IdleWindow, ...]
    free_gpu_hours: float
    #: Free GPU-hours in no aligned block of ``min_gpus`` GPUs free for ``min_hours``.
    unlisted_gpu_hours: float
    min_gpus: int
    min_hours: float
    #: The pool the windows were looked for in (``pool``); None: every pool.
    pool: str | None = None


def idle_windows(
    instance: Instance,
    grid: Sequence[Sequence[Cell]],
    start: datetime,
    min_gpus: int = 1,
    min_hours: float = 1,
    *,
    pool: str | None = None,
    open_from: int = 0,
) -> IdleWindows:
    """The maximal free aligned windows of at least ``min_gpus`` GPUs for ``min_hours``.

    A *window* is an aligned block ``[a, a + b)`` (``b`` a power of two, ``a % b == 0``,
    what a batch job could take) with a step interval ``[s, e)`` over which every cell of
    the block is free. Window W is *inside* W' when W's block is within W''s block and
    its interval within W''s interval. A window is *maximal* when it is inside no other
    window; since aligned blocks nest (buddy tree), that holds exactly when

    - the interval cannot be extended: ``s == 0`` or the block is not free at ``s - 1``,
      and ``e == horizon`` or it is not free at ``e``; and
    - the aligned parent block ``[a - a % 2b, a - a % 2b + 2b)`` (if it fits in the
      cluster) is not free over the whole interval.

    Listed: every maximal window with ``b >= min_gpus`` lasting ``>= min_hours``, sorted
    by start, then first GPU, then widest first. Every free aligned window of that size
    lies inside a listed one (a window is inside some maximal window, which is at least as
    wide and as long). Free cells covered by no listed window are summed in
    ``unlisted_gpu_hours``.

    On a cluster of several pools a block lies inside one pool, aligned from its first GPU
    (the parent of a pool's whole block is none): windows never straddle two pools, and each
    row names its pool. ``pool``: that pool's windows and free GPU-hours only. ``open_from``:
    the first step not committed (:func:`free_masks`).
    """
    if min_gpus < 1:
        raise InputError("min_gpus", "an integer >= 1", min_gpus)
    min_steps = _steps_of_hours(min_hours, instance.step_minutes, "min_hours")
    pools = report_pools(instance, pool)
    clock = _step_times(start, instance.step_minutes)
    horizon = instance.horizon_steps
    shown = sum(p.mask for p in pools)
    free = [f & shown for f in free_masks(instance, grid, open_from)]
    found: list[tuple[int, int, int, int, Pool]] = []  # (s, e, a, b, pool)
    for where in pools:
        found += _pool_windows(free, where, min_gpus, min_steps)
    found.sort(key=lambda w: (w[0], w[2], -w[3], w[1]))
    covered = [0] * horizon
    for s, e, a, b, _ in found:
        for t in range(s, e):
            covered[t] |= ((1 << b) - 1) << a
    free_cells = sum(f.bit_count() for f in free)
    unlisted_cells = sum((f & ~c).bit_count() for f, c in zip(free, covered, strict=True))
    per_step = clock.hours_per_step
    rows = tuple(
        IdleWindow(
            start=clock.at(s),
            end=clock.at(e),
            first_gpu=a,
            gpus=b,
            hours=(e - s) * per_step,
            gpu_hours=(e - s) * b * per_step,
            reaches_horizon=e == horizon,
            pool=_pool_name(instance, where),
        )
        for s, e, a, b, where in found
    )
    return IdleWindows(
        rows=rows,
        free_gpu_hours=free_cells * per_step,
        unlisted_gpu_hours=unlisted_cells * per_step,
        min_gpus=min_gpus,
        min_hours=min_hours,
        pool=pool,
    )


def _pool_windows(
    free: Sequence[int], pool: Pool, min_gpus: int, min_steps: int
) -> list[tuple[int, int, int, int, Pool]]:
    """:func:`idle_windows`' maximal windows inside ``pool``: ``(s, e, a, b, pool)``."""
    # free_starts[b][t]: bit a set iff the block [a, a + b) of the pool is free at step t.
    free_starts = {b: [pool_block_starts(f, pool, b) for f in free] for b in _block_sizes(pool.gpus)}
    found: list[tuple[int, int, int, int, Pool]] = []
    for b in _block_sizes(pool.gpus, min_gpus):
        parent = free_starts.get(2 * b)
        ever = 0
        for mask in free_starts[b]:
            ever |= mask
        for a in gpus_of(ever):
            parent_first = a - (a - pool.first_gpu) % (2 * b)
            for s, e in _runs(free_starts[b], a):
                if e - s < min_steps:
                    continue
                if parent is not None and all(parent[t] >> parent_first & 1 for t in range(s, e)):
                    continue  # the parent block is free over the same interval: wider window
                found.append((s, e, a, b, pool))
    return found


def _runs(masks: Sequence[int], bit: int) -> Iterable[tuple[int, int]]:
    """Maximal step intervals ``[s, e)`` over which ``bit`` is set in every mask."""
    s: int | None = None
    for t, mask in enumerate(masks):
        if mask >> bit & 1:
            if s is None:
                s = t
        elif s is not None:
            yield s, t
            s = None
    if s is not None:
        yield s, len(masks)


# ---------------------------------------------------------------------------------------
# Bookable starts


@dataclass(frozen=True, slots=True)
class BookableStart:
    """A job of ``gpus`` GPUs for the asked hours fits on ``first_gpu ..`` from ``start`` to ``end``.

    ``unplanned_hours``: how much of the run lies past the plan's horizon, where nothing is
    planned yet (the contract's rule: a run is checked up to the horizon).
    """

    start: datetime
    end: datetime
    first_gpu: int
    gpus: int
    unplanned_hours: float
    pool: str | None = pool_column()


def bookable_starts(
    instance: Instance,
    grid: Sequence[Sequence[Cell]],
    start: datetime,
    gpus: int,
    hours: float,
    *,
    limit: int | None = None,
    pool: str | None = None,
    open_from: int = 0,
) -> list[BookableStart]:
    """Per aligned block, the earliest start at which a ``gpus``-GPU job of ``hours`` fits.

    "Fits" is the contract's placement rule with the plan held fixed: the block is free
    (:func:`free_masks`: not down, planned for nothing or held idle by an app above its
    need) at every step of ``[s, min(s + duration, horizon))``, so booking it moves no
    batch job and leaves every app its need. Each aligned block that fits somewhere appears
    once, at its earliest start; rows are sorted by start, then first GPU, so the first
    row is the earliest start of all: where a submit of that job is planned. ``limit``
    keeps the first rows only; ``open_from``: the first step not committed.

    On a cluster of several pools a block lies inside one pool (:func:`pool_block_starts`)
    and each row names its pool; ``pool``: that pool's blocks only.
    """
    pools = report_pools(instance, pool)
    largest = max(pools, key=lambda p: p.gpus)
    if gpus < 1 or gpus & (gpus - 1) or gpus > largest.gpus:
        where = (
            f"the cluster's {instance.gpus}"
            if not instance.pooled
            else f"{largest.gpus}, the GPUs of the {'' if pool else 'largest '}pool {largest.name}"
        )
        raise InputError("gpus", f"a power of two (1, 2, 4, ...) up to {where}", gpus)
    if limit is not None and limit < 1:
        raise InputError("limit", "an integer >= 1", limit)
    duration = _steps_of_hours(hours, instance.step_minutes, "hours")
    clock = _step_times(start, instance.step_minutes)
    horizon = instance.horizon_steps
    masks = free_masks(instance, grid, open_from)
    fits_at = [sum(pool_block_starts(f, where, gpus) for where in pools) for f in masks]
    seen = 0
    rows: list[BookableStart] = []
    for s in range(open_from, horizon):
        fits = instance.all_gpus_mask
        for t in range(s, min(s + duration, horizon)):
            fits &= fits_at[t]
        rows += [
            BookableStart(
                start=clock.at(s),
                end=clock.at(s + duration),
                first_gpu=a,
                gpus=gpus,
                unplanned_hours=max(0, s + duration - horizon) * clock.hours_per_step,
                pool=_pool_name(instance, instance.pool_of_gpu(a)),
            )
            for a in gpus_of(fits & ~seen)
        ]
        seen |= fits
    return rows[:limit] if limit is not None else rows


# ---------------------------------------------------------------------------------------
# Real-time coverage risk


class ShortfallReason(StrEnum):
    """Why a plan holds fewer GPUs than an app needs in an hour (tested in this order)."""

    CAPACITY = "capacity"  # the cluster beside the other apps' GPUs is too small
    GPUS_DOWN = "gpus_down"  # enough GPUs exist, but too many are down that hour
    BATCH_PINNED = "batch_pinned"  # running batch work (not movable) sits on the GPUs it needs
    SWAP_CAP = "swap_cap"  # the GPUs are there, but the swap cap cannot ramp to them in time
    ABOVE_PLANNED = "above_planned"  # the plan covers the demand it was given; this quantile needs more
    UNKNOWN = "unknown"  # reachable by count: the planner chose otherwise (or GPU identity mattered)
    REALISED = "realised"  # a past hour: the traffic that came needed more than was committed


class NeedBasis(StrEnum):
    FORECAST = "forecast"  # a planned hour, against the stored forecast
    ACTUAL = "actual"  # a committed past hour, against the traffic that came


@dataclass(frozen=True, slots=True)
class CoverageRow:
    """One app in one hour where it holds fewer GPUs than it needs."""

    hour: datetime
    app: str
    planned_gpus: int
    needed_gpus: int
    shortfall_gpus: int
    reason: ShortfallReason
    basis: NeedBasis
    pool: str | None = pool_column()


@dataclass(frozen=True, slots=True)
class RealisedCoverage:
    """Committed past hours of one app against its actual traffic, ``[since, until)``."""

    app: str
    since: datetime
    until: datetime
    hours: int
    needed_gpu_hours: float
    served_gpu_hours: float
    served_share: float
    short_hours: int


@dataclass(frozen=True, slots=True)
class RealisedHour:
    """One app in one committed past hour: GPUs committed, GPUs its actual traffic needed."""

    hour: datetime
    app: str
    committed_gpus: int
    needed_gpus: int


@dataclass(frozen=True, slots=True)
class CoverageReport:
    """Shortfall rows (past hours first, then planned ones), per-app realised shares, past hours."""

    rows: tuple[CoverageRow, ...]
    realised: tuple[RealisedCoverage, ...]
    past: tuple[RealisedHour, ...]
    quantile: float


def quantile_requests(p50: float, p90: float, quantile: float) -> float:
    """Requests at ``quantile`` from a forecast's P50 and P90.

    The forecast is read as normal with median P50 and its P90 where the forecaster put it
    (sigma = (P90 - P50) / z(0.9)); so 0.5 gives P50 and 0.9 gives P90 exactly, and other
    quantiles follow the same spread. Never below zero.
    """
    z = NormalDist().inv_cdf
    sigma = (p90 - p50) / z(PLANNED_QUANTILE)
    return max(0.0, p50 + sigma * z(quantile))


def app_needs(run: PlanRun, instance: Instance, apps: Sequence[App], quantile: float) -> dict[str, list[int]]:
    """Per real-time job of the run, the GPUs its forecast at ``quantile`` needs per step.

    At 0.9: the stored forecast's ``gpus`` (what the plan was asked to cover); a run stored
    without forecasts falls back on the scenario's demand, which is the same numbers.
    Other quantiles: the quantile's requests (:func:`quantile_requests`) mapped the way the
    service maps P90 requests into the scenario (:func:`gpuplan.app.core.bridge.gpu_demand`: ceil
    of requests x (1 + headroom) / requests per GPU-hour, then the least curve the app's
    swap cap can follow), with the app's stored capacity. (The stored P90 curve was capped
    over twice the horizon, so a rise just past the horizon can lift its last hours; the
    derived curves see only the stored hours.)
    """
    if not 0 < quantile < 1:
        raise InputError("quantile", "a number strictly between 0 and 1 (0.9 = P90)", quantile)
    clock = _step_times(run.start, instance.step_minutes)
    by_key = {(f.app, f.hour): f for f in run.forecasts}
    known_apps = {app.id: app for app in apps}
    needs: dict[str, list[int]] = {}
    for job in instance.realtime_jobs:
        hours = [clock.at(t) for t in range(instance.horizon_steps)]
        if math.isclose(quantile, PLANNED_QUANTILE):
            needs[job.id] = [
                by_key[job.id, h].gpus if (job.id, h) in by_key else job.demand[t]
                for t, h in enumerate(hours)
            ]
            continue
        missing = [h for h in hours if (job.id, h) not in by_key]
        if missing:
            raise InputError(
                "quantile",
                f"{PLANNED_QUANTILE} for run {run.id}, which stored no forecast for {job.id!r} "
                f"at {missing[0].isoformat()}",
                quantile,
                hint="Other quantiles are derived from the stored P50 and P90.",
            )
        app = known_apps.get(job.id)
        if app is None:
            raise InputError("app", f"one of the stored apps {sorted(known_apps)}", job.id)
        requests = [quantile_requests(by_key[job.id, h].p50, by_key[job.id, h].p90, quantile) for h in hours]
        needs[job.id] = gpu_demand(requests, app, instance.horizon_steps)
    return needs


def planned_counts(instance: Instance, grid: Sequence[Sequence[Cell]]) -> dict[str, list[int]]:
    """Per job id in the grid, how many GPUs it holds at each step."""
    counts: dict[str, list[int]] = {}
    for row in grid:
        for t, cell in enumerate(row):
            if cell is not None:
                counts.setdefault(cell, [0] * instance.horizon_steps)[t] += 1
    return counts


def coverage_risk(
    run: PlanRun,
    apps: Sequence[App],
    quantile: float = PLANNED_QUANTILE,
    *,
    traffic: Sequence[TrafficHour] | None = None,
    commits: Sequence[Commit] | None = None,
    since: datetime | None = None,
    pool: str | None = None,
) -> CoverageReport:
    """Hours where an app holds fewer GPUs than it needs: ahead from the plan, behind from commits.

    **Ahead** (each step of the run): planned GPUs (its cells in the grid) against the
    need at ``quantile`` (:func:`app_needs`); a row for every hour with a shortfall, and the
    first reason that explains it, tested in this order with ``n`` the need at step t:

    1. ``n`` exceeds the GPUs the app could hold at t at all, ``avail(t) = gpus - down(t)
       - running batch(t) - other apps' planned GPUs(t)``: ``capacity`` when even with
       every GPU up and no running batch work the other apps leave too few; else
       ``gpus_down`` when the down GPUs alone explain it, ``batch_pinned`` when the running
       batch jobs alone do (both needed: the larger of the two).
    2. ``swap_cap``: the least swap-capped curve that reaches ``n`` at t
       (:func:`contract.curves.swap_capped_curve` of ``n`` at t, zero before) exceeds
       what was reachable earlier: ``avail(u)`` at some step u < t, or at step 0 the
       running set plus the cap. The GPUs are there at t, the ramp could not get there.
    3. ``above_planned``: the plan holds at least the demand the run was given (the
       scenario's curve); the need at this quantile is above what was planned for.
    4. ``unknown``: the GPUs were there and reachable by count; the planner gave them to
       other work, or which GPUs were free mattered (a move costs two swaps).

    **Behind** (realised): each committed hour in ``[since, run.start)`` (``since`` defaults
    to one horizon before the run) that has traffic: committed GPUs against
    ``ceil(requests x (1 + headroom) / requests_per_gpu_hour)``; a ``realised`` row for
    each short hour and, per app, the share of GPU-demand the committed hours served
    (served = min(committed, needed)). Hours without a commit or without traffic are not
    counted.

    On a cluster of several pools an app serves on its pool: ``gpus``, ``down``, the running
    batch work and the other apps are its pool's, and each row names the pool. ``pool``: the
    apps of that pool only.
    """
    instance = run_instance(run)
    covered = {p.name for p in report_pools(instance, pool)}
    clock = _step_times(run.start, instance.step_minutes)
    needs = app_needs(run, instance, apps, quantile)
    counts = planned_counts(instance, run.grid)
    horizon = instance.horizon_steps
    app_pool = {job.id: instance.realtime_pool(job) for job in instance.realtime_jobs}
    rows: list[CoverageRow] = []
    for job in instance.realtime_jobs:
        where = app_pool[job.id]
        if where.name not in covered:
            continue
        planned = counts.get(job.id, [0] * horizon)
        rt_total = [
            sum(counts.get(k, [0] * horizon)[t] for k, p in app_pool.items() if p == where)
            for t in range(horizon)
        ]
        down = [(mask & where.mask).bit_count() for mask in instance.down_masks]
        pinned = [(mask & where.mask).bit_count() for mask in instance.running_masks]
        avail = [where.gpus - down[t] - pinned[t] - (rt_total[t] - planned[t]) for t in range(horizon)]
        running = instance.running_realtime.get(job.id)
        for t, need in enumerate(needs[job.id]):
            if planned[t] >= need:
                continue
            if need > avail[t]:
                reason = _missing_gpus_reason(need, avail[t], down[t], pinned[t])
            elif _ramp_unreachable(
                need, t, job.swap_cap, avail, None if running is None else len(running.gpus)
            ):
                reason = ShortfallReason.SWAP_CAP
            elif planned[t] >= job.demand[t]:
                reason = ShortfallReason.ABOVE_PLANNED
            else:
                reason = ShortfallReason.UNKNOWN
            rows.append(
                CoverageRow(
                    clock.at(t),
                    job.id,
                    planned[t],
                    need,
                    need - planned[t],
                    reason,
                    NeedBasis.FORECAST,
                    _pool_name(instance, where),
                )
            )
    past_since = since if since is not None else clock.at(-horizon)
    app_ids = [job.id for job in instance.realtime_jobs if app_pool[job.id].name in covered]
    past = realised_hours(
        apps, traffic or (), commits or (), since=past_since, until=run.start, app_ids=app_ids
    )
    realised_rows = [
        CoverageRow(
            h.hour,
            h.app,
            h.committed_gpus,
            h.needed_gpus,
            h.needed_gpus - h.committed_gpus,
            ShortfallReason.REALISED,
            NeedBasis.ACTUAL,
            _pool_name(instance, app_pool[h.app]),
        )
        for h in past
        if h.committed_gpus < h.needed_gpus
    ]
    summaries = [
        _realised_summary(app, [h for h in past if h.app == app], past_since, run.start)
        for app in app_ids
        if any(h.app == app for h in past)
    ]
    return CoverageReport(
        rows=tuple(realised_rows) + tuple(sorted(rows, key=lambda r: (r.hour, r.app))),
        realised=tuple(summaries),
        past=tuple(past),
        quantile=quantile,
    )


def _missing_gpus_reason(need: int, avail: int, down: int, pinned: int) -> ShortfallReason:
    if need > avail + down + pinned:
        return ShortfallReason.CAPACITY
    if down and need <= avail + down:
        return ShortfallReason.GPUS_DOWN
    if pinned and need <= avail + pinned:
        return ShortfallReason.BATCH_PINNED
    return ShortfallReason.GPUS_DOWN if down >= pinned else ShortfallReason.BATCH_PINNED


def _ramp_unreachable(need: int, step: int, swap_cap: int, avail: Sequence[int], running: int | None) -> bool:
    """Whether the least capped ramp to ``need`` at ``step`` asks more than was reachable before it."""
    ramp = swap_capped_curve([0] * step + [need], swap_cap)
    if running is not None and ramp[0] > running + swap_cap:
        return True
    return any(ramp[u] > avail[u] for u in range(step))


def realised_hours(
    apps: Sequence[App],
    traffic: Sequence[TrafficHour],
    commits: Sequence[Commit],
    *,
    since: datetime,
    until: datetime,
    app_ids: Sequence[str],
) -> list[RealisedHour]:
    """Per app, each committed hour in ``[since, until)`` with traffic: what was held and needed.

    Needed = ``ceil(requests x (1 + headroom) / requests_per_gpu_hour)`` with the app's
    stored capacity; an app with no stored capacity is left out.
    """
    known = {app.id: app for app in apps}
    requests = {(row.app, row.hour): row.requests for row in traffic}
    out: list[RealisedHour] = []
    for commit in sorted((c for c in commits if since <= c.hour < until), key=lambda c: c.hour):
        for app_id in app_ids:
            app = known.get(app_id)
            came = requests.get((app_id, commit.hour))
            if app is None or came is None:
                continue
            held = sum(len(a.gpus) for a in commit.assignments if a.job == app_id)
            needed = int(gpus_needed([came], app.requests_per_gpu_hour, app.headroom)[0])
            out.append(RealisedHour(commit.hour, app_id, held, needed))
    return out


def _realised_summary(
    app: str, hours: Sequence[RealisedHour], since: datetime, until: datetime
) -> RealisedCoverage:
    needed = sum(h.needed_gpus for h in hours)
    served = sum(min(h.committed_gpus, h.needed_gpus) for h in hours)
    return RealisedCoverage(
        app=app,
        since=since,
        until=until,
        hours=len(hours),
        needed_gpu_hours=float(needed),
        served_gpu_hours=float(served),
        served_share=served / needed if needed else 1.0,
        short_hours=sum(h.committed_gpus < h.needed_gpus for h in hours),
    )


# ---------------------------------------------------------------------------------------
# Utilization of committed hours


@dataclass(frozen=True, slots=True)
class UtilizationRow:
    """GPUs of one committed hour by what held them; ``other``: jobs no longer known."""

    hour: datetime
    training: int
    batch_inference: int
    quantization: int
    realtime: int
    other: int
    idle: int
    down: int
    busy_share: float
    pool: str | None = pool_column()


@dataclass(frozen=True, slots=True)
class UtilizationReport:
    rows: tuple[UtilizationRow, ...]
    #: GPU-hours over the committed hours, by the row's column names (training .. down).
    gpu_hours: Mapping[str, float]
    #: Busy GPU-hours over up GPU-hours (the contract's utilization, counting held real-time GPUs).
    busy_share: float


_KIND_COLUMNS = ("training", "batch_inference", "quantization", "realtime", "other")


def down_gpus_at(cluster: Cluster, hour: datetime) -> set[int]:
    """GPUs down at any time during ``[hour, hour + 1 h)``."""
    end = hour + timedelta(hours=1)
    return {w.gpu for w in cluster.down if w.start < end and (w.end is None or w.end > hour)}


def utilization(
    commits: Sequence[Commit],
    cluster: Cluster,
    kinds: Mapping[str, JobKind],
    down_at: Mapping[datetime, Collection[int]] | None = None,
    pool: Pool | None = None,
) -> UtilizationReport:
    """Per committed hour, GPUs busy by job kind, idle and down; totals over the hours.

    ``kinds`` maps job ids (batch jobs and real-time apps) to their kind; a committed job
    missing from it counts as ``other``. A GPU held by a job counts as busy even when a
    down window covers it; ``down`` counts only down GPUs that nothing held. ``down_at``:
    the GPUs down in an hour as it was committed; an hour it lacks reads ``cluster``'s windows.
    ``pool`` (placed: its ``first_gpu`` set): that pool's GPUs only, each row naming it.
    """
    down_at = down_at or {}
    inside = range(cluster.gpus) if pool is None else range(pool.first_gpu, pool.end_gpu)
    gpus = len(inside)
    rows: list[UtilizationRow] = []
    totals = dict.fromkeys((*_KIND_COLUMNS, "idle", "down"), 0.0)
    for commit in sorted(commits, key=lambda c: c.hour):
        by_kind = dict.fromkeys(_KIND_COLUMNS, 0)
        held: set[int] = set()
        for assignment in commit.assignments:
            kind = kinds.get(assignment.job)
            mine = [gpu for gpu in assignment.gpus if gpu in inside]
            by_kind[kind.value if kind is not None else "other"] += len(mine)
            held.update(mine)
        then = down_at.get(commit.hour)
        off = down_gpus_at(cluster, commit.hour) if then is None else set(then)
        down = len({gpu for gpu in off if gpu in inside} - held)
        busy = len(held)
        idle = max(0, gpus - busy - down)
        up = gpus - down
        rows.append(
            UtilizationRow(
                hour=commit.hour,
                training=by_kind["training"],
                batch_inference=by_kind["batch_inference"],
                quantization=by_kind["quantization"],
                realtime=by_kind["realtime"],
                other=by_kind["other"],
                idle=idle,
                down=down,
                busy_share=busy / up if up else 0.0,
                pool=None if pool is None else pool.name,
            )
        )
        for column, count in (*by_kind.items(), ("idle", idle), ("down", down)):
            totals[column] += count
    busy_hours = sum(totals[c] for c in _KIND_COLUMNS)
    up_hours = busy_hours + totals["idle"]
    return UtilizationReport(
        rows=tuple(rows), gpu_hours=totals, busy_share=busy_hours / up_hours if up_hours else 0.0
    )


# ---------------------------------------------------------------------------------------
# Committed hours


@dataclass(frozen=True, slots=True)
class CommitRow:
    """One job in one committed hour, on GPUs ``gpus``; for an amendment's addition, the
    amendment's number within the hour and when it was made (the commit's own rows: none)."""

    hour: datetime
    job: str
    gpus: tuple[int, ...]
    amendment: int | None = None
    at: datetime | None = None
    pool: str | None = pool_column()


def commit_rows(
    commits: Sequence[Commit],
    amendments: Sequence[Amendment] = (),
    pools: Sequence[Pool] = (),
    pool: str | None = None,
) -> list[CommitRow]:
    """One row per committed hour and job, by hour then job; then each amendment's additions.
    On several ``pools`` (placed), each row names the pool of its GPUs; ``pool``: its rows only."""
    rows = [
        CommitRow(commit.hour, a.job, tuple(sorted(a.gpus)))
        for commit in commits
        for a in sorted(commit.assignments, key=lambda a: a.job)
    ]
    rows += [
        CommitRow(amendment.hour, a.job, tuple(sorted(a.gpus)), amendment.seq, amendment.made_at)
        for amendment in amendments
        for a in sorted(amendment.assignments, key=lambda a: a.job)
    ]
    if len(pools) > 1:
        named = []
        for row in rows:
            found = pool_at(pools, row.gpus[0]) if row.gpus else None
            named.append(replace(row, pool=None if found is None else found.name))
        rows = [row for row in named if pool is None or row.pool == pool]
    return sorted(rows, key=lambda r: (r.hour, r.amendment or 0, r.job))


def utilization_of_pools(
    commits: Sequence[Commit],
    cluster: Cluster,
    kinds: Mapping[str, JobKind],
    down_at: Mapping[datetime, Collection[int]] | None = None,
    *,
    pools: Sequence[Pool] = (),
    pool: str | None = None,
) -> dict[str | None, UtilizationReport]:
    """:func:`utilization` of the whole cluster (key None) on one pool; on several ``pools``
    (placed), of each pool (``pool``: that one only), by name, in the cluster's order."""
    if len(pools) <= 1:
        return {None: utilization(commits, cluster, kinds, down_at)}
    return {p.name: utilization(commits, cluster, kinds, down_at, p) for p in pools if pool in (None, p.name)}


def commits_grid(commits: Sequence[Commit], cluster_gpus: int) -> list[list[str | None]]:
    """Committed hours as a grid (one row per GPU, one column per commit, in hour order)."""
    ordered = sorted(commits, key=lambda c: c.hour)
    grid: list[list[str | None]] = [[None] * len(ordered) for _ in range(cluster_gpus)]
    for t, commit in enumerate(ordered):
        for a in commit.assignments:
            for gpu in a.gpus:
                if gpu < cluster_gpus:
                    grid[gpu][t] = a.job
    return grid
