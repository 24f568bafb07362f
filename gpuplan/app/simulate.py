"""A simulated week: the daemon's own cycle, on a simulated clock, against the usual baselines.

The simulation is the service with a fake clock, not a second implementation of it.
Each policy gets a throwaway in-memory SQLite store seeded with the cluster, the apps,
their traffic history and demand profiles, and an :class:`InMemoryExecutor`. Then, for
every ``cycle_minutes`` of simulated time (:func:`run_policy`):

1. jobs whose actual duration has elapsed are reported done (``jobs.finish``), and jobs
   whose submit time has come are submitted (``jobs.submit``, with its forecast and
   hot-path replan), in time order;
2. on the hour, the hour that just ended is added to each app's stored traffic and the
   profiles recalibrate (``tick.recalibrate``): a profile never sees the hour it plans;
3. the policy's cycle runs; commits go to the executor; a job that a commit starts is
   due to end ``actual_hours`` later, whatever its forecast said. A job that overruns
   stays pinned; one that ends early frees its GPUs at the next commit.

Policies (:class:`SimPolicy`):

- ``fast``: ``tick.plan_cycle`` as the daemon runs it (with ``tick.review`` every
  ``review_every_hours`` when asked).
- ``priority-backfill``: the same cycle with the contract's priority-backfill policy
  instead of the fast mode (peak-of-forecast reservations, re-planned every cycle).
- ``commit-all``: the ablation. The same cycle plans 24 hours and then every hour of
  that plan is committed as it comes, without re-planning until it runs out. Reality
  still wins: a job that ended early leaves its cells idle, a job that overran keeps its
  GPUs and what the plan put there waits (real-time apps move toward the plan within
  their swap caps; a blocked batch start waits for the next plan).
- ``fifo``: a FIFO cluster. Each app reserves its peak GPU demand of the previous week
  all day (re-read every midnight); batch jobs start in arrival order on the lowest free
  aligned block, and the head of the queue blocks the rest (the contract's ``fifo`` on
  the hour's state, of which only the current hour is committed).

Real-time served is measured against what the actual traffic needed
(``ceil(requests / requests_per_gpu_hour)``), never against the forecast.
"""

from __future__ import annotations

import heapq
import logging
import math
import pickle
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from contract.errors import InputError
from gpuplan.app.bridge import STEP, column_commit, floor_hour, inputs_hash, scenario_document
from gpuplan.app.config import PlanWith, ServiceConfig
from gpuplan.app.executors import InMemoryExecutor
from gpuplan.app.forecasters import Forecasters
from gpuplan.app.jobs import check_spec, estimate_spec, finish, submit
from gpuplan.app.tick import load_snapshot, plan_cycle, recalibrate, review
from gpuplan.app.workload import SimJob
from scheduler.metrics import realtime_moves
from storage.records import (
    App,
    Assignment,
    Cluster,
    Commit,
    JobEstimate,
    JobState,
    PlanRun,
    RunMode,
    TrafficHour,
)

if TYPE_CHECKING:
    from forecasting.job_forecast import JobForecast
    from scheduler.model import Grid, Instance
    from storage.store import Store

log = logging.getLogger(__name__)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Hour 0 of the simulated clock (a Monday). Every series is moved onto this clock.
SIM_START = datetime(2025, 1, 6, tzinfo=UTC)
HOURS_PER_DAY = 24
HOURS_PER_WEEK = 168
#: The profile's weekly shape needs two weeks of history before the first simulated hour.
HISTORY_HOURS = 2 * HOURS_PER_WEEK
#: The apps' summed peak GPU need (in their history), as a share of the cluster.
RT_PEAK_SHARE = 0.4
RT_PRIORITY = 80.0
#: An app's swap cap: a quarter of its peak, so a ramp from trough to peak takes ~4 hours.
SWAP_CAP_SHARE = 0.25
STORE_URL = "sqlite://"  # in memory: the store lives as long as one policy's run


