"""The running service: what every scheduled job needs, one plan cycle, and starting up.

The daemon (``daemon.py``) schedules these on the wall clock; ``gpuplan daemon --once``
runs one cycle through the same functions.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from contract.errors import StoreError
from contract.records import Job
from gpuplan.app.adapters.executors import Executor, Reconciler
from gpuplan.app.adapters.executors.printing import PrintingExecutor
from gpuplan.app.adapters.executors.registry import make_executor
from gpuplan.app.adapters.metrics import service_state
from gpuplan.app.adapters.traffic_sources import pull_traffic
from gpuplan.app.core.bridge import floor_hour
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.core.forecasters import Forecasters
from gpuplan.app.cycle.amend import amend_cycle, answer_freed
from gpuplan.app.cycle.outbox import deliver_pending
from gpuplan.app.cycle.reconcile import poll, reconcile
from gpuplan.app.cycle.tick import CycleReport, recalibrate
from gpuplan.app.cycle.traffic import SurgeAnswer, answer_surge, watch_prometheus
from gpuplan.app.jobs.adopt import adopt
from gpuplan.app.jobs.changes import Changes
from gpuplan.app.lab.seed import ensure_models, ensure_service
from gpuplan.app.views.health import Health
from scheduler.policies import warm_up
from storage.store import Store

if TYPE_CHECKING:
    from gpuplan.app.lab.demo import DemoWorld

log = logging.getLogger("gpuplan.daemon")

#: How long a cycle waits for another daemon's cycle on the same database, and how often it looks.
LOCK_WAIT_S = 300.0
LOCK_POLL_S = 0.2
#: How often a standby daemon tries to take the lead (well inside the shortest cycle period).
STANDBY_POLL_S = 2.0

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
    #: Simulated seconds per wall second of ``clock`` (the demo's --demo-speed); the daemon's
    #: periods shrink by it.
    speed: float = 1.0
    #: The demo's cluster and traffic (gpuplan/app/lab/demo.py), advanced before each cycle.
    world: DemoWorld | None = None
    #: The executor, when its cluster reports back (Slurm): reconciled before each plan, polled between.
    reconciler: Reconciler | None = None
    forecasters: Forecasters = field(init=False)
    metrics: Any = None  # a Metrics when --metrics-port is given
    #: How ``status`` names this daemon when it leads.
    owner: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    #: Set when this daemon finds it no longer leads: its scheduled jobs stop acting.
    lead_lost: threading.Event = field(default_factory=threading.Event)
    health: Health = field(init=False)
    plan_mutex: threading.Lock = field(init=False, default_factory=threading.Lock)
    #: What this process changed: the served API's caches and warm starts read it.
    changes: Changes = field(init=False, default_factory=Changes)

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
    """One plan cycle at ``now`` (default: the clock): recalibrate, then plan and commit, or
    within an hour already committed, plan from the next and amend this one
    (:func:`gpuplan.app.cycle.amend.amend_cycle`: the plan's next-hour starts on GPUs idle now, and
    real-time GPUs for the apps whose observed traffic of the hour outruns theirs).

    A second daemon on the same database waits for the first one's cycle, then plans on
    what it committed (the hour is committed once). The cycle also re-sends every commit
    the executor has not acknowledged (:mod:`gpuplan.app.cycle.outbox`).
    """
    now = now or service.clock()
    failed = pull_traffic(service.store, now, service.config)  # network calls: before the plan lock
    watch_prometheus(service.store, now, service.config)
    with plan_lock(service):
        if service.world is not None:
            service.world.advance(service.store, now)
        if service.reconciler is not None:  # Slurm's truth first; a failure fails the cycle
            found = reconcile(service.reconciler, service.store, now)
            adopt(service.reconciler, service.store, found, now, service.config)
        recalibrate(service.store, now, service.config, skip=failed)
        report, _ = amend_cycle(
            service.store,
            now,
            service.config,
            service.executor,
            forecasters=service.forecasters,
            observed=service.store.observed_traffic(floor_hour(now)),
        )
        if report.run is not None:  # the plan the API's next submits start from
            service.changes.planned(report.run, service.store.marks())
        else:
            service.changes.bump()
    if service.metrics is not None:
        service.metrics.observe(report, now, _replicas(service))
        observe_state(service, now)
    return report


def observe_state(service: Service, now: datetime) -> None:
    """The metrics of what the store and the executor hold now (jobs by state, deliveries
    pending, Slurm commands failed, forecast age)."""

    if service.metrics is not None:
        client = getattr(service.reconciler, "client", None)
        state = service_state(
            service.store,
            now,
            executor=service.executor.name,
            slurm_failed=getattr(client, "failed", 0),
            apps=[app.id for app in service.config.apps],
        )
        service.metrics.observe_state(state)


def watch_once(service: Service, now: datetime | None = None) -> SurgeAnswer | None:
    """Between cycles: the Prometheus-fed apps' hour in progress, and a surge in it answered at
    once (:func:`gpuplan.app.cycle.traffic.answer_surge`: a re-plan that amends the hour)."""
    now = now or service.clock()
    if not watch_prometheus(service.store, now, service.config):
        return None
    try:
        with plan_lock(service):
            return answer_surge(
                service.store, now, service.config, service.executor, forecasters=service.forecasters
            )
    finally:
        service.changes.bump()  # as a push does: the observation is a change, surge or not


def recalibrate_now(service: Service) -> list[str]:
    """The hourly recalibration: Prometheus-fed apps' finished hours first (and the demo
    world's, brought to the clock), then every profile."""
    now = service.clock()
    failed = pull_traffic(service.store, now, service.config)
    if service.world is not None:
        with plan_lock(service):
            service.world.advance(service.store, now)
    try:
        return recalibrate(service.store, now, service.config, skip=failed)
    finally:
        service.changes.bump()


