"""The demo cluster that moves on: what ``gpuplan daemon`` runs on without ``--config``.

The live demo daemon drives the same in-memory cluster as the simulation
(:class:`gpuplan.app.adapters.executors.simulated.SimulatedCluster`): each committed job starts and
is reported done when its actual duration has passed (the demo queue's jobs were drawn
from the bundled history, whose durations they keep; a job submitted by hand runs for its
P50 estimate). New jobs keep arriving: each simulated week's arrivals are drawn from the
bundled history as the simulation draws them (:func:`gpuplan.app.lab.workload.draw_workload`,
the same arrival pattern and load), and submitted as their time comes. Traffic for the
demo apps arrives hour by hour from their bundled series, continued by whole weeks past its
end, so the profiles recalibrate on it. With ``--demo-speed N`` the daemon's clock runs N
simulated seconds a wall second.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from contract.errors import InputError, NotFittedError
from contract.records import JobState, TrafficHour
from features.traffic import load_traffic
from gpuplan.app.adapters.executors import Executor
from gpuplan.app.adapters.executors.simulated import ActualRun, SimulatedCluster
from gpuplan.app.core.bridge import STEP, floor_hour, gpus_for
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.cycle.finish import finish
from gpuplan.app.jobs.submit import submit
from gpuplan.app.lab.seed import demo_durations
from gpuplan.app.lab.workload import draw_workload, held_out_split, job_pool
from storage.store import Store
from training_data.arrivals import load_pattern
from training_data.history import bundled_history_path, load_history

if TYPE_CHECKING:
    from collections.abc import Callable

    from features.traffic import HourlyTraffic
    from gpuplan.app.lab.workload import JobPool, SimJob

log = logging.getLogger(__name__)

#: How many missed traffic hours one step feeds at most (a demo stopped for weeks does not
#: replay them all).
MAX_FED_HOURS = 8 * 24
HOURS_PER_WEEK = 7 * 24
WEEK = timedelta(days=7)
#: The seed of the demo's arrivals; week ``k`` after the demo began is drawn with this + k.
ARRIVALS_SEED = 11
#: The range of ``--demo-speed``: real time up to a simulated day per wall second.
DEMO_SPEED_RANGE = (1.0, 86_400.0)


def checked_demo_speed(value: float, name: str = "--demo-speed") -> float:
    low, high = DEMO_SPEED_RANGE
    if not low <= value <= high:
        raise InputError(name, f"simulated seconds per wall second in [{low:g}, {high:g}]", value)
    return value


@dataclass
class DemoWorld:
    """The demo's cluster and traffic: :meth:`advance` brings them to ``now``."""

    cluster: SimulatedCluster
    traffic: dict[str, HourlyTraffic]
    #: Where new jobs come from (None: no arrivals).
    arrivals: DemoArrivals | None = None

    def advance(self, store: Store, now: datetime) -> None:
        """Report the jobs that ended by ``now`` done, submit the jobs that arrived by then and
        store the traffic hours completed by then."""
        if self.arrivals is not None:
            for at, job in self.arrivals.due(store, now):
                self.arrivals.submit(store, job, at)
        for end, job_id, outcome in self.cluster.ended(now):
            try:
                finish(store, job_id, end, outcome)
                log.info("demo cluster: job %s ended at %s (%s)", job_id, end.isoformat(), outcome.value)
            except InputError as error:  # e.g. reported done by hand before its actual end
                log.info("demo cluster: job %s not reported done: %s", job_id, error)
        for app, series in self.traffic.items():
            feed_traffic(store, app, series, now)


@dataclass
class DemoArrivals:
    """The demo's arriving jobs: week ``k`` from the Monday before ``began`` is drawn from
    ``pool`` with the simulation's arrival pattern and load (seed ``ARRIVALS_SEED + k``);
    those due after ``began`` are submitted once each (by id: a restarted demo resumes)."""

    config: ServiceConfig
    pool: JobPool
    began: datetime
    free_gpus: float
    weeks: dict[int, list[tuple[datetime, SimJob]]] = field(default_factory=dict)
    submitted_until: datetime | None = None

    def week(self, k: int) -> list[tuple[datetime, SimJob]]:
        from dataclasses import replace

        if k not in self.weeks:
            monday = floor_hour(self.began) - timedelta(days=self.began.weekday(), hours=self.began.hour)
            drawn = draw_workload(
                self.pool,
                load_pattern(),
                hours=HOURS_PER_WEEK,
                cluster_gpus=self.config.cluster.gpus,
                free_gpus=self.free_gpus,
                seed=ARRIVALS_SEED + k,
            )
            self.weeks[k] = [
                (
                    monday + k * WEEK + timedelta(hours=job.submit_hour),
                    replace(job, id=f"arrival-{k}-{job.id}"),
                )
                for job in drawn
                if job.submit_hour >= 0  # the draw's backlog: the demo's seeded queue is its own
            ]
        return self.weeks[k]

    def due(self, store: Store, now: datetime) -> list[tuple[datetime, SimJob]]:
        """The jobs arrived after ``began`` and by ``now`` that the store does not hold yet."""
        # A demo restarted after a long stop does not submit everything it missed.
        since = max(self.began, self.submitted_until or now - MAX_FED_HOURS * STEP)
        if now <= since:
            return []
        first = int((floor_hour(since) - self.began) / WEEK) - 1
        last = int((now - self.began) / WEEK) + 1
        due = [
            (at, job)
            for k in range(max(0, first), last + 1)
            for at, job in self.week(k)
            if since < at <= now and store.job(job.id) is None
        ]
        self.submitted_until = now
        return sorted(due, key=lambda pair: pair[0])

    def actual_hours(self, job_id: str) -> float | None:
        """The hours an arrived job really runs (None: not one of the arrivals drawn)."""
        prefix, _, rest = job_id.partition("-")
        week, _, _ = rest.partition("-")
        if prefix != "arrival" or not week.isdigit():
            return None
        return next((job.actual_hours for _, job in self.week(int(week)) if job.id == job_id), None)

    def submit(self, store: Store, job: SimJob, at: datetime) -> None:

        try:
            submit(store, job.spec(), at, self.config, source=f"demo arrival {job.id}", replan=False)
            log.info("demo cluster: job %s arrived at %s", job.id, at.isoformat())
        except InputError as error:
            log.warning("demo cluster: arriving job %s not submitted: %s", job.id, error)