class SimPolicy(StrEnum):
    FAST = "fast"
    FIFO = "fifo"
    PRIORITY_BACKFILL = "priority-backfill"
    COMMIT_ALL = "commit-all"


# --- real-time traffic ----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RealtimeSeries:
    """One app's real hourly traffic on the simulated clock: history, then the simulated hours.

    ``hours[history_hours]`` is :data:`SIM_START`.
    """

    app: App
    source: str
    hours: npt.NDArray[np.datetime64]
    requests: FloatArray
    history_hours: int

    @cached_property
    def demand_gpus(self) -> IntArray:
        """GPUs the actual traffic needed, every hour of the series (no headroom)."""
        from forecasting.gpu_mapping import gpus_needed

        return gpus_needed(self.requests, self.app.requests_per_gpu_hour)

    def simulated_demand(self, hours: int) -> IntArray:
        return self.demand_gpus[self.history_hours : self.history_hours + hours]


def load_realtime(paths: Sequence[Path], *, days: int, gpus: int) -> list[RealtimeSeries]:
    """The apps' series (default: the bundled ones long enough), moved onto the simulated clock.

    The last ``days`` days of each series are simulated; the hours before are its history.
    An app's capacity is set so that its history's peak needs an equal share of
    :data:`RT_PEAK_SHARE` of the cluster.
    """
    from features.traffic import load_traffic
    from forecasting.realtime_training import bundled_traffic_paths

    simulated = days * HOURS_PER_DAY
    needed = simulated + HISTORY_HOURS
    chosen = list(paths) or bundled_traffic_paths()
    loaded = []
    for path in chosen:
        traffic = load_traffic(path)
        if len(traffic) < needed:
            if paths:
                raise InputError(
                    "--traffic",
                    f"a series of at least {needed} hours ({days} simulated days plus two weeks "
                    "of history for the demand profile)",
                    f"{len(traffic)} hours",
                    source=str(path),
                    hint="Simulate fewer --days or give a longer series.",
                )
            log.info(
                "bundled series %s has %d hours, fewer than %d: not used", path.name, len(traffic), needed
            )
            continue
        loaded.append((path, traffic))
    if not loaded:
        raise InputError(
            "--days",
            "few enough days that a bundled traffic series also holds two weeks of history",
            days,
            hint="Give --traffic files long enough, or fewer --days.",
        )
    names = [path.stem for path, _ in loaded]
    if len(set(names)) != len(names):
        raise InputError("--traffic", "files with distinct names (one app each)", names)
    peak_gpus = max(1, round(gpus * RT_PEAK_SHARE / len(loaded)))
    start = np.datetime64(SIM_START.replace(tzinfo=None), "h")
    series = []
    for path, traffic in loaded:
        first_simulated = len(traffic) - simulated
        history_peak = float(traffic.requests[:first_simulated].max())
        app = App(
            id=path.stem,
            priority=RT_PRIORITY,
            swap_cap=max(1, math.ceil(peak_gpus * SWAP_CAP_SHARE)),
            requests_per_gpu_hour=history_peak / peak_gpus if history_peak > 0 else 1.0,
        )
        series.append(
            RealtimeSeries(
                app=app,
                source=str(path),
                hours=traffic.hours + (start - traffic.hours[first_simulated]),
                requests=traffic.requests.astype(float),
                history_hours=first_simulated,
            )
        )
    return series


def fit_profile(series: RealtimeSeries) -> bytes:
    """The app's demand profile fitted on its history only, pickled as the store keeps it."""
    from forecasting.realtime import RealtimeProfile

    history = slice(0, series.history_hours)
    profile = RealtimeProfile().fit(series.hours[history], series.requests[history])
    return pickle.dumps(profile)


def _moment(hour: np.datetime64) -> datetime:
    moment: datetime = hour.astype("datetime64[s]").item()
    return moment.replace(tzinfo=UTC)


