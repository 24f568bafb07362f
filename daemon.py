"""The head-node daemon: APScheduler 3 runs the service's use cases on the wall clock.

Each scheduled job is a plain function of (store, clock) from :mod:`gpuplan.app.tick`;
this module only wires them and loops:

- **plan** every ``cycle_minutes`` (first run at once): recalibrate, plan 24 hours, commit
  the current hour once, hand the commit to the executor;
- **recalibrate** hourly: each app's profile takes the last hour's traffic;
- **review** every ``review_every_hours``: a time-limited full-mode plan stored beside;
- **retrain** nightly at ``retrain_at`` (off by default).

With ``--http``, the HTTP face (:mod:`gpuplan.http`) is served from a thread of this process:
its submits take the same plan lock as the cycle, so a submit never plans against a
half-written run.

The schedule lives in APScheduler's SQLAlchemy job store on the service's own database, so
it survives restarts; missed runs are coalesced, and one worker thread runs one job at a
time. A failing job is logged and the daemon goes on. SIGTERM and Ctrl-C let the job in
flight finish, then the daemon exits.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from gpuplan.app.config import ServiceConfig
from gpuplan.app.executors import Executor, JsonLinesExecutor, commit_lines
from gpuplan.app.forecasters import Forecasters
from gpuplan.app.health import Health
from gpuplan.app.tick import CycleReport, plan_cycle, recalibrate, retrain_from_store, review
from storage.records import Commit
from storage.store import Store, StoreError

log = logging.getLogger("gpuplan.daemon")

#: How long a cycle waits for another daemon's cycle on the same database, and how often it looks.
LOCK_WAIT_S = 300.0
LOCK_POLL_S = 0.2

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Service:
    """What every scheduled job needs: the store, the config, the executor, the clock."""

    store: Store
    config: ServiceConfig
    executor: Executor
    clock: Clock = utc_now
    forecasters: Forecasters = field(init=False)
    metrics: Any = None  # a Metrics when --metrics-port is given
    health: Health = field(init=False)
    plan_mutex: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.forecasters = Forecasters(self.config.models_dir)
        self.health = Health(started_at=utc_now())  # wall time, whatever clock the cycles run on


@contextmanager
def holding(store: Store, name: str, timeout_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the named cycle lock, waiting while another daemon's cycle holds it."""
    deadline = time.monotonic() + timeout_s
    while True:
        with store.cycle_lock(name) as held:
            if held:
                yield
                return
        if time.monotonic() > deadline:
            raise StoreError(f"another process held the {name!r} lock on this database for {timeout_s:g} s")
        time.sleep(LOCK_POLL_S)


@contextmanager
def plan_lock(service: Service) -> Iterator[None]:
    """The plan lock: this process's threads (the cycle, the API's submits), then other daemons."""
    with service.plan_mutex, holding(service.store, "plan"):
        yield


def run_once(service: Service, now: datetime | None = None) -> CycleReport:
    """One plan cycle at ``now`` (default: the clock): recalibrate, then plan and commit.

    A second daemon on the same database waits for the first one's cycle, then plans on
    what it committed (the hour is committed once).
    """
    now = now or service.clock()
    with plan_lock(service):
        recalibrate(service.store, now, service.config)
        report = plan_cycle(
            service.store, now, service.config, service.executor, forecasters=service.forecasters
        )
    if service.metrics is not None:
        service.metrics.observe(report, now)
    return report


# -- the scheduled jobs: module-level functions, so APScheduler's job store can name them --------

_SERVICE: Service | None = None


def _job(name: str, body: Callable[[Service], object]) -> None:
    service = _SERVICE
    if service is None:  # a job store restored before the service was set up
        log.error("job %s ran with no service configured", name)
        return
    try:
        body(service)
    except Exception as error:
        # The daemon must outlive a failing cycle (database down, a bad traffic hour, ...).
        log.exception("%s failed; the next run will try again", name)
        if name == "plan":
            service.health.record(utc_now(), f"{type(error).__name__}: {error}")
            if service.metrics is not None:
                service.metrics.failures.inc()
    else:
        if name == "plan":
            service.health.record(utc_now(), None)


def plan_job() -> None:
    _job("plan", run_once)


def recalibrate_job() -> None:
    _job("recalibrate", lambda s: recalibrate(s.store, s.clock(), s.config))


def review_job() -> None:
    _job("review", lambda s: review(s.store, s.clock(), s.config, forecasters=s.forecasters))


def retrain_job() -> None:
    _job("retrain", lambda s: retrain_from_store(s.store, s.config))


