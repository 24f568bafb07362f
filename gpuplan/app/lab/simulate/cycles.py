"""The policies' cycles: what each policy does on the hour (fast, priority-backfill, FIFO, commit-all)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from contract.records import (
    Assignment,
    Commit,
    JobState,
    ObservedTraffic,
    PlanRun,
    RunMode,
)
from contract.scenario_io import parse_scenario
from gpuplan.app.adapters.executors.simulated import SimulatedCluster
from gpuplan.app.core.bridge import STEP, column_commit, floor_hour, run_record, scenario_document
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.core.forecasters import Forecasters
from gpuplan.app.core.team_scenario import with_teams
from gpuplan.app.cycle.amend import amend_hour, hourly_rates
from gpuplan.app.cycle.outbox import deliver_pending
from gpuplan.app.cycle.tick import load_snapshot, plan_cycle
from scheduler.policies import PolicyName, plan

if TYPE_CHECKING:
    from contract.scenario import Grid
    from storage.store import Store

from gpuplan.app.lab.simulate.setup import Setup, SimPolicy

log = logging.getLogger(__name__)

# --- the policies' cycles ----------------------------------------------------------------------


@dataclass
class SimService:
    """One policy's running service: its store, config, executor and forecasters."""

    store: Store
    config: ServiceConfig
    executor: SimulatedCluster
    forecasters: Forecasters
    setup: Setup
    #: Whether a cycle in a committed hour amends it (the fast policy only).
    amend: bool = True
    #: Milliseconds each amendment step took in a committed hour (the plan before it not included).
    amend_ms: list[float] = field(default_factory=list)


class Cycle(Protocol):
    def __call__(self, service: SimService, now: datetime, observed: Sequence[ObservedTraffic]) -> bool:
        """Run the policy's cycle at ``now`` with the traffic seen so far in the hour;
        True when it planned (its latency counts)."""


def _fast_cycle(service: SimService, now: datetime, observed: Sequence[ObservedTraffic]) -> bool:
    """The daemon's cycle (``amend_cycle``), its amendment step timed on its own."""
    store, config, executor = service.store, service.config, service.executor
    rates = hourly_rates(observed, now)
    report = plan_cycle(store, now, config, executor, forecasters=service.forecasters, partial_rates=rates)
    if service.amend and report.start != floor_hour(now):  # within a committed hour
        started = time.perf_counter()
        amend_hour(store, now, report, executor, observed=observed, config=config)
        service.amend_ms.append((time.perf_counter() - started) * 1000)
    return True


@dataclass(frozen=True)
class _BaselineCycle:
    """The daemon's cycle with a contract baseline in place of the fast mode
    (peak-of-forecast reservations, re-planned every cycle)."""

    policy: PolicyName

    def __call__(self, service: SimService, now: datetime, observed: Sequence[ObservedTraffic]) -> bool:
        plan_cycle(
            service.store,
            now,
            service.config,
            service.executor,
            forecasters=service.forecasters,
            policy=self.policy,
            partial_rates=hourly_rates(observed, now),
        )
        return True


class TeamRule(StrEnum):
    """How a baseline cycle treats the config's teams (docs/teams.md, "Simulation")."""

    #: Quotas guaranteed, idle quota lent only to P90 ends before the owner's need (constraint 7).
    PLANNED = "planned"
    #: Hard quotas: a team never holds GPUs of another team's quota (only unowned GPUs are shared).
    QUOTA = "quota"
    #: Lending without a reclaim guarantee: a job takes any idle GPU (the plan knows no teams).
    LEND = "lend"


