"""Amendments: additions to the hour already committed, made by a later cycle in that hour.

An hour is committed once, at its first cycle. A later cycle in the same hour (the :30
one) may add to it, never move or remove anything:

- **real-time GPUs from GPUs idle in that hour**, when the traffic observed so far in the
  hour runs above what the app's committed GPUs serve; within the app's swap cap, counted
  against the hour before (adding only, so the change from the hour before grows by
  exactly the GPUs added);
- **batch starts on GPUs free for the rest of the hour**: a queued job that the new plan
  starts at the next hour, on a block that is idle now, starts now on that block.

The hour's allocation is then its commit plus every amendment's additions, and the next
plan starts from it (:func:`gpuplan.app.tick.hour_allocation`). :func:`check_amendment` is the legality
rule, a pure function; :func:`amend` checks and stores the amendment and delivers it through
the outbox (:mod:`gpuplan.app.outbox`), as a commit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from contract.errors import InputError
from contract.records import Amendment, App, Assignment, JobState
from gpuplan.app.bridge import STEP, floor_hour
from gpuplan.app.outbox import deliver_pending

if TYPE_CHECKING:
    from gpuplan.app.config import ServiceConfig
    from gpuplan.app.executors import Executor
    from gpuplan.app.forecasters import Forecasters
    from gpuplan.app.tick import CycleReport
    from storage.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObservedTraffic:
    """Requests an app served in the first ``minutes`` of ``hour`` (a partial hour)."""

    app: str
    hour: datetime
    requests: float
    minutes: float

    def hourly_rate(self) -> float:
        """The hour's requests at the rate seen so far."""
        return self.requests * 60.0 / self.minutes


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

    ``held`` is the hour's allocation (commit and earlier amendments), ``before`` the hour
    before's (None: not committed, so no swap cap binds, as at a plan's step 0 without a
    running set), ``apps`` the real-time apps by id, ``queued`` each queued batch job's GPUs.
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
    from gpuplan.app.bridge import hour_allocation, merged_assignments
    from gpuplan.app.tick import down_gpus, require_cluster

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
    held = merged_assignments(commit, store.amendments(hour, hour + STEP))
    previous = hour_allocation(store, hour - STEP)
    before = None if previous is None else merged_assignments(previous, ())
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
) -> list[Assignment]:
    """The additions a cycle within a committed hour makes (a pure function).

    Real-time first: an app whose ``need`` (GPUs for the traffic seen so far) is above what
    it holds gets idle GPUs, up to its swap cap's room against the hour before. It takes
    the idle GPUs the next hour's plan gives it first, then those the plan leaves idle,
    then the highest others. Then batch: each job of ``starting`` (the next plan's starts
    at its first hour, best first) whose planned block is idle now starts on it.
    """
    free = set(range(gpus)) - down - {gpu for block in held.values() for gpu in block}
    planned_idle = free - {gpu for block in next_hour.values() for gpu in block}
    additions: list[Assignment] = []
    for app in apps:
        mine = held.get(app.id, ())
        room = len(free) if before is None else app.swap_cap - len(set(mine) ^ set(before.get(app.id, ())))
        count = min(need.get(app.id, 0) - len(mine), room, len(free))
        if count <= 0:
            continue
        planned_mine = free & set(next_hour.get(app.id, ()))
        tiers = [planned_mine, (free & planned_idle) - planned_mine, free - planned_idle - planned_mine]
        chosen: list[int] = []
        for tier in tiers:
            chosen += sorted(tier, reverse=True)[: count - len(chosen)]
        free -= set(chosen)
        additions.append(Assignment(app.id, tuple(sorted(chosen))))
    for job in starting:
        block = next_hour.get(job, ())
        if block and free.issuperset(block):
            free -= set(block)
            additions.append(Assignment(job, tuple(block)))
    return additions


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
    from gpuplan.app.tick import plan_cycle

    report = plan_cycle(
        store, now, config, executor, forecasters=forecasters, partial_rates=hourly_rates(observed, now)
    )
    return report, amend_hour(store, now, report, executor, observed=observed)


def hourly_rates(observed: Sequence[ObservedTraffic], now: datetime) -> dict[str, float]:
    """Each app's requests at the rate seen so far in the hour of ``now``."""
    hour = floor_hour(now)
    return {o.app: o.hourly_rate() for o in observed if o.hour == hour and o.minutes > 0}


def amend_hour(
    store: Store,
    now: datetime,
    report: CycleReport,
    executor: Executor | None = None,
    *,
    observed: Sequence[ObservedTraffic] = (),
) -> Amendment | None:
    """Within a committed hour, the amendment that the cycle's plan and the traffic allow.

    Step 0 of the cycle's plan is the next hour (this one is committed); the amendment adds
    to this hour what :func:`propose` finds: GPUs for apps whose ``observed`` traffic
    outruns their committed GPUs, and the plan's next-hour starts whose blocks are idle now.
    """
    from forecasting.gpu_mapping import gpus_needed
    from gpuplan.app.bridge import hour_allocation, merged_assignments
    from gpuplan.app.tick import down_gpus, require_cluster

    hour = floor_hour(now)
    current = hour_allocation(store, hour)
    if report.start != hour + STEP or current is None or report.run_id is None:
        return None
    run = store.run(report.run_id)
    assert run is not None  # just stored
    cluster = require_cluster(store)
    apps = store.apps()
    previous = hour_allocation(store, hour - STEP)
    rates = hourly_rates(observed, now)
    need = {
        app.id: int(gpus_needed([rates[app.id]], app.requests_per_gpu_hour, app.headroom)[0])
        for app in apps
        if app.id in rates
    }
    next_hour: dict[str, list[int]] = {}
    for gpu, row in enumerate(run.grid):
        if row and row[0] is not None:
            next_hour.setdefault(row[0], []).append(gpu)
    queued = {job.id: job.priority for job in store.jobs([JobState.QUEUED])}
    starting = sorted((job for job in next_hour if job in queued), key=lambda job: (-queued[job], job))
    additions = propose(
        gpus=cluster.gpus,
        down=down_gpus(cluster, hour),
        held=merged_assignments(current, ()),
        before=None if previous is None else merged_assignments(previous, ()),
        apps=apps,
        need=need,
        next_hour={job: tuple(gpus) for job, gpus in next_hour.items()},
        starting=starting,
    )
    return amend(store, now, additions, run_id=run.id, executor=executor)