# --- the set-up every policy shares ----------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Setup:
    """Everything the policies share: cluster, apps and traffic, jobs and their estimates."""

    cluster: Cluster
    series: tuple[RealtimeSeries, ...]
    profiles: Mapping[str, bytes]
    jobs: tuple[SimJob, ...]
    estimates: Mapping[str, JobEstimate]
    models_dir: Path
    forecasts: Mapping[FeatureKey, JobForecast]
    hours: int
    start: datetime = SIM_START

    @property
    def apps(self) -> tuple[App, ...]:
        return tuple(s.app for s in self.series)

    @property
    def end(self) -> datetime:
        return self.start + self.hours * STEP

    def demand(self) -> dict[str, IntArray]:
        """Per app, the GPUs its actual traffic needed in each simulated hour."""
        return {s.app.id: s.simulated_demand(self.hours) for s in self.series}

    def peak_last_week(self, hour: datetime) -> dict[str, int]:
        """Per app, its peak GPU need in the week before the day ``hour`` falls in."""
        day_start = self.start + (hour - self.start) // timedelta(days=1) * timedelta(days=1)
        index = (day_start - self.start) // STEP
        return {
            s.app.id: int(
                s.demand_gpus[
                    max(0, s.history_hours + index - HOURS_PER_WEEK) : s.history_hours + index
                ].max()
            )
            for s in self.series
        }

    def busiest_day(self) -> int:
        """The simulated day asking the most GPU-hours: real-time demand plus arriving batch work."""
        days = self.hours // HOURS_PER_DAY
        asked = np.zeros(max(days, 1))
        for demand in self.demand().values():
            asked += demand[: days * HOURS_PER_DAY].reshape(days, HOURS_PER_DAY).sum(axis=1)
        for job in self.jobs:
            day = int(job.submit_hour // HOURS_PER_DAY)
            if 0 <= day < days:
                asked[day] += self.estimates[job.id].gpus * job.actual_hours
        return int(np.argmax(asked))


def prepare(
    *,
    days: int,
    gpus: int,
    work_dir: Path,
    traffic_paths: Sequence[Path] = (),
    workload_path: Path | None = None,
    seed: int = 0,
) -> Setup:
    """Load traffic, read or draw the jobs, and fit what forecasts them.

    The job estimators are fitted on the earlier 80% of the bundled history into
    ``work_dir`` (unless every job states its hours), so that the default workload's jobs,
    drawn from the later 20%, are forecast by models that never saw them.
    """
    from gpuplan.app.workload import (
        draw_workload,
        fit_held_out_models,
        held_out_split,
        job_pool,
        read_workload,
    )
    from training_data.arrivals import load_pattern
    from training_data.history import bundled_history_path, load_history

    if days < 1:
        raise InputError("--days", "an integer >= 1", days)
    if gpus < 1:
        raise InputError("--gpus", "an integer >= 1", gpus)
    hours = days * HOURS_PER_DAY
    series = load_realtime(traffic_paths, days=days, gpus=gpus)
    # A workload file is checked before anything slow happens.
    listed = None
    if workload_path is not None:
        listed = [job for job in read_workload(workload_path, cluster_gpus=gpus) if job.submit_hour < hours]
    models_dir = work_dir / "models"
    history_path = bundled_history_path()
    if listed is None or any(job.forecast_hours is None for job in listed):
        earlier, later = held_out_split(load_history(history_path))
        fit_held_out_models(earlier, models_dir)
    if listed is None:
        last_week = sum(
            s.demand_gpus[s.history_hours - HOURS_PER_WEEK : s.history_hours].mean() for s in series
        )
        jobs = draw_workload(
            job_pool(later, models_dir, source=str(history_path)),
            load_pattern(),
            hours=hours,
            cluster_gpus=gpus,
            free_gpus=gpus - float(last_week),
            seed=seed,
        )
    else:
        jobs = listed
    forecasts = forecast_jobs(jobs, models_dir)
    forecasters = PrecomputedForecasters(models_dir, forecasts)
    estimates = {}
    for job in jobs:
        source = f"{workload_path or 'the default workload'}, job {job.id}"
        estimate = estimate_spec(check_spec(job.spec(), source=source), forecasters, source=source)
        if estimate.gpus > gpus:
            raise InputError(
                "gpus", f"at most the cluster's {gpus} GPUs (--gpus)", estimate.gpus, source=source
            )
        estimates[job.id] = estimate
    profiles = {s.app.id: fit_profile(s) for s in series}
    return Setup(
        cluster=Cluster(gpus=gpus),
        series=tuple(series),
        profiles=profiles,
        jobs=tuple(jobs),
        estimates=estimates,
        models_dir=models_dir,
        forecasts=forecasts,
        hours=hours,
    )


FeatureKey = tuple[str, tuple[tuple[str, str], ...]]


def _feature_key(kind: str, features: Mapping[str, object]) -> FeatureKey:
    return kind, tuple(sorted((str(name), repr(value)) for name, value in features.items()))


def forecast_jobs(jobs: Sequence[SimJob], models_dir: Path) -> dict[FeatureKey, JobForecast]:
    """Every job's forecast from its features, one batch per kind (the same models, the same numbers)."""
    import pandas as pd

    from gpuplan.app.models import load_job_estimator

    by_kind: dict[str, list[SimJob]] = {}
    for job in jobs:
        if job.forecast_hours is None and job.features:
            by_kind.setdefault(job.kind.value, []).append(job)
    forecasts: dict[FeatureKey, JobForecast] = {}
    for kind, group in by_kind.items():
        frame = pd.DataFrame([dict(job.features) for job in group])
        for job, forecast in zip(group, load_job_estimator(models_dir, kind).forecast(frame), strict=True):
            forecasts[_feature_key(kind, job.features)] = forecast
    return forecasts


class PrecomputedForecasters(Forecasters):
    """The service's forecasters, answering from forecasts made up front where it has them.

    Asking the estimators one job at a time costs about 0.1 s a job (validation and the
    analytic features of a one-row frame); a week submits hundreds of jobs to each policy.
    """

    def __init__(self, models_dir: Path, forecasts: Mapping[FeatureKey, JobForecast]) -> None:
        super().__init__(models_dir)
        self.forecasts = forecasts

    def forecast(self, kind: str, features: dict[str, object], *, source: str) -> JobForecast:
        found = self.forecasts.get(_feature_key(kind, features))
        return found if found is not None else super().forecast(kind, features, source=source)


def seed_store(store: Store, setup: Setup) -> None:
    """The cluster, the apps, their traffic history and their profiles, as the daemon keeps them."""
    store.save_cluster(setup.cluster)
    for s in setup.series:
        store.save_app(s.app)
        history = range(s.history_hours)
        store.add_traffic([TrafficHour(s.app.id, _moment(s.hours[i]), float(s.requests[i])) for i in history])
        store.save_profile(s.app.id, setup.profiles[s.app.id], through=_moment(s.hours[s.history_hours - 1]))


# --- the policies' cycles ----------------------------------------------------------------------


@dataclass
class _Service:
    """One policy's running service: its store, config, executor and forecasters."""

    store: Store
    config: ServiceConfig
    executor: InMemoryExecutor
    forecasters: Forecasters
    setup: Setup


class _Cycle(Protocol):
    def __call__(self, service: _Service, now: datetime) -> bool:
        """Run the policy's cycle at ``now``; True when it planned (its latency counts)."""


def _fast_cycle(service: _Service, now: datetime) -> bool:
    plan_cycle(service.store, now, service.config, service.executor, forecasters=service.forecasters)
    return True


def _priority_backfill_cycle(service: _Service, now: datetime) -> bool:
    from scheduler.policies import PolicyName

    plan_cycle(
        service.store,
        now,
        service.config,
        service.executor,
        forecasters=service.forecasters,
        policy=PolicyName.PRIORITY_BACKFILL,
    )
    return True


def _fifo_cycle(service: _Service, now: datetime) -> bool:
    """The contract's FIFO on the hour's state, with last week's peaks reserved; commits the hour."""
    from scheduler.policies import PolicyName, plan
    from scheduler.scenario_io import parse_scenario

    store, config = service.store, service.config
    hour = floor_hour(now)
    if now != hour or store.commit(hour) is not None:
        return False  # a FIFO cluster decides when the hour starts, and only then
    started = time.perf_counter()
    snapshot = load_snapshot(store, hour, config, service.forecasters)
    name = f"fifo-{hour:%Y%m%dT%H%M}"
    document = scenario_document(snapshot, config.plan_with, name=name)
    peaks = service.setup.peak_last_week(hour)
    for entry in document["jobs"]:
        if entry["kind"] == "realtime":
            entry["demand"] = [peaks[entry["id"]]] * config.cluster.horizon_steps
    result = plan(parse_scenario(document, source=name), PolicyName.FIFO)
    commit = column_commit(result.grid, hour)
    _record(
        service,
        commit,
        now=now,
        scenario=document,
        grid=result.grid,
        metrics=result.metrics.as_dict(),
        policy=SimPolicy.FIFO.value,
        started=started,
    )
    return True


@dataclass
class _CommitAll:
    """The ablation: one 24-hour plan, every hour of it committed in turn, re-planned when spent."""

    run: PlanRun | None = None

    def __call__(self, service: _Service, now: datetime) -> bool:
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
    service: _Service,
    commit: Commit,
    *,
    now: datetime,
    scenario: dict[str, Any],
    grid: Grid | Sequence[Sequence[str | None]],
    metrics: Mapping[str, float],
    policy: str,
    started: float,
) -> None:
    """Store a baseline's run with its commit and hand the commit to the executor, as the cycle does."""
    run = PlanRun(
        start=commit.hour,
        created_at=now,
        mode=RunMode.PLAN,
        policy=policy,
        inputs_hash=inputs_hash(scenario),
        objective=float(metrics.get("objective", 0.0)),
        bound=None,
        latency_ms=(time.perf_counter() - started) * 1000,
        status="FEASIBLE",
        scenario=scenario,
        grid=[list(row) for row in grid],
        metrics=dict(metrics),
    )
    stored = service.store.record_run(run, commit)
    if stored.committed:
        service.executor.execute(Commit(commit.hour, stored.id, commit.assignments))


