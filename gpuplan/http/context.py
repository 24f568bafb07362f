"""What the HTTP face is handed by the process that serves it: the warm service parts."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime

from gpuplan.app.config import ServiceConfig
from gpuplan.app.executors import Executor
from gpuplan.app.forecasters import Forecasters
from gpuplan.app.health import Health
from storage.store import Store


@dataclass
class ApiContext:
    """The store, config, executor and forecasters of the serving process, its clock, and
    the plan lock it shares with the daemon's cycle."""

    store: Store
    config: ServiceConfig
    executor: Executor
    forecasters: Forecasters
    clock: Callable[[], datetime]
    plan_lock: Callable[[], AbstractContextManager[None]]
    health: Health
    max_body_bytes: int = 64 * 1024