@dataclass(frozen=True)
class _HourCycle:
    """A contract baseline on the hour's state, committing the hour; ``reserve_peaks``: each app
    reserves last week's peak all day (a FIFO cluster), else its forecast, as the daemon's cycle.
    Within a committed hour it only plans (from the next hour, stored, not committed), so that a
    job submitted since gets the baseline's own plan as its promise."""

    policy: PolicyName
    name: SimPolicy
    teams: TeamRule = TeamRule.PLANNED
    reserve_peaks: bool = True

    def __call__(self, service: SimService, now: datetime, observed: Sequence[ObservedTraffic]) -> bool:
        store, config = service.store, service.config
        hour = floor_hour(now)
        committed = store.commit(hour) is not None
        if now == hour and committed:
            return False
        start = hour + STEP if committed else hour
        started = time.perf_counter()
        snapshot = load_snapshot(store, start, config, service.forecasters)
        name = f"{self.name.value}-{start:%Y%m%dT%H%M}"
        document = scenario_document(
            snapshot,
            config.plan_with,
            name=name,
            pools=config.pools,
            app_pools=config.app_pools,
            app_rates=config.app_rates,
        )
        if self.reserve_peaks:
            reserve_peaks(document, service.setup, start)
        if self.teams is not TeamRule.LEND:
            document = with_teams(document, snapshot, config)
        if self.teams is TeamRule.QUOTA:
            document = hard_quotas(document)
        result = plan(parse_scenario(document, source=name), self.policy)
        commit = column_commit(result.grid, start)
        _record(
            service,
            commit,
            now=now,
            scenario=document,
            grid=result.grid,
            metrics=result.metrics.as_dict(),
            policy=self.name.value,
            started=started,
            commits=not committed,
        )
        return not committed  # the baseline decides when the hour starts: only that is its cycle


def reserve_peaks(document: dict[str, Any], setup: Setup, start: datetime) -> None:
    """Each app of ``document`` reserves last week's peak need all day (a FIFO cluster); an app
    of several pools its peak on each of them, at its rate there, no more than the pool."""
    horizon = int(document["horizon"])
    peaks = setup.peak_last_week(start)
    for entry in document["jobs"]:
        if entry["kind"] != "realtime":
            continue
        if "demand_by_pool" in entry:
            entry["demand_by_pool"] = {
                pool.name: [min(pool.gpus, setup.peak_last_week(start, pool)[entry["id"]])] * horizon
                for pool in setup.pools
                if pool.name in entry["demand_by_pool"]
            }
        else:
            entry["demand"] = [peaks[entry["id"]]] * horizon


