"""Amendments: additions to the hour already committed, made by a later cycle in that hour.

An hour is committed once, at its first cycle. A later cycle in the same hour (the :30
one) may add to it, never move or remove anything:

- **real-time GPUs from GPUs idle in that hour**, when the traffic observed so far in the
  hour runs above what the app's committed GPUs serve, or when the next hours' plan asks for
  more than one swap-cap step above them (a rise planned ahead: :func:`ahead_need`); within
  the app's swap cap, counted against the hour before (adding only, so the change from the
  hour before grows by exactly the GPUs added);
- **batch starts on GPUs free for the rest of the hour**: a queued job that the new plan
  starts at the next hour, on a block that is idle now, starts now on that block.

*Idle now* means held by nothing that still runs: a GPU of the hour's commit whose batch job
has ended (done, failed or cancelled) since is free for the rest of the hour, and an
amendment may add it. The commit's record stays as it was; the ended job simply holds
nothing any more (:func:`occupied`).

The hour's allocation is then its commit plus every amendment's additions, and the next
plan starts from it (:func:`gpuplan.app.cycle.tick.hour_allocation`). :func:`check_amendment` is the legality
rule, a pure function; :func:`amend` checks and stores the amendment and delivers it through
the outbox (:mod:`gpuplan.app.cycle.outbox`), as a commit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from contract.errors import InputError
from contract.records import Amendment, App, Assignment, JobState, ObservedTraffic
from gpuplan.app.core.bridge import (
    STEP,
    floor_hour,
    gpus_for,
    hour_allocation,
    merged_assignments,
    named_pool,
    pool_of,
)
from gpuplan.app.cycle.outbox import deliver_pending
from gpuplan.app.cycle.tick import app_demand, down_gpus, plan_cycle, require_cluster

if TYPE_CHECKING:
    from contract.scenario import Pool
    from gpuplan.app.adapters.executors import Executor
    from gpuplan.app.core.config import ServiceConfig
    from gpuplan.app.core.forecasters import Forecasters
    from gpuplan.app.cycle.tick import CycleReport
    from storage.store import Store

log = logging.getLogger(__name__)
#: The one line per cycle, shown at the daemon's default level (gpuplan/cmd_daemon.py).
cycle_log = logging.getLogger("gpuplan.cycle")


def check_amendment(
    additions: Sequence[Assignment],
    *,
    gpus: int,
    down: frozenset[int],
    held: Mapping[str, tuple[int, ...]],
    before: Mapping[str, tuple[int, ...]] | None,
    apps: Mapping[str, App],
    queued: Mapping[str, int],
) -> list[str]:
    """What makes ``additions`` illegal against the hour (empty: legal).

    ``held`` is what holds the hour's GPUs now (:func:`occupied`: its commit and earlier
    amendments, less the batch jobs that have ended), ``before`` the hour before's (None: not
    committed, so no swap cap binds, as at a plan's step 0 without a running set), ``apps``
    the real-time apps by id, ``queued`` each queued batch job's GPUs.
    """
    problems: list[str] = []
    taken = {gpu for block in held.values() for gpu in block}
    seen: set[int] = set()
    for a in additions:
        for gpu in a.gpus:
            if not 0 <= gpu < gpus:
                problems.append(f"{a.job}: GPU {gpu} is not in the cluster's 0..{gpus - 1}")
            elif gpu in down:
                problems.append(f"{a.job}: GPU {gpu} is down in this hour")
            elif gpu in taken:
                problems.append(f"{a.job}: GPU {gpu} is committed in this hour")
            elif gpu in seen:
                problems.append(f"{a.job}: GPU {gpu} is added twice")
            seen.add(gpu)
        app = apps.get(a.job)
        if app is not None and before is not None:
            after = set(held.get(a.job, ())) | set(a.gpus)
            change = len(after ^ set(before.get(a.job, ())))
            if change > app.swap_cap:
                problems.append(
                    f"{a.job}: {change} GPUs change from the hour before, "
                    f"more than its swap cap {app.swap_cap}"
                )
        elif app is not None:
            pass
        elif a.job in queued:
            size, first = len(a.gpus), min(a.gpus, default=0)
            if size != queued[a.job] or tuple(a.gpus) != tuple(range(first, first + size)) or first % size:
                problems.append(
                    f"{a.job}: needs an aligned block of {queued[a.job]} GPUs; got {list(a.gpus)}"
                )
        elif a.job in held:
            problems.append(f"{a.job}: a batch job already placed in this hour keeps its block")
        else:
            problems.append(f"{a.job}: neither a real-time app nor a queued job")
    return problems


def amend(
    store: Store,
    now: datetime,
    additions: Sequence[Assignment],
    *,
    run_id: int | None = None,
    executor: Executor | None = None,
) -> Amendment | None:
    """Check ``additions`` against the current hour, store them as its next amendment with its
    delivery pending in the outbox, and deliver it.

    Refused (:class:`InputError`, nothing stored) when the hour is not committed, a later
    hour is, or an addition is illegal (:func:`check_amendment`). No additions: None.
    """

    hour = floor_hour(now)
    if not additions:
        return None
    commit = store.commit(hour)
    if commit is None:
        raise InputError("hour", "an hour that is committed", hour.isoformat())
    latest = store.last_commit()
    if latest is not None and latest.hour > hour:
        raise InputError("hour", f"the latest committed hour {latest.hour.isoformat()}", hour.isoformat())
    cluster = require_cluster(store)
    held = occupied(store, hour)
    before = allocated(store, hour - STEP)
    queued = {job.id: job.estimate.gpus for job in store.jobs([JobState.QUEUED]) if job.estimate is not None}
    problems = check_amendment(
        additions,
        gpus=cluster.gpus,
        down=down_gpus(cluster, hour),
        held=held,
        before=before,
        apps={app.id: app for app in store.apps()},
        queued=queued,
    )
    if problems:
        raise InputError("amendment", "additions legal in the committed hour", "; ".join(problems))
    deliver_to = None if executor is None else executor.name
    stored = store.record_amendment(Amendment(hour, 0, now, run_id, tuple(additions)), deliver_to=deliver_to)
    log.info(
        "amendment %s #%d at %s: %s",
        hour.isoformat(),
        stored.seq,
        now.isoformat(),
        ", ".join(f"{a.job}+{len(a.gpus)}" for a in stored.assignments),
    )
    if executor is not None:
        # The outbox, as a commit: a failing executor leaves it pending and the daemon goes on.
        deliver_pending(store, executor, now)
    return stored


def occupied(store: Store, hour: datetime) -> dict[str, tuple[int, ...]]:
    """What holds the GPUs of ``hour`` now: its commit and amendments, less the batch jobs that
    have ended since (their GPUs are free for the rest of the hour); empty if not committed."""
    held = allocated(store, hour) or {}
    return {job: gpus for job, gpus in held.items() if not _ended(store, job)}


def allocated(store: Store, hour: datetime) -> dict[str, tuple[int, ...]] | None:
    """The hour's commit with its amendments' additions, job -> GPUs (None: not committed)."""
    allocation = hour_allocation(store, hour)
    return None if allocation is None else merged_assignments(allocation, ())


def _ended(store: Store, job_id: str) -> bool:
    job = store.job(job_id)  # None: a real-time app
    return job is not None and job.state is JobState.DONE


def propose(
    *,
    gpus: int,
    down: frozenset[int],
    held: Mapping[str, tuple[int, ...]],
    before: Mapping[str, tuple[int, ...]] | None,
    apps: Sequence[App],
    need: Mapping[str, int],
    next_hour: Mapping[str, tuple[int, ...]],
    starting: Sequence[str],
    within: Mapping[str, frozenset[int]] | None = None,
) -> list[Assignment]:
    """The additions a cycle within a committed hour makes (a pure function).

    Real-time first: an app whose ``need`` (GPUs for the traffic seen so far) is above what
    it holds gets idle GPUs, up to its swap cap's room against the hour before. The idle
    GPUs it held the hour before come first, as many as it needs: each narrows the change
    from the hour before, so the room grows by one with each. Within each kind, it takes
    the idle GPUs the next hour's plan gives it first, then those the plan leaves idle,
    then the highest others. Then batch: each job of ``starting`` (the next plan's starts
    at its first hour, best first) whose planned block is idle now starts on it.

    ``within``: on a cluster of pools, the GPUs each app may take (those of the pool it serves
    on); an app not in it may take any.
    """
    free = set(range(gpus)) - down - {gpu for block in held.values() for gpu in block}
    planned_idle = free - {gpu for block in next_hour.values() for gpu in block}
    additions: list[Assignment] = []
    for app in apps:
        mine = set(held.get(app.id, ()))
        want = need.get(app.id, 0) - len(mine)
        if want <= 0:
            continue
        # the idle GPUs the next hour's plan gives it, those the plan leaves idle, the others
        usable = free if within is None or app.id not in within else free & within[app.id]
        planned_mine = usable & set(next_hour.get(app.id, ()))
        tiers = [planned_mine, (usable & planned_idle) - planned_mine, usable - planned_idle - planned_mine]
        if before is None:
            chosen = _first(usable, want, tiers)
        else:
            # A GPU it held the hour before comes back within the swap cap: the change shrinks.
            was = set(before.get(app.id, ()))
            back = _first(usable & (was - mine), want, tiers)
            room = app.swap_cap - len(mine ^ was) + len(back)
            chosen = back + _first(usable - was, max(0, min(want - len(back), room)), tiers)
        if chosen:
            free -= set(chosen)
            additions.append(Assignment(app.id, tuple(sorted(chosen))))
    for job in starting:
        block = next_hour.get(job, ())
        if block and free.issuperset(block):
            free -= set(block)
            additions.append(Assignment(job, tuple(block)))
    return additions


def _first(pool: set[int], count: int, tiers: Sequence[set[int]]) -> list[int]:
    """The first ``count`` GPUs of ``pool`` in the order of ``tiers``, the highest first within each."""
    chosen: list[int] = []
    for tier in tiers:
        chosen += sorted(pool & tier, reverse=True)[: count - len(chosen)]
    return chosen


def amend_cycle(
    store: Store,
    now: datetime,
    config: ServiceConfig,
    executor: Executor | None = None,
    *,
    forecasters: Forecasters | None = None,
    observed: Sequence[ObservedTraffic] = (),
) -> tuple[CycleReport, Amendment | None]:
    """The plan cycle (the hour's traffic so far feeds the nowcast), then :func:`amend_hour`."""

    report = plan_cycle(
        store, now, config, executor, forecasters=forecasters, partial_rates=hourly_rates(observed, now)
    )
    amendment = amend_hour(store, now, report, executor, observed=observed, config=config)
    if amendment is not None:
        apps = {app.id for app in store.apps()}
        report = replace(
            report,
            amendment=amendment.seq,
            jobs_amended=sum(1 for a in amendment.assignments if a.job not in apps),
            realtime_gpus_amended=sum(len(a.gpus) for a in amendment.assignments if a.job in apps),
        )
    cycle_log.info(report.log_line())
    return report, amendment


def answer_freed(
    store: Store,
    now: datetime,
    config: ServiceConfig,
    ended: Sequence[str],
    executor: Executor | None = None,
    *,
    forecasters: Forecasters | None = None,
) -> Amendment | None:
    """Jobs ``ended`` within a committed hour that held GPUs in it: their GPUs are used at once
    (:func:`amend_cycle`: the next hour's starts on them now, and real-time GPUs for an app whose
    observed traffic outruns its own), not at the next cycle. None: nothing freed, or nothing added.

    Run under the plan lock, as every cycle is.
    """
    hour = floor_hour(now)
    if not set(ended) & (allocated(store, hour) or {}).keys():
        return None
    _, amendment = amend_cycle(
        store, now, config, executor, forecasters=forecasters, observed=store.observed_traffic(hour)
    )
    return amendment


def hourly_rates(observed: Sequence[ObservedTraffic], now: datetime) -> dict[str, float]:
    """Each app's requests at the rate seen so far in the hour of ``now``."""
    hour = floor_hour(now)
    return {o.app: o.hourly_rate() for o in observed if o.hour == hour and o.minutes > 0}


#: The hours after the current one whose planned GPUs the amendment provisions ahead for.
AHEAD_HOURS = 4


def ahead_need(store: Store, app: App, hour: datetime, rate: float) -> int:
    """The GPUs ``app`` should hold in ``hour`` (in progress, seen at ``rate`` requests an
    hour so far): those the rate needs, and never fewer than the swap cap lets grow into the
    GPUs the next hours are planned for (their swap-capped curve's first hour less one
    cap), so that a rise the plan sees coming is provisioned from this hour on."""
    demand = app_demand(store, app, hour + STEP, AHEAD_HOURS, partial_rate=rate)
    return max(gpus_for(app, rate), (demand.gpus[0] - app.swap_cap) if demand.gpus else 0)


def amend_hour(
    store: Store,
    now: datetime,
    report: CycleReport,
    executor: Executor | None = None,
    *,
    observed: Sequence[ObservedTraffic] = (),
    config: ServiceConfig,
) -> Amendment | None:
    """Within a committed hour, the amendment that the cycle's plan and the traffic allow.

    Step 0 of the cycle's plan is the next hour (this one is committed); the amendment adds
    to this hour what :func:`propose` finds: GPUs for apps whose ``observed`` traffic
    outruns their committed GPUs, and the plan's next-hour starts whose blocks are idle now.
    On a cluster of pools (``config``'s), an app adds GPUs of the pool it serves on only
    (:func:`serving_pool`), at its requests per GPU-hour there.
    """

    hour = floor_hour(now)
    if report.start != hour + STEP or store.commit(hour) is None or report.run_id is None:
        return None
    run = store.run(report.run_id)
    assert run is not None  # just stored
    cluster = require_cluster(store)
    next_hour: dict[str, list[int]] = {}
    for gpu, row in enumerate(run.grid):
        if row and row[0] is not None:
            next_hour.setdefault(row[0], []).append(gpu)
    held = occupied(store, hour)
    apps = store.apps()
    within: dict[str, frozenset[int]] = {}
    if len(config.pools) > 1:
        for index, app in enumerate(apps):
            pool = serving_pool(config, app.id, held.get(app.id) or next_hour.get(app.id))
            within[app.id] = frozenset() if pool is None else frozenset(range(pool.first_gpu, pool.end_gpu))
            rate = config.app_rates.get(app.id, {}).get(pool.name) if pool is not None else None
            if rate is not None:
                apps[index] = replace(app, requests_per_gpu_hour=rate)
    rates = hourly_rates(observed, now)
    need = {app.id: ahead_need(store, app, hour, rates[app.id]) for app in apps if app.id in rates}
    queued = {job.id: job.priority for job in store.jobs([JobState.QUEUED])}
    starting = sorted((job for job in next_hour if job in queued), key=lambda job: (-queued[job], job))
    additions = propose(
        gpus=cluster.gpus,
        down=down_gpus(cluster, hour),
        held=held,
        before=allocated(store, hour - STEP),
        apps=apps,
        need=need,
        next_hour={job: tuple(gpus) for job, gpus in next_hour.items()},
        starting=starting,
        within=within,
    )
    return amend(store, now, additions, run_id=run.id, executor=executor)


def serving_pool(config: ServiceConfig, app_id: str, gpus: Sequence[int] | None) -> Pool | None:
    """The pool of ``config``'s an app serves on in the hour, holding ``gpus`` (those it holds,
    else those the next hour's plan gives it): theirs; holding none, its one pool (its ``pool``,
    default the first); None for an app of several pools whose plan gives it none there (the
    plan chooses its pool, not the amendment)."""
    if gpus:
        return pool_of(config.pools, min(gpus))
    if app_id in config.app_rates:
        return None
    return named_pool(config.pools, config.app_pools.get(app_id))