CYCLES: dict[SimPolicy, Callable[[], _Cycle]] = {
    SimPolicy.FAST: lambda: _fast_cycle,
    SimPolicy.PRIORITY_BACKFILL: lambda: _priority_backfill_cycle,
    SimPolicy.FIFO: lambda: _fifo_cycle,
    SimPolicy.COMMIT_ALL: _CommitAll,
}


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

    def __post_init__(self) -> None:
        # Cycles must land on every hour, where commits are made.
        if not 1 <= self.cycle_minutes <= 60 or 60 % self.cycle_minutes:
            raise InputError(
                "--cycle-minutes", "a divisor of 60 (1, 2, 3, 5, ..., 30, 60)", self.cycle_minutes
            )
        if self.review_every_hours is not None and self.review_every_hours < 1:
            raise InputError("--review-every", "a whole number of hours >= 1", self.review_every_hours)


@dataclass
class PolicyRun:
    """What one policy did: every committed hour, when each job started, how long cycles took."""

    policy: SimPolicy
    commits: list[Commit]
    started: dict[str, datetime] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)
    cycle_ms: list[float] = field(default_factory=list)

    def committed_hours(self, setup: Setup) -> dict[str, int]:
        """Per job, how many simulated hours it was committed."""
        counts: dict[str, int] = {}
        for commit in self.commits:
            if setup.start <= commit.hour < setup.end:
                for assignment in commit.assignments:
                    counts[assignment.job] = counts.get(assignment.job, 0) + 1
        return counts


