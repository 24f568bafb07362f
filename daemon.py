"""The head-node daemon's composition root: ``gpuplan daemon`` starts here, and APScheduler 3
runs the service's use cases on the wall clock.

Wiring only: :func:`main` reads the config, opens the store, starts the service
(:func:`gpuplan.app.service.start_service`: seeded, its executor and outbox ready) and runs
one cycle (``--once``) or :func:`serve`. The periodic services are one table,
:data:`SCHEDULE`: each a use case of :mod:`gpuplan.app.service` / :mod:`gpuplan.app.cycle.tick`
and the trigger it runs on for a given service (or none):

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

The schedule is APScheduler's in-memory job store, built from :data:`SCHEDULE` and the config
at every start (and at every return to the lead). A persistent job store would keep nothing
worth keeping: every start replaces every job, its next run computed afresh from the config,
so what a store on the database holds is never read back; and it would be a second database
engine beside the store's (with its own URL handling) holding pickled jobs. In memory, a job
is a plain closure over this process's service: no global, nothing named by import path.
Missed runs are coalesced, and one worker thread runs one job at a time. A failing job is
logged and the daemon goes on. SIGTERM and Ctrl-C let the job in flight finish, then the
daemon exits.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from gpuplan.app.adapters.executors.registry import slurm_partition
from gpuplan.app.core.config import ServiceConfig, demo_config, load_config
from gpuplan.app.cycle.prune import DEFAULT_KEEP_DAYS, prune
from gpuplan.app.cycle.tick import retrain_from_store, review
from gpuplan.app.lab.seed import check_traffic
from gpuplan.app.service import (
    STANDBY_POLL_S,
    Service,
    leading,
    plan_lock,
    poll_once,
    recalibrate_now,
    run_once,
    start_service,
    utc_now,
    watch_once,
)
from storage.store import Store

log = logging.getLogger("gpuplan.daemon")

#: An APScheduler trigger with its arguments (``add_job``'s keywords), or None: not scheduled.
Trigger = dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Periodic:
    """One periodic service of the daemon: what it runs and, for a service, when."""

    name: str
    body: Callable[[Service], object]
    trigger: Callable[[Service], Trigger]
    #: The plan cycle: its outcome is the daemon's health (and a failure a metric).
    health: bool = False


def _plan_every(s: Service) -> Trigger:
    # First at once; APScheduler runs on the wall clock, the demo's periods shrink by its speed.
    seconds = s.config.cycle_minutes * 60 / s.speed
    return {"trigger": "interval", "seconds": seconds, "next_run_time": datetime.now(UTC)}


def _hourly(s: Service) -> Trigger:
    if s.speed == 1.0:
        return {"trigger": "cron", "minute": 1}
    return {"trigger": "interval", "seconds": 3600 / s.speed}


def _review_every(s: Service) -> Trigger:
    hours = s.config.review_every_hours
    return {"trigger": "interval", "seconds": hours * 3600 / s.speed} if hours else None


def _nightly(s: Service) -> Trigger:
    at = s.config.retrain_at
    return None if at is None else {"trigger": "cron", "hour": at.hour, "minute": at.minute}


def _daily(s: Service) -> Trigger:
    return None if s.config.prune_keep_days is None else {"trigger": "cron", "hour": 0, "minute": 17}


def _surge_watch(s: Service) -> Trigger:
    # A surge seen in Prometheus is answered within minutes, not at the next cycle.
    seconds = s.config.surge_watch_minutes * 60 / s.speed
    return {"trigger": "interval", "seconds": seconds} if s.config.prometheus else None


def _cluster_poll(s: Service) -> Trigger:
    reconciler = s.reconciler
    return None if reconciler is None else {"trigger": "interval", "seconds": reconciler.poll_seconds}


def _review(s: Service) -> object:
    return review(s.store, s.clock(), s.config, forecasters=s.forecasters)


def _retrain(s: Service) -> object:
    return retrain_from_store(s.store, s.config)


def _prune(s: Service) -> object:
    return prune(s.store, s.clock(), s.config.prune_keep_days or DEFAULT_KEEP_DAYS)


#: The daemon's periodic services, in the order they are scheduled.
SCHEDULE: tuple[Periodic, ...] = (
    Periodic("plan", run_once, _plan_every, health=True),
    Periodic("recalibrate", recalibrate_now, _hourly),
    Periodic("review", _review, _review_every),
    Periodic("retrain", _retrain, _nightly),
    Periodic("prune", _prune, _daily),
    Periodic("watch", watch_once, _surge_watch),
    Periodic("poll", poll_once, _cluster_poll),
)


def schedule_of(service: Service) -> dict[str, dict[str, Any]]:
    """The services :data:`SCHEDULE` runs for ``service``, by name, with their triggers."""
    return {p.name: trigger for p in SCHEDULE if (trigger := p.trigger(service)) is not None}


def job(service: Service, name: str, *, settle: bool = False) -> Callable[[], None]:
    """The scheduled job of :data:`SCHEDULE`'s service ``name`` over ``service``: it does nothing
    once the service lost the lead, logs a failure and returns; a plan's outcome goes to the
    health. With ``settle`` (the daemon's own process), the first plan that succeeds settles the heap."""
    periodic = next(p for p in SCHEDULE if p.name == name)

    def run() -> None:
        if service.lead_lost.is_set():  # stepping down: nothing more is planned or done
            log.error("%s skipped: %s no longer leads", name, service.owner)
            return
        try:
            periodic.body(service)
        except Exception as error:
            # The daemon must outlive a failing cycle (database down, a bad traffic hour, ...).
            log.exception("%s failed; the next run will try again", name)
            if periodic.health:
                service.health.record(utc_now(), f"{type(error).__name__}: {error}")
                if service.metrics is not None:
                    service.metrics.failures.inc()
        else:
            if periodic.health:
                if settle:
                    _settle_heap()  # before the health says so: a client may start at once
                service.health.record(utc_now(), None)

    return run


def _settle_heap() -> None:
    """After the daemon's first cycle that succeeds, once: what is alive then (modules, models, the warm
    forecasters) is moved out of the garbage collector's reach (:func:`gc.freeze`), so that a
    full collection walks only what came later. Left to walk it all, each one stopped every
    thread for 140-210 ms under the HTTP load, the whole tail of its latency."""
    if not gc.get_freeze_count():
        gc.collect()
        gc.freeze()
        log.info("heap settled after the first cycle: %d objects frozen", gc.get_freeze_count())


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
        held=slurm_partition(service.config),
    )
    return HttpServer(context, host, port)