def demo_arrivals(store: Store, config: ServiceConfig) -> DemoArrivals | None:
    """The demo's arrivals from its first submission on (None: an empty store, or no job
    estimators to draw the arrivals' sizes with; logged)."""

    jobs = store.jobs()
    if not jobs:
        return None
    began = min(job.submitted_at for job in jobs)
    path = bundled_history_path()
    try:
        _, later = held_out_split(load_history(path))
        pool = job_pool(later, config.models_dir, source=str(path))
    except (InputError, NotFittedError) as error:
        log.warning("demo cluster: no new jobs will arrive: %s", error)
        return None
    week = [row for app in store.apps() for row in store.traffic(app.id, since=began - WEEK, until=began)]
    apps = {app.id: app for app in store.apps()}
    realtime = sum(gpus_for(apps[row.app], row.requests) for row in week) / max(
        1, len(week) // max(1, len(apps))
    )
    return DemoArrivals(config, pool, began, free_gpus=config.cluster.gpus - realtime)


def feed_traffic(store: Store, app: str, series: HourlyTraffic, now: datetime) -> int:
    """Store ``app``'s traffic for each complete hour before ``now`` after its last stored one,
    taken from ``series`` continued by whole weeks (the weekly pattern keeps its weekdays)."""
    until = floor_hour(now)
    recent = store.traffic(app, since=until - MAX_FED_HOURS * STEP, until=until)
    if not recent:
        return 0
    first = series.hours[0].astype("datetime64[s]").item().replace(tzinfo=UTC)
    span = max(1, len(series) // HOURS_PER_WEEK) * HOURS_PER_WEEK  # whole weeks of the series
    rows = []
    hour = recent[-1].hour + STEP
    while hour < until:
        index = int((hour - first) / STEP) % span
        rows.append(TrafficHour(app, hour, float(series.requests[index])))
        hour += STEP
    if rows:
        store.add_traffic(rows)
    return len(rows)


def feed_demo_traffic(store: Store, config: ServiceConfig, now: datetime) -> None:
    """:func:`feed_traffic` for each of the demo's apps from its bundled series."""

    for source in config.traffic:
        feed_traffic(store, source.app, load_traffic(source.path), now)


def demo_world(store: Store, config: ServiceConfig, inner: Executor | None = None) -> DemoWorld:
    """The demo's world on ``store``: its cluster (delivering to ``inner`` too), resumed with
    the jobs the store has running, and the apps' bundled traffic."""

    durations = demo_durations()

    arrivals = demo_arrivals(store, config)

    def actual(job_id: str) -> ActualRun | None:
        job = store.job(job_id)
        if job is None or job.estimate is None:
            return None  # a real-time app
        arrived = None if arrivals is None else arrivals.actual_hours(job_id)
        hours = arrived if arrived is not None else durations.get(job_id, job.estimate.hours_p50)
        return ActualRun(hours, not_before=job.submitted_at)

    cluster = SimulatedCluster(actual, inner)
    for job in store.jobs([JobState.RUNNING]):
        if job.started_at is not None:
            cluster.start(job.id, job.started_at, job.gpus or 1)
    traffic = {source.app: load_traffic(source.path) for source in config.traffic}
    return DemoWorld(cluster, traffic, arrivals)


def demo_clock(store: Store, speed: float) -> Callable[[], datetime]:
    """The demo's clock: from the later of now and the hour after the last commit (a faster
    demo run before may have committed ahead of the wall clock), ``speed`` times as fast."""
    start = datetime.now(UTC)
    last = store.last_commit()
    if last is not None and last.hour + STEP > start:
        start = last.hour + STEP
    began = time.monotonic()

    def clock() -> datetime:
        return start + timedelta(seconds=(time.monotonic() - began) * speed)

    return clock
