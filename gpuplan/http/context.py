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
from gpuplan.app.jobs import SubmitResult, cancel, submit
from storage.records import ApiToken, Job
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

    def submit(self, token: ApiToken, document: object, *, source: str) -> SubmitResult:
        """The submit use case as this token's team, under the plan lock (the API and the page)."""
        now = self.clock()
        with self.plan_lock():
            return submit(
                self.store,
                document,
                now,
                self.config,
                source=source,
                default_id=f"{token.team}-{now:%Y%m%dT%H%M%S%f}",
                forecasters=self.forecasters,
                token=token,
            )

    def cancel(self, token: ApiToken, job_id: str) -> Job:
        return cancel(self.store, job_id, self.clock(), self.executor, token=token)
