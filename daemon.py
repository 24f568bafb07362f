"""The head-node daemon: APScheduler 3 runs the service's use cases on the wall clock.

Wiring only: each scheduled job is a use case of :mod:`gpuplan.app.service` and
:mod:`gpuplan.app.cycle.tick` (the service, its executor and its metrics are built there);
this module puts them on APScheduler's clock and loops:

- **plan** every ``cycle_minutes`` (first run at once): recalibrate, plan 24 hours, commit
  the current hour once, hand the commit to the executor;
- **recalibrate** hourly: each app's profile takes the last hour's traffic (an app fed by
  Prometheus has its finished hours read first: gpuplan/app/adapters/traffic_sources.py);
- **review** every ``review_every_hours``: a time-limited full-mode plan stored beside;
- **retrain** nightly at ``retrain_at`` (off by default);
- **prune** daily: plan runs older than ``prune_keep_days`` go (commits and history stay).
- **watch** every ``surge_watch_minutes`` when an app is fed by Prometheus: the hour in
  progress is read, and a surge in it answered at once with an amendment;
- **poll** every ``slurm.poll_seconds`` when the executor's cluster reports back (Slurm):
  completions into the job history, dead replicas restarted.

Several daemons may run on one PostgreSQL database: one leads (a session-level advisory
lock) and alone schedules these jobs; the others wait as standbys and one takes over when
the leader's connection ends (within ``STANDBY_POLL_S``). A leader checks its lock as often:
one that lost it (the server ended its connection, the network parted) stops acting, lets
the job in flight finish, and waits as a standby again.

With ``--http``, the HTTP face (:mod:`gpuplan.http`) is served from a thread of this process:
its submits take the same plan lock as the cycle, so a submit never plans against a
half-written run.

The schedule lives in APScheduler's SQLAlchemy job store on the service's own database, so
it survives restarts; missed runs are coalesced, and one worker thread runs one job at a
time. A failing job is logged and the daemon goes on. SIGTERM and Ctrl-C let the job in
flight finish, then the daemon exits.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from gpuplan.app.cycle.prune import DEFAULT_KEEP_DAYS, prune
from gpuplan.app.cycle.tick import retrain_from_store, review
from gpuplan.app.service import (
    STANDBY_POLL_S,
    Service,
    leading,
    plan_lock,
    poll_once,
    recalibrate_now,
    run_once,
    utc_now,
    watch_once,
)

log = logging.getLogger("gpuplan.daemon")


# -- the scheduled jobs: module-level functions, so APScheduler's job store can name them --------

_SERVICE: Service | None = None


def _job(name: str, body: Callable[[Service], object]) -> None:
    service = _SERVICE
    if service is None:  # a job store restored before the service was set up
        log.error("job %s ran with no service configured", name)
        return
    if service.lead_lost.is_set():  # stepping down: nothing more is planned or done
        log.error("%s skipped: %s no longer leads", name, service.owner)
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
            if _SERVING.is_set():
                _settle_heap()  # before the health says so: a client may start at once
            service.health.record(utc_now(), None)


#: Set while :func:`serve` runs: the process is the daemon's own, whose heap may be settled.
_SERVING = threading.Event()


def _settle_heap() -> None:
    """After the daemon's first cycle that succeeds, once: what is alive then (modules, models, the warm
    forecasters) is moved out of the garbage collector's reach (:func:`gc.freeze`), so that a
    full collection walks only what came later. Left to walk it all, each one stopped every
    thread for 140-210 ms under the HTTP load, the whole tail of its latency."""
    if not gc.get_freeze_count():
        gc.collect()
        gc.freeze()
        log.info("heap settled after the first cycle: %d objects frozen", gc.get_freeze_count())


def plan_job() -> None:
    _job("plan", run_once)


def recalibrate_job() -> None:
    _job("recalibrate", recalibrate_now)


def review_job() -> None:
    _job("review", lambda s: review(s.store, s.clock(), s.config, forecasters=s.forecasters))


def retrain_job() -> None:
    _job("retrain", lambda s: retrain_from_store(s.store, s.config))


def prune_job() -> None:
    _job("prune", lambda s: prune(s.store, s.clock(), s.config.prune_keep_days or DEFAULT_KEEP_DAYS))


def poll_job() -> None:
    _job("poll", poll_once)


def watch_job() -> None:
    _job("watch", watch_once)


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
        changes=service.changes,
    )
    return HttpServer(context, host, port)


def _schedule_if(job: Callable[[], None], scheduler: Any, when: dict[str, Any] | None) -> None:
    """Schedule ``job`` (its id is its name without ``_job``) on ``when``'s trigger, or, with
    None, remove it from the job store, where a start with another config may have left it."""
    name = job.__name__.removesuffix("_job")
    if when is not None:
        scheduler.add_job(job, id=name, replace_existing=True, **when)
    elif scheduler.get_job(name):
        scheduler.remove_job(name)


def _run_schedule(
    service: Service,
    db_url: str,
    stop: threading.Event,
    max_seconds: float | None,
    http: tuple[str, int] | None,
) -> None:
    """The leader's schedule (and the HTTP face), until ``stop`` (or ``max_seconds``)."""
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    scheduler = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=db_url, tablename="apscheduler_jobs")},
        executors={"default": ThreadPoolExecutor(max_workers=1)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        timezone=UTC,
    )
    # The HTTP face first: a port in use stops the start with its one line, before the
    # scheduler has a thread to shut down.
    server = None if http is None else http_server(service, *http).start()
    try:
        _schedule(service, scheduler, stop, max_seconds)
    finally:
        if server is not None:
            server.stop()
        if scheduler.running:
            scheduler.shutdown(wait=True)  # the job in flight finishes


