"""The demo cluster that moves on: what ``gpuplan daemon`` runs on without ``--config``.

The live demo daemon drives the same in-memory cluster as the simulation
(:class:`gpuplan.app.executors.simulated.SimulatedCluster`): each committed job starts and
is reported done when its actual duration has passed (the demo queue's jobs were drawn
from the bundled history, whose durations they keep; a job submitted by hand runs for its
P50 estimate). Traffic for the demo apps arrives hour by hour from their bundled series,
continued by whole weeks past its end, so the profiles recalibrate on it. With
``--demo-speed N`` the daemon's clock runs N simulated seconds a wall second.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from contract.errors import InputError
from contract.records import JobState, TrafficHour
from gpuplan.app.bridge import STEP, floor_hour
from gpuplan.app.config import ServiceConfig
from gpuplan.app.executors import Executor
from gpuplan.app.executors.simulated import ActualRun, SimulatedCluster
from gpuplan.app.jobs import finish
from storage.store import Store

if TYPE_CHECKING:
    from collections.abc import Callable

    from features.traffic import HourlyTraffic

log = logging.getLogger(__name__)

#: How many missed traffic hours one step feeds at most (a demo stopped for weeks does not
#: replay them all).
MAX_FED_HOURS = 8 * 24
HOURS_PER_WEEK = 7 * 24
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

    def advance(self, store: Store, now: datetime) -> None:
        """Report the jobs that ended by ``now`` done and store the traffic hours completed by then."""
        for end, job_id, outcome in self.cluster.ended(now):
            try:
                finish(store, job_id, end, outcome)
                log.info("demo cluster: job %s ended at %s (%s)", job_id, end.isoformat(), outcome.value)
            except InputError as error:  # e.g. reported done by hand before its actual end
                log.info("demo cluster: job %s not reported done: %s", job_id, error)
        for app, series in self.traffic.items():
            feed_traffic(store, app, series, now)


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
    from features.traffic import load_traffic

    for source in config.traffic:
        feed_traffic(store, source.app, load_traffic(source.path), now)


def demo_world(store: Store, config: ServiceConfig, inner: Executor | None = None) -> DemoWorld:
    """The demo's world on ``store``: its cluster (delivering to ``inner`` too), resumed with
    the jobs the store has running, and the apps' bundled traffic."""
    from features.traffic import load_traffic
    from gpuplan.app.seed import demo_durations

    durations = demo_durations()

    def actual(job_id: str) -> ActualRun | None:
        job = store.job(job_id)
        if job is None or job.estimate is None:
            return None  # a real-time app
        hours = durations.get(job_id, job.estimate.hours_p50)
        return ActualRun(hours, not_before=job.submitted_at)

    cluster = SimulatedCluster(actual, inner)
    for job in store.jobs([JobState.RUNNING]):
        if job.started_at is not None:
            cluster.start(job.id, job.started_at, job.gpus or 1)
    traffic = {source.app: load_traffic(source.path) for source in config.traffic}
    return DemoWorld(cluster, traffic)


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