def run_policy(
    setup: Setup,
    policy: SimPolicy,
    options: SimOptions,
    *,
    progress: Callable[[int], object] = lambda hours: None,
) -> PolicyRun:
    """Simulate ``setup`` under ``policy``; ``progress(1)`` after each simulated hour."""
    from storage.store import open_store

    store = open_store(STORE_URL)
    try:
        seed_store(store, setup)
        config = ServiceConfig(
            cluster=setup.cluster,
            apps=setup.apps,
            cycle_minutes=options.cycle_minutes,
            review_every_hours=options.review_every_hours,
            review_time_limit_s=options.review_time_limit_s,
            plan_budget_ms=options.plan_budget_ms,
            plan_wall_clock=False,  # the same plans however busy the machine: results repeat per seed
            plan_with=options.plan_with,
            models_dir=setup.models_dir,
            commits_file=None,
        )
        forecasters = PrecomputedForecasters(setup.models_dir, setup.forecasts)
        service = _Service(store, config, InMemoryExecutor(), forecasters, setup)
        return _loop(service, policy, CYCLES[policy](), options, progress)
    finally:
        store.close()


def _loop(
    service: _Service,
    policy: SimPolicy,
    cycle: _Cycle,
    options: SimOptions,
    progress: Callable[[int], object],
) -> PolicyRun:
    setup, store, config = service.setup, service.store, service.config
    result = PolicyRun(policy, service.executor.commits)
    arrivals = deque(sorted(setup.jobs, key=lambda job: job.submit_hour))
    by_id = {job.id: job for job in setup.jobs}
    due: list[tuple[datetime, str]] = []  # (actual end, job) of started jobs
    seen_commits = 0
    step = timedelta(minutes=options.cycle_minutes)
    review_every = options.review_every_hours
    for k in range(setup.hours * 60 // options.cycle_minutes):
        now = setup.start + k * step
        # 1. what happened since the last cycle, in time order (an end before a submission)
        while True:
            arrival = setup.start + timedelta(hours=arrivals[0].submit_hour) if arrivals else None
            end = due[0][0] if due else None
            if end is not None and end <= now and (arrival is None or end <= arrival):
                _, job_id = heapq.heappop(due)
                finish(store, job_id, end, by_id[job_id].outcome)
            elif arrival is not None and arrival <= now:
                job = arrivals.popleft()
                submit(
                    store,
                    job.spec(),
                    arrival,
                    config,
                    source=f"job {job.id}",
                    forecasters=service.forecasters,
                    replan=False,
                )
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
        # 3. the policy's cycle
        started = time.perf_counter()
        planned = cycle(service, now)
        if planned:
            result.cycle_ms.append((time.perf_counter() - started) * 1000)
        for commit in result.commits[seen_commits:]:
            for assignment in commit.assignments:
                starting = by_id.get(assignment.job)
                if starting is not None and starting.id not in result.started:
                    result.started[starting.id] = commit.hour
                    result.gpus[starting.id] = len(assignment.gpus)
                    heapq.heappush(due, (commit.hour + timedelta(hours=starting.actual_hours), starting.id))
        seen_commits = len(result.commits)
    return result


# --- measuring ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyMetrics:
    """One policy's week, measured against what really happened (actual durations and traffic)."""

    policy: str
    utilization: float  # batch GPU-hours really run + real-time GPU-hours served, over GPU-hours
    value: float  # priority x (batch GPU-hours run + real-time GPU-hours served)
    rt_served: float  # share of the real-time GPU-demand served
    rt_unmet_gpu_hours: float
    rt_idle_gpu_hours: float  # GPU-hours real-time apps held beyond what their traffic needed
    rt_moves: int  # GPUs the apps gained or lost from one committed hour to the next
    wait_p50_h: float
    wait_p99_h: float
    wait_by_kind: dict[str, tuple[float, float]]  # kind -> (p50, p99) hours
    completed: int
    started: int
    submitted: int
    cycle_ms_p50: float
    cycle_ms_p99: float

    def as_json(self) -> dict[str, Any]:
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
            "rt_idle_gpu_hours": round(self.rt_idle_gpu_hours, 3),
            "rt_moves": self.rt_moves,
            "started": self.started,
            "submitted": self.submitted,
            "wait_by_kind_h": {
                k: {"p50": round(a, 4), "p99": round(b, 4)} for k, (a, b) in self.wait_by_kind.items()
            },
        }