def _schedule(service: Service, scheduler: Any, stop: threading.Event, max_seconds: float | None) -> None:
    """Put the jobs on ``scheduler``'s clock and run them until ``stop`` (or ``max_seconds``)."""
    config = service.config
    scheduler.start(paused=True)
    speed = service.speed  # the demo's faster clock: every period shrinks by it
    scheduler.add_job(
        plan_job,
        "interval",
        seconds=config.cycle_minutes * 60 / speed,
        id="plan",
        replace_existing=True,
        next_run_time=datetime.now(UTC),  # APScheduler runs on the wall clock
    )
    if speed == 1.0:
        scheduler.add_job(recalibrate_job, "cron", minute=1, id="recalibrate", replace_existing=True)
    else:
        scheduler.add_job(
            recalibrate_job, "interval", seconds=3600 / speed, id="recalibrate", replace_existing=True
        )
    at, hours, reconciler = config.retrain_at, config.review_every_hours, service.reconciler
    _schedule_if(
        review_job, scheduler, {"trigger": "interval", "seconds": hours * 3600 / speed} if hours else None
    )
    _schedule_if(
        retrain_job,
        scheduler,
        None if at is None else {"trigger": "cron", "hour": at.hour, "minute": at.minute},
    )
    _schedule_if(
        prune_job,
        scheduler,
        None if config.prune_keep_days is None else {"trigger": "cron", "hour": 0, "minute": 17},
    )
    # A surge seen in Prometheus is answered within minutes, not at the next cycle.
    watch_s = config.surge_watch_minutes * 60 / speed
    _schedule_if(
        watch_job, scheduler, {"trigger": "interval", "seconds": watch_s} if config.prometheus else None
    )
    _schedule_if(
        poll_job,
        scheduler,
        None if reconciler is None else {"trigger": "interval", "seconds": reconciler.poll_seconds},
    )
    scheduler.resume()
    log.info(
        "daemon started: plan every %d min, review every %s h",
        config.cycle_minutes,
        config.review_every_hours,
    )
    _watch_the_lead(service, stop, max_seconds)


def _watch_the_lead(service: Service, stop: threading.Event, max_seconds: float | None) -> None:
    """Wait for ``stop`` (or ``max_seconds``), checking every ``STANDBY_POLL_S`` that this daemon
    still leads; once it does not (its lock's connection ended), set ``service.lead_lost``."""
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    while True:
        left = STANDBY_POLL_S if deadline is None else min(STANDBY_POLL_S, deadline - time.monotonic())
        if left <= 0 or stop.wait(timeout=left):
            return
        if not service.store.still_leads():
            log.error("%s lost the lead (its lock is gone): it stops acting", service.owner)
            service.lead_lost.set()
            return


def serve(
    service: Service,
    db_url: str,
    *,
    max_seconds: float | None = None,
    http: tuple[str, int] | None = None,
) -> int:
    """Lead (or wait as the standby until this daemon leads), then schedule the jobs on
    ``db_url``'s job store and run until SIGTERM / Ctrl-C (or ``max_seconds``); with
    ``http=(host, port)``, serve the HTTP face meanwhile."""
    global _SERVICE  # noqa: PLW0603 - the scheduled functions find the service here
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: finishing the job in flight, then exiting", signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    _SERVING.set()
    try:
        while not stop.is_set():
            with leading(service, stop) as leads:
                if not leads:
                    break
                _SERVICE = service
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                _run_schedule(service, db_url, stop, left, http)
                _SERVICE = None
            if not service.lead_lost.is_set():
                break
            # A daemon that lost the lead waits as the standby again, and may lead again.
            service.lead_lost.clear()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _SERVICE = None
        _SERVING.clear()
        gc.unfreeze()  # a process that goes on (a test) collects its whole heap again
    log.info("daemon stopped")
    return 0