def poll_once(service: Service, now: datetime | None = None) -> list[Job]:
    """Between plans: the executor's completions into the history (a no-op without a reconciler);
    GPUs they free in the committed hour are used at once (:func:`gpuplan.app.cycle.amend.answer_freed`)."""
    if service.reconciler is None:
        return []
    now = now or service.clock()
    with plan_lock(service):
        finished = poll(service.reconciler, service.store, now)
        if finished:
            answer_freed(
                service.store,
                now,
                service.config,
                [job.id for job in finished],
                service.executor,
                forecasters=service.forecasters,
            )
        service.changes.bump()
    if service.metrics is not None:
        service.metrics.observe_replicas(_replicas(service))
        observe_state(service, now)
    return finished


def _replicas(service: Service) -> dict[str, int]:
    if service.reconciler is None:
        return {}
    running = service.reconciler.replicas_running
    return {app.id: running.get(app.id, 0) for app in service.config.apps}


@contextmanager
def leading(service: Service, stop: threading.Event, poll_s: float = STANDBY_POLL_S) -> Iterator[bool]:
    """Lead for as long as the context is open: at once, or after waiting as the standby until
    the leader is gone (``stop`` set while waiting: yields False). Only the leader plans and acts."""
    waiting = False
    while not stop.is_set():
        with service.store.leadership(service.owner) as held:
            if held:
                log.info("%s takes the lead%s", service.owner, " from the standby" if waiting else "")
                yield True
                return
        if not waiting:
            log.info("%s is the standby: %s leads", service.owner, service.store.leader())
            waiting = True
        stop.wait(poll_s)
    yield False


def make_service(
    store: Store, config: ServiceConfig, *, print_commits: bool = False, demo_speed: float | None = None
) -> Service:
    """The service of one daemon process; CP-SAT is loaded now, so that the plan cycle's
    budget goes to planning (the fast mode skips its CP-SAT search while it is not loaded).

    With ``demo_speed`` the service runs the demo world (gpuplan/app/lab/demo.py): commits go
    to the simulated cluster as well as the executor, on a clock ``demo_speed`` times as fast.
    """

    warm_up()

    executor = make_executor(config, store)
    reconciler = executor if isinstance(executor, Reconciler) else None
    world = None
    if demo_speed is not None:
        from gpuplan.app.lab.demo import checked_demo_speed, demo_world

        checked_demo_speed(demo_speed)
        world = demo_world(store, config, executor)
        executor = world.cluster
    if print_commits:
        executor = PrintingExecutor(executor)
    log.info("commits go to %s", executor.target)
    service = Service(store=store, config=config, executor=executor, world=world, reconciler=reconciler)
    if demo_speed is not None:
        from gpuplan.app.lab.demo import demo_clock

        service.clock, service.speed = demo_clock(store, demo_speed), demo_speed
    return service


def start_service(
    store: Store,
    config: ServiceConfig,
    now: datetime,
    *,
    from_file: bool,
    print_commits: bool = False,
    demo_speed: float | None = None,
) -> Service:
    """Seed an empty database (models, cluster, apps, traffic; once, under the seed lock) and
    build the service: what a daemon does before its first cycle."""

    # Under the seed lock: two daemons started together on an empty database seed it once.
    with holding(store, "seed"):
        ensure_models(config)
        ensure_service(store, config, now, from_file=from_file)
        if not from_file:
            from gpuplan.app.lab.demo import feed_demo_traffic

            # The demo's traffic goes on to now, as the live demo feeds it before each cycle:
            # a first `--once` has every hour to recalibrate on.
            feed_demo_traffic(store, config, now)
    service = make_service(store, config, print_commits=print_commits, demo_speed=demo_speed)
    # The outbox: what the executor never acknowledged (the process died between the commit
    # and its delivery) goes out before anything new is planned.
    with holding(store, "plan"):
        resent = deliver_pending(store, service.executor, now)
    if resent:
        log.info("delivered %d commit(s) left pending by an earlier run", resent)
    return service