@dataclass(frozen=True, eq=False)
class Hourly:
    """Per simulated hour: GPUs really busy with batch work, and real-time demand, held, served."""

    batch_gpus: FloatArray
    rt_demand: IntArray
    rt_held: IntArray
    rt_served: IntArray

    def utilization(self, gpus: int) -> FloatArray:
        used: FloatArray = (self.batch_gpus + self.rt_served) / gpus
        return used


def realtime_sets(setup: Setup, run: PolicyRun) -> dict[str, list[int]]:
    """Per app, the bitmask of GPUs it was committed in each simulated hour."""
    held = {s.app.id: [0] * setup.hours for s in setup.series}
    for commit in run.commits:
        h = (commit.hour - setup.start) // STEP
        if 0 <= h < setup.hours:
            for assignment in commit.assignments:
                if assignment.job in held:
                    held[assignment.job][h] = sum(1 << gpu for gpu in set(assignment.gpus))
    return held


def realtime_held(setup: Setup, run: PolicyRun) -> dict[str, IntArray]:
    """Per app, how many GPUs it was committed in each simulated hour."""
    return {
        app: np.array([mask.bit_count() for mask in masks], dtype=np.int64)
        for app, masks in realtime_sets(setup, run).items()
    }


def hourly(setup: Setup, run: PolicyRun) -> Hourly:
    batch = np.zeros(setup.hours)
    for job in setup.jobs:
        start = run.started.get(job.id)
        if start is None:
            continue
        begin = (start - setup.start) / STEP
        end = begin + job.actual_hours
        for h in range(int(begin), min(setup.hours, math.ceil(end))):
            batch[h] += run.gpus[job.id] * (min(end, h + 1) - max(begin, h))
    held = realtime_held(setup, run)
    demand = setup.demand()
    zeros = np.zeros(setup.hours, dtype=np.int64)
    return Hourly(
        batch_gpus=batch,
        rt_demand=sum(demand.values(), zeros),
        rt_held=sum(held.values(), zeros),
        rt_served=sum((np.minimum(held[app], need) for app, need in demand.items()), zeros),
    )


