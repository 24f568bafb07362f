"""The running service: what every scheduled job needs, one plan cycle, and starting up.

The daemon (``daemon.py``) schedules these on the wall clock; ``gpuplan daemon --once``
runs one cycle through the same functions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from contract.errors import StoreError
from gpuplan.app.config import ServiceConfig
from gpuplan.app.executors import Executor, make_executor
from gpuplan.app.executors.printing import PrintingExecutor
from gpuplan.app.forecasters import Forecasters
from gpuplan.app.health import Health
from gpuplan.app.outbox import deliver_pending
from gpuplan.app.tick import CycleReport, plan_cycle, recalibrate
from gpuplan.app.traffic_sources import pull_traffic
from storage.store import Store

if TYPE_CHECKING:
    from gpuplan.app.demo import DemoWorld

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
    #: Simulated seconds per wall second of ``clock`` (the demo's --demo-speed); the daemon's
    #: periods shrink by it.
    speed: float = 1.0
    #: The demo's cluster and traffic (gpuplan/app/demo.py), advanced before each cycle.
    world: DemoWorld | None = None
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
    what it committed (the hour is committed once). The cycle also re-sends every commit
    the executor has not acknowledged (:mod:`gpuplan.app.outbox`).
    """
    now = now or service.clock()
    failed = pull_traffic(service.store, now, service.config)  # network calls: before the plan lock
    with plan_lock(service):
        if service.world is not None:
            service.world.advance(service.store, now)
        recalibrate(service.store, now, service.config, skip=failed)
        report = plan_cycle(
            service.store, now, service.config, service.executor, forecasters=service.forecasters
        )
    if service.metrics is not None:
        service.metrics.observe(report, now)
    return report


def recalibrate_now(service: Service) -> list[str]:
    """The hourly recalibration: Prometheus-fed apps' finished hours first, then every profile."""
    now = service.clock()
    failed = pull_traffic(service.store, now, service.config)
    return recalibrate(service.store, now, service.config, skip=failed)


def make_service(
    store: Store, config: ServiceConfig, *, print_commits: bool = False, demo_speed: float | None = None
) -> Service:
    """The service of one daemon process; CP-SAT is loaded now, so that the plan cycle's
    budget goes to planning (the fast mode skips its CP-SAT search while it is not loaded).

    With ``demo_speed`` the service runs the demo world (gpuplan/app/demo.py): commits go
    to the simulated cluster as well as the executor, on a clock ``demo_speed`` times as fast.
    """
    from scheduler.policies import warm_up

    warm_up()

    executor = make_executor(config, store)
    world = None
    if demo_speed is not None:
        from gpuplan.app.demo import checked_demo_speed, demo_world

        checked_demo_speed(demo_speed)
        world = demo_world(store, config, executor)
        executor = world.cluster
    if print_commits:
        executor = PrintingExecutor(executor)
    log.info("commits go to %s", executor.target)
    service = Service(store=store, config=config, executor=executor, world=world)
    if demo_speed is not None:
        from gpuplan.app.demo import demo_clock

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
    from gpuplan.app.seed import ensure_models, ensure_service

    # Under the seed lock: two daemons started together on an empty database seed it once.
    with holding(store, "seed"):
        ensure_models(config)
        ensure_service(store, config, now, from_file=from_file)
    service = make_service(store, config, print_commits=print_commits, demo_speed=demo_speed)
    # The outbox: what the executor never acknowledged (the process died between the commit
    # and its delivery) goes out before anything new is planned.
    with holding(store, "plan"):
        resent = deliver_pending(store, service.executor, now)
    if resent:
        log.info("delivered %d commit(s) left pending by an earlier run", resent)
    return service