class PrintingExecutor:
    """Prints each commit (one line per job) and passes it on: what `make run` shows."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner

    def execute(self, commit: Commit) -> None:
        self.inner.execute(commit)
        for line in commit_lines(commit):
            sys.stdout.write(f"commit {line['hour']} {line['job']} gpus={line['gpus']}\n")
        sys.stdout.flush()

    def stop(self, job: str, at: datetime) -> None:
        self.inner.stop(job, at)
        sys.stdout.write(f"stop {at.isoformat()} {job}\n")
        sys.stdout.flush()


class Metrics:
    """Prometheus metrics of the plan cycle, served on ``port``."""

    def __init__(self, port: int, addr: str = "0.0.0.0") -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "gpuplan_cycle_latency_seconds",
            "Wall time of one plan cycle",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
            registry=self.registry,
        )
        self.last_success = Gauge(
            "gpuplan_last_success_timestamp_seconds",
            "Unix time of the last successful cycle",
            registry=self.registry,
        )
        self.utilization = Gauge(
            "gpuplan_planned_utilization", "Utilization of the last plan", registry=self.registry
        )
        self.coverage = Gauge(
            "gpuplan_rt_coverage", "Real-time coverage of the last plan", registry=self.registry
        )
        self.queue = Gauge("gpuplan_queue_length", "Queued batch jobs", registry=self.registry)
        self.failures = Counter("gpuplan_cycle_failures", "Plan cycles that failed", registry=self.registry)
        self.server, self.thread = start_http_server(port, addr=addr, registry=self.registry)

    def observe(self, report: CycleReport, now: datetime) -> None:
        self.latency.observe(report.latency_ms / 1000)
        self.last_success.set(now.timestamp())
        self.utilization.set(report.utilization)
        self.coverage.set(report.rt_coverage)
        self.queue.set(report.queue_length)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def http_server(service: Service, host: str, port: int) -> Any:
    """The HTTP face on ``host:port`` over this service's warm parts (not started)."""
    from gpuplan.http.context import ApiContext
    from gpuplan.http.server import HttpServer

    context = ApiContext(
        store=service.store,
        config=service.config,
        executor=service.executor,
        forecasters=service.forecasters,
        clock=service.clock,
        plan_lock=lambda: plan_lock(service),
        health=service.health,
    )
    return HttpServer(context, host, port)


def serve(
    service: Service,
    db_url: str,
    *,
    max_seconds: float | None = None,
    http: tuple[str, int] | None = None,
) -> int:
    """Schedule the jobs on ``db_url``'s job store and run until SIGTERM / Ctrl-C (or ``max_seconds``);
    with ``http=(host, port)``, serve the HTTP face meanwhile."""
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    global _SERVICE  # noqa: PLW0603 - the scheduled functions find the service here
    _SERVICE = service
    config = service.config
    scheduler = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=db_url, tablename="apscheduler_jobs")},
        executors={"default": ThreadPoolExecutor(max_workers=1)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        timezone=UTC,
    )
    scheduler.start(paused=True)
    now = service.clock()
    scheduler.add_job(
        plan_job,
        "interval",
        minutes=config.cycle_minutes,
        id="plan",
        replace_existing=True,
        next_run_time=now,
    )
    scheduler.add_job(recalibrate_job, "cron", minute=1, id="recalibrate", replace_existing=True)
    if config.review_every_hours:
        scheduler.add_job(
            review_job,
            "interval",
            minutes=round(config.review_every_hours * 60),
            id="review",
            replace_existing=True,
        )
    elif scheduler.get_job("review"):
        scheduler.remove_job("review")
    if config.retrain_at is not None:
        at = config.retrain_at
        scheduler.add_job(
            retrain_job, "cron", hour=at.hour, minute=at.minute, id="retrain", replace_existing=True
        )
    elif scheduler.get_job("retrain"):
        scheduler.remove_job("retrain")

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: finishing the job in flight, then exiting", signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    server = None
    try:
        if http is not None:
            server = http_server(service, *http).start()
        scheduler.resume()
        log.info(
            "daemon started: plan every %d min, review every %s h",
            config.cycle_minutes,
            config.review_every_hours,
        )
        stop.wait(timeout=max_seconds)
    finally:
        if server is not None:
            server.stop()
        scheduler.shutdown(wait=True)  # the job in flight finishes
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _SERVICE = None
    log.info("daemon stopped")
    return 0


def make_service(store: Store, config: ServiceConfig, *, print_commits: bool = False) -> Service:
    """The service of one daemon process; CP-SAT is loaded now, so that the plan cycle's
    budget goes to planning (the fast mode skips its CP-SAT search while it is not loaded)."""
    from gpuplan.app.executors import InMemoryExecutor
    from scheduler.policies import warm_up

    warm_up()

    executor: Executor = JsonLinesExecutor(config.commits_file) if config.commits_file else InMemoryExecutor()
    if print_commits:
        executor = PrintingExecutor(executor)
    return Service(store=store, config=config, executor=executor)