def measure(setup: Setup, run: PolicyRun) -> PolicyMetrics:
    per_hour = hourly(setup, run)
    gpu_hours = setup.cluster.gpus * setup.hours
    held = realtime_held(setup, run)
    demand_of = setup.demand()
    value = sum(
        s.app.priority * float(np.minimum(held[s.app.id], demand_of[s.app.id]).sum()) for s in setup.series
    )
    completed = 0
    waits: dict[str, list[float]] = {}
    for job in setup.jobs:
        start = run.started.get(job.id)
        submitted = setup.start + timedelta(hours=job.submit_hour)
        # A job still waiting at the end has waited at least until the end.
        wait = ((start or setup.end) - submitted) / STEP
        waits.setdefault(job.kind.value, []).append(max(0.0, wait))
        if start is None:
            continue
        ran_hours = min(job.actual_hours, (setup.end - start) / STEP)
        value += job.priority * run.gpus[job.id] * ran_hours
        completed += start + timedelta(hours=job.actual_hours) <= setup.end
    every_wait = [w for kind in waits.values() for w in kind]
    demand = float(per_hour.rt_demand.sum())
    served = float(per_hour.rt_served.sum())
    return PolicyMetrics(
        policy=run.policy.value,
        utilization=float(per_hour.batch_gpus.sum() + served) / gpu_hours,
        value=value,
        rt_served=served / demand if demand else 1.0,
        rt_unmet_gpu_hours=demand - served,
        rt_idle_gpu_hours=float(per_hour.rt_held.sum()) - served,
        rt_moves=sum(realtime_moves(masks) for masks in realtime_sets(setup, run).values()),
        wait_p50_h=_percentile(every_wait, 50),
        wait_p99_h=_percentile(every_wait, 99),
        wait_by_kind={k: (_percentile(v, 50), _percentile(v, 99)) for k, v in sorted(waits.items())},
        completed=completed,
        started=len(run.started),
        submitted=len(setup.jobs),
        cycle_ms_p50=_percentile(run.cycle_ms, 50),
        cycle_ms_p99=_percentile(run.cycle_ms, 99),
    )


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