def hard_quotas(document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` with each team's forecast its whole quota at every step: no owner ever lends
    (constraint 7 then lets a team beyond its quota hold only the GPUs no quota owns)."""
    if "teams" not in document:
        return dict(document)
    horizon = int(document.get("horizon", 24))
    teams = [
        {**team, "forecast": {model: [gpus] * horizon for model, gpus in team.get("quota", {}).items()}}
        for team in document["teams"]
    ]
    return {**document, "teams": teams}


@dataclass
class _CommitAll:
    """The ablation: one 24-hour plan, every hour of it committed in turn, re-planned when spent."""

    run: PlanRun | None = None

    def __call__(self, service: SimService, now: datetime, observed: Sequence[ObservedTraffic]) -> bool:
        hour = floor_hour(now)
        if now != hour:
            return False
        horizon = service.config.cluster.horizon_steps
        if self.run is None or hour >= self.run.start + horizon * STEP:
            report = plan_cycle(
                service.store, now, service.config, service.executor, forecasters=service.forecasters
            )
            self.run = service.store.run(report.run_id)
            return True
        step = (hour - self.run.start) // STEP
        store = service.store
        running = {job.id: _block(job.first_gpu, job.gpus) for job in store.jobs([JobState.RUNNING])}
        queued = {job.id for job in store.jobs([JobState.QUEUED])}
        commit = follow_plan(
            self.run.grid,
            step,
            hour,
            previous=store.commit(hour - STEP),
            running=running,
            queued=queued,
            swap_caps={app.id: app.swap_cap for app in service.setup.apps},
        )
        grid = [row[step:] for row in self.run.grid]
        started = time.perf_counter()
        _record(
            service,
            commit,
            now=now,
            scenario=self.run.scenario,
            grid=grid,
            metrics=self.run.metrics,
            policy=SimPolicy.COMMIT_ALL.value,
            started=started,
        )
        return False  # following a plan is not planning: no latency to report


def _block(first_gpu: int | None, gpus: int | None) -> tuple[int, ...]:
    assert first_gpu is not None and gpus is not None  # a running job has its block
    return tuple(range(first_gpu, first_gpu + gpus))


def follow_plan(
    grid: Sequence[Sequence[str | None]],
    step: int,
    hour: datetime,
    *,
    previous: Commit | None,
    running: Mapping[str, tuple[int, ...]],
    queued: set[str],
    swap_caps: Mapping[str, int],
) -> Commit:
    """Column ``step`` of a plan committed whole, as reality allows it at ``hour``.

    Running jobs keep their blocks (an overrun holds them past the plan); a queued job
    starts only at its planned step and only on a free block; cells of jobs that ended
    early stay idle. Each app moves from the GPUs it held last hour toward the planned
    ones minus those still busy, within its swap cap. The planned sets obey the cap, and
    an app here only ever holds a subset of its planned set, so what it must give up is
    among what the plan gave up: the commit is legal by construction.
    """
    planned: dict[str, list[int]] = {}
    for gpu, row in enumerate(grid):
        cell = row[step]
        if cell is not None:
            planned.setdefault(cell, []).append(gpu)
    held: dict[str, tuple[int, ...]] = dict(running)
    busy = {gpu for gpus in running.values() for gpu in gpus}
    for job, gpus in planned.items():
        starts_now = step == 0 or grid[gpus[0]][step - 1] != job
        if job in queued and starts_now and busy.isdisjoint(gpus):
            held[job] = tuple(gpus)
            busy.update(gpus)
    before = {a.job: set(a.gpus) for a in previous.assignments} if previous is not None else {}
    for app, cap in swap_caps.items():
        target = set(planned.get(app, ())) - busy
        last = before.get(app, set())
        keep = last & target
        budget = cap - len(last - target)
        # The plan stacks services from the top of the cluster: add the highest ids first.
        added = sorted(target - last, reverse=True)[: max(0, budget)]
        holding = keep | set(added)
        if holding:
            held[app] = tuple(sorted(holding))
            busy |= holding
    return Commit(hour, None, tuple(Assignment(job, gpus) for job, gpus in sorted(held.items())))


def _record(
    service: SimService,
    commit: Commit,
    *,
    now: datetime,
    scenario: dict[str, Any],
    grid: Grid | Sequence[Sequence[str | None]],
    metrics: Mapping[str, float],
    policy: str,
    started: float,
    commits: bool = True,
) -> None:
    """Store a baseline's run with its commit (unless ``commits`` is False) and hand the
    commit to the executor, as the cycle does."""
    run = run_record(
        scenario,
        start=commit.hour,
        created_at=now,
        mode=RunMode.PLAN,
        policy=policy,
        grid=grid,
        metrics=metrics,
        latency_ms=(time.perf_counter() - started) * 1000,
    )
    service.store.record_run(run, commit if commits else None, deliver_to=service.executor.name)
    deliver_pending(service.store, service.executor, now)


CYCLES: dict[SimPolicy, Callable[[], Cycle]] = {
    SimPolicy.FAST: lambda: _fast_cycle,
    SimPolicy.PRIORITY_BACKFILL: lambda: _BaselineCycle(PolicyName.PRIORITY_BACKFILL),
    SimPolicy.FASTEST_FREE: lambda: _BaselineCycle(PolicyName.FASTEST_FREE),
    SimPolicy.FIFO: lambda: _HourCycle(PolicyName.FIFO, SimPolicy.FIFO),
    SimPolicy.FIFO_QUOTA: lambda: _HourCycle(PolicyName.FIFO, SimPolicy.FIFO_QUOTA, TeamRule.QUOTA),
    SimPolicy.FIFO_LEND: lambda: _HourCycle(PolicyName.FIFO, SimPolicy.FIFO_LEND, TeamRule.LEND),
    SimPolicy.PRIORITY_BACKFILL_QUOTA: lambda: _HourCycle(
        PolicyName.PRIORITY_BACKFILL, SimPolicy.PRIORITY_BACKFILL_QUOTA, TeamRule.QUOTA, reserve_peaks=False
    ),
    SimPolicy.PRIORITY_BACKFILL_LEND: lambda: _HourCycle(
        PolicyName.PRIORITY_BACKFILL, SimPolicy.PRIORITY_BACKFILL_LEND, TeamRule.LEND, reserve_peaks=False
    ),
    SimPolicy.COMMIT_ALL: _CommitAll,
}
