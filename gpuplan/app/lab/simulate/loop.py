"""The loop: one policy's simulated week on a clock that moves a cycle at a time."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

from contract.errors import InputError
from contract.records import (
    Amendment,
    ApiToken,
    Commit,
    ObservedTraffic,
    PlanRun,
    Scope,
    TrafficHour,
)
from gpuplan.app.adapters.executors import InMemoryExecutor
from gpuplan.app.adapters.executors.simulated import ActualRun, SimulatedCluster
from gpuplan.app.core.bridge import STEP, floor_hour
from gpuplan.app.core.config import PlanWith, PromiseTerms, ServiceConfig
from gpuplan.app.cycle.finish import finish
from gpuplan.app.cycle.tick import recalibrate, review
from gpuplan.app.jobs.submit import planned_starts, promise, submit
from storage.factory import open_store

if TYPE_CHECKING:
    from collections.abc import Sequence

    from storage.store import Store

from gpuplan.app.lab.simulate.cycles import CYCLES, Cycle, SimService
from gpuplan.app.lab.simulate.setup import (
    STORE_URL,
    PrecomputedForecasters,
    Setup,
    SimPolicy,
    seed_store,
)

#: The contract's baselines a simulation runs through the daemon's cycle: no aging, no promises
#: of their own beyond their plan.
BASELINES = frozenset({SimPolicy.PRIORITY_BACKFILL, SimPolicy.FASTEST_FREE})

log = logging.getLogger(__name__)

# --- the loop ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimOptions:
    plan_with: PlanWith = PlanWith.P90
    #: The fast mode's budget per simulated cycle: its own searches, below the CP-SAT window
    #: search's floor (``scheduler.lns.MIN_BUDGET_MS``), which would spend a second a cycle
    #: (6 minutes a simulated week, per policy). The daemon's cycle uses 1,000 ms.
    plan_budget_ms: float = 150.0
    cycle_minutes: int = 30
    review_every_hours: int | None = None
    review_time_limit_s: float = 10.0
    #: A cycle within a committed hour amends it (the fast policy; ``--no-amend`` turns it off).
    amend: bool = True
    #: How the plans weigh promised starts (``--promise-penalty``; penalty 0: not at all).
    promises: PromiseTerms = field(default_factory=PromiseTerms)
    #: Hours after which a queued job's priority has doubled (``--aging-hours``; None: off).
    aging_hours: float | None = None
    #: Plan first a job whose FIFO start has come (``--fifo-deadline``).
    fifo_deadline: bool = False

    def __post_init__(self) -> None:
        # Cycles must land on every hour, where commits are made.
        if not 1 <= self.cycle_minutes <= 60 or 60 % self.cycle_minutes:
            raise InputError("cycle_minutes", "a divisor of 60 (1, 2, 3, 5, ..., 30, 60)", self.cycle_minutes)
        if self.review_every_hours is not None and self.review_every_hours < 1:
            raise InputError("review_every_hours", "a whole number of hours >= 1", self.review_every_hours)


@dataclass(frozen=True)
class SimHooks:
    """Ways in for a benchmark that watches the simulated service (none by default).

    ``submit`` submits an arriving job in place of ``jobs.submit`` without a replan (it takes
    the same arguments and may plan it, as the served API does); ``planned`` sees each run a
    cycle stored, with the store right after it.
    """

    submit: Callable[..., object] | None = None
    planned: Callable[[Store, PlanRun], None] | None = None


@dataclass
class PolicyRun:
    """What one policy did: every committed hour and amendment, when each job was promised
    to start and started, how long cycles took."""

    policy: SimPolicy
    commits: list[Commit]
    amendments: list[Amendment] = field(default_factory=list)
    promised: dict[str, datetime] = field(default_factory=dict)
    #: The plan's start at submit, each promise was made from.
    planned: dict[str, datetime] = field(default_factory=dict)
    #: Milliseconds each cycle's promises took to make (outside ``cycle_ms``).
    promise_ms: list[float] = field(default_factory=list)
    started: dict[str, datetime] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)
    #: The first GPU of each started job's block (its pool's, on a cluster of several).
    first_gpus: dict[str, int] = field(default_factory=dict)
    cycle_ms: list[float] = field(default_factory=list)
    amend_ms: list[float] = field(default_factory=list)  # the amendment steps within cycle_ms

    def committed_hours(self, setup: Setup) -> dict[str, int]:
        """Per job, how many simulated hours it was committed (an amended hour counts)."""
        held = {(c.hour, a.job) for c in self.commits for a in c.assignments}
        held |= {(m.hour, a.job) for m in self.amendments for a in m.assignments}
        counts: dict[str, int] = {}
        for hour, job in held:
            if setup.start <= hour < setup.end:
                counts[job] = counts.get(job, 0) + 1
        return counts


def run_policy(
    setup: Setup,
    policy: SimPolicy,
    options: SimOptions,
    *,
    progress: Callable[[int], object] = lambda hours: None,
    hooks: SimHooks | None = None,
) -> PolicyRun:
    """Simulate ``setup`` under ``policy``; ``progress(1)`` after each simulated hour."""

    store = open_store(STORE_URL)
    try:
        seed_store(store, setup)
        config = ServiceConfig(
            cluster=setup.cluster,
            pools=setup.pools,
            app_pools=setup.app_pools,
            app_rates=setup.app_rates,
            apps=setup.apps,
            teams=setup.teams,
            half_life_days=setup.half_life_days,
            lending_horizon_hours=setup.lending_horizon_hours,
            cycle_minutes=options.cycle_minutes,
            review_every_hours=options.review_every_hours,
            review_time_limit_s=options.review_time_limit_s,
            plan_budget_ms=options.plan_budget_ms,
            plan_wall_clock=False,  # the same plans however busy the machine: results repeat per seed
            plan_with=options.plan_with,
            # FIFO's and priority-backfill's promise is their own plan at submit.
            promises=options.promises
            if policy is SimPolicy.FAST
            else replace(options.promises, lookback_hours=0),
            # The baselines stay the contract's (FIFO reads no priority).
            aging_hours=None if policy in BASELINES else options.aging_hours,
            fifo_deadline=options.fifo_deadline and policy not in BASELINES,
            models_dir=setup.models_dir,
            executor=InMemoryExecutor.name,
        )
        forecasters = PrecomputedForecasters(setup.models_dir, setup.forecasts)
        by_id = {job.id: job for job in setup.jobs}

        def actual(job_id: str) -> ActualRun | None:
            job = by_id.get(job_id)
            if job is None:
                return None
            hours_at = partial(setup.actual_hours, job) if setup.pooled else None
            return ActualRun(job.actual_hours, job.outcome, hours_at=hours_at)

        amend = options.amend and policy is SimPolicy.FAST
        service = SimService(store, config, SimulatedCluster(actual), forecasters, setup, amend=amend)
        result = _loop(
            service, policy, CYCLES[policy](), options, progress=progress, hooks=hooks or SimHooks()
        )
        result.amend_ms = service.amend_ms
        return result
    finally:
        store.close()


def _loop(
    service: SimService,
    policy: SimPolicy,
    cycle: Cycle,
    options: SimOptions,
    *,
    progress: Callable[[int], object],
    hooks: SimHooks,
) -> PolicyRun:
    setup, store, config = service.setup, service.store, service.config
    cluster = service.executor  # starts each committed job, knows when it really ends
    result = PolicyRun(
        policy,
        cluster.commits,
        cluster.amendments,
        started=cluster.started,
        gpus=cluster.gpus,
        first_gpus=cluster.first_gpus,
    )
    arrivals = deque(sorted(setup.jobs, key=lambda job: job.submit_hour))
    awaiting: list[str] = []  # submitted since the last cycle: promised by its plan
    step = timedelta(minutes=options.cycle_minutes)
    review_every = options.review_every_hours
    for k in range(setup.hours * 60 // options.cycle_minutes):
        now = setup.start + k * step
        # 1. what happened since the last cycle, in time order (an end before a submission)
        while True:
            arrival = setup.start + timedelta(hours=arrivals[0].submit_hour) if arrivals else None
            end = cluster.next_end()
            if end is not None and end <= now and (arrival is None or end <= arrival):
                _, job_id, outcome = cluster.pop_end()
                finish(store, job_id, end, outcome)
            elif arrival is not None and arrival <= now:
                job = arrivals.popleft()
                (hooks.submit or partial(submit, replan=False))(
                    store,
                    job.spec(),
                    arrival,
                    config,
                    source=f"job {job.id}",
                    forecasters=service.forecasters,
                    **({"token": team_token(job.team, setup.start)} if job.team is not None else {}),
                )
                awaiting.append(job.id)
            else:
                break
        # 2. the hour that just ended joins the traffic; the profiles recalibrate
        if now == floor_hour(now):
            index = (now - setup.start) // STEP
            if index > 0:
                store.add_traffic(
                    [
                        TrafficHour(s.app.id, now - STEP, float(s.requests[s.history_hours + index - 1]))
                        for s in setup.series
                    ]
                )
                recalibrate(store, now, config)
            if policy is SimPolicy.FAST and review_every and index % review_every == 0:
                review(store, now, config, forecasters=service.forecasters)
            progress(1)
        # 3. the policy's cycle, having seen the hour so far (at :30, its first half)
        started = time.perf_counter()
        planned = cycle(service, now, observed_so_far(setup, now))
        if planned:
            result.cycle_ms.append((time.perf_counter() - started) * 1000)
        # 4. what the cycle's plan gave the jobs submitted since the last is their promise
        run = store.run()
        if planned and run is not None and hooks.planned is not None:
            hooks.planned(store, run)
        if awaiting and run is not None and run.created_at == now:
            started = time.perf_counter()
            jobs = [job for job in (store.job(job_id) for job_id in awaiting) if job is not None]
            result.promised.update(promise(store, run, jobs, now, config))
            result.promise_ms.append((time.perf_counter() - started) * 1000)
            result.planned.update(planned_starts(run, awaiting))
        awaiting = []
    return result


def team_token(team: str, created_at: datetime) -> ApiToken:
    """The token a team's jobs are submitted with (the job records its team from it)."""
    return ApiToken(
        id=f"sim-{team}",
        secret_sha256="",
        team=team,
        scopes=frozenset({Scope.SUBMIT}),
        max_priority=None,
        created_at=created_at,
    )


def observed_so_far(setup: Setup, now: datetime) -> Sequence[ObservedTraffic]:
    """Each app's traffic so far in the hour of ``now``: its share of the hour's actual
    requests at the hour's rate (none on the hour)."""
    hour = floor_hour(now)
    minutes = (now - hour) / timedelta(minutes=1)
    if minutes <= 0:
        return ()
    index = (hour - setup.start) // STEP
    return [
        ObservedTraffic(s.app.id, hour, float(s.requests[s.history_hours + index]) * minutes / 60.0, minutes)
        for s in setup.series
    ]