class IllegalCommitError(RuntimeError):
    """A policy committed an hour that breaks the contract: a bug, never the user's input."""


def week_grid(setup: Setup, run: PolicyRun) -> tuple[Instance, Grid]:
    """The whole simulation as one contract scenario and grid, for ``check_plan``.

    Each batch job's duration is the hours it was committed, its release the first hour
    after its submission; real-time demand is the actual need. A legal grid means no GPU
    was double-booked, every block was aligned and kept, and no swap cap was broken.
    """
    from scheduler.model import BatchJob, Instance, JobKind, RealtimeJob

    grid = committed_grid(setup, run)
    committed_hours = run.committed_hours(setup)
    demand = setup.demand()
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
                release_step=max(0, math.ceil(job.submit_hour - 1e-9)),
                order=n,
            )
            for n, job in enumerate(setup.jobs)
        ),
        realtime_jobs=tuple(
            RealtimeJob(
                id=s.app.id,
                priority=s.app.priority,
                demand=tuple(int(d) for d in demand[s.app.id]),
                swap_cap=s.app.swap_cap,
            )
            for s in setup.series
        ),
    )
    return instance, tuple(tuple(row) for row in grid)


def committed_grid(setup: Setup, run: PolicyRun) -> list[list[str | None]]:
    """GPU x simulated hour -> the job committed there (None: idle)."""
    grid: list[list[str | None]] = [[None] * setup.hours for _ in range(setup.cluster.gpus)]
    for commit in run.commits:
        h = (commit.hour - setup.start) // STEP
        if not 0 <= h < setup.hours:
            continue
        for assignment in commit.assignments:
            for gpu in assignment.gpus:
                if grid[gpu][h] is not None:
                    raise IllegalCommitError(
                        f"{run.policy.value} committed GPU {gpu} twice at hour {h}: "
                        f"to {grid[gpu][h]} and to {assignment.job}"
                    )
                grid[gpu][h] = assignment.job
    return grid


def busiest_day_grid(setup: Setup, run: PolicyRun, day: int) -> Grid:
    """The committed grid of simulated day ``day`` (24 hours)."""
    span = slice(day * HOURS_PER_DAY, (day + 1) * HOURS_PER_DAY)
    return tuple(tuple(row[span]) for row in committed_grid(setup, run))


# --- the whole comparison ----------------------------------------------------------------------


@dataclass(frozen=True)
class SimulationReport:
    setup: Setup
    options: SimOptions
    runs: Mapping[SimPolicy, PolicyRun]
    metrics: Mapping[SimPolicy, PolicyMetrics]

    def as_json(self) -> dict[str, Any]:
        return {"policies": {policy.value: m.as_json() for policy, m in self.metrics.items()}}


def simulate(
    setup: Setup,
    policies: Sequence[SimPolicy],
    options: SimOptions,
    *,
    progress: Callable[[int], object] = lambda hours: None,
) -> SimulationReport:
    """Every policy on the same jobs and traffic; each run's commits are checked against the contract."""
    from scheduler.check import check_plan

    runs: dict[SimPolicy, PolicyRun] = {}
    metrics: dict[SimPolicy, PolicyMetrics] = {}
    for policy in policies:
        log.info("simulating %s over %d hours", policy.value, setup.hours)
        run = run_policy(setup, policy, options, progress=progress)
        instance, grid = week_grid(setup, run)
        violations = check_plan(instance, grid)
        if violations:
            listing = "\n".join(str(v) for v in violations[:10])
            raise IllegalCommitError(f"{policy.value} committed illegal hours:\n{listing}")
        runs[policy] = run
        metrics[policy] = measure(setup, run)
    return SimulationReport(setup=setup, options=options, runs=runs, metrics=metrics)