def _run_schedule(
    service: Service, stop: threading.Event, max_seconds: float | None, http: tuple[str, int] | None
) -> None:
    """The leader's schedule (and the HTTP face), until ``stop`` (or ``max_seconds``)."""
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.background import BackgroundScheduler

    scheduler = BackgroundScheduler(  # the in-memory job store: see the module's docstring
        executors={"default": ThreadPoolExecutor(max_workers=1)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        timezone=UTC,
    )
    # The HTTP face first: a port in use stops the start with its one line, before the
    # scheduler has a thread to shut down.
    server = None if http is None else http_server(service, *http).start()
    try:
        scheduler.start(paused=True)
        for name, trigger in schedule_of(service).items():
            scheduler.add_job(job(service, name, settle=True), id=name, name=name, **trigger)
        scheduler.resume()
        config = service.config
        log.info(
            "daemon started: plan every %d min, review every %s h",
            config.cycle_minutes,
            config.review_every_hours,
        )
        _watch_the_lead(service, stop, max_seconds)
    finally:
        if server is not None:
            server.stop()
        if scheduler.running:
            scheduler.shutdown(wait=True)  # the job in flight finishes


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
    *,
    max_seconds: float | None = None,
    http: tuple[str, int] | None = None,
    metrics_port: int | None = None,
) -> int:
    """Lead (or wait as the standby until this daemon leads), then run :data:`SCHEDULE` until
    SIGTERM / Ctrl-C (or ``max_seconds``); with ``http=(host, port)``, serve the HTTP face
    meanwhile, and with ``metrics_port``, Prometheus metrics."""
    from gpuplan.app.adapters.metrics import Metrics

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: finishing the job in flight, then exiting", signum)
        stop.set()

    if metrics_port is not None:
        service.metrics = Metrics(metrics_port)
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    try:
        while not stop.is_set():
            with leading(service, stop) as leads:
                if not leads:
                    break
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                _run_schedule(service, stop, left, http)
            if not service.lead_lost.is_set():
                break
            # A daemon that lost the lead waits as the standby again, and may lead again.
            service.lead_lost.clear()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        gc.unfreeze()  # a process that goes on (a test) collects its whole heap again
        if service.metrics is not None:
            service.metrics.close()
    log.info("daemon stopped")
    return 0


@dataclass(frozen=True, slots=True)
class Start:
    """What ``gpuplan daemon`` was asked for, checked by the command line."""

    config_file: Path | None  # None: the demo
    models: Path | None
    now: datetime
    once: bool = False
    print_commits: bool = False
    demo_speed: float | None = None  # the live demo's clock speed (None: not the live demo)
    metrics_port: int | None = None
    http: tuple[str, int] | None = None


def configured(start: Start) -> ServiceConfig:
    """The config of ``start``, checked whole (its traffic sources too) before any database is touched."""
    config = load_config(start.config_file) if start.config_file else demo_config()
    if start.models is not None:
        config = replace(config, models_dir=start.models)
    check_traffic(config)
    return config


def main(start: Start, open_db: Callable[[], Store], out: TextIO, err: TextIO) -> int:
    """``gpuplan daemon``: the config, then the store (``open_db``, the one database engine),
    the service started on it, and one cycle (``start.once``, its line on ``out``) or the
    live daemon. ``err`` first says where this database's commits go."""
    config = configured(start)
    store = open_db()
    try:
        service = start_service(
            store,
            config,
            start.now,
            from_file=start.config_file is not None,
            print_commits=start.print_commits,
            demo_speed=start.demo_speed,
        )
        # Which feed this database's commits go to, so that an operator sees it before any commit.
        err.write(f"gpuplan daemon: {store.url}: commits go to {service.executor.target}\n")
        if start.once:
            out.write(run_once(service, start.now).log_line() + "\n")
            return 0
        return serve(service, http=start.http, metrics_port=start.metrics_port)
    finally:
        store.close()
