"""What the HTTP face is handed by the process that serves it: the warm service parts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime

from contract.records import ApiToken, Job, PlanRun
from gpuplan.app.config import ServiceConfig
from gpuplan.app.executors import Executor
from gpuplan.app.forecasters import Forecasters
from gpuplan.app.health import Health
from gpuplan.app.jobs import SubmitResult, cancel, hot_path_plan, submit
from gpuplan.app.replan import SharedReplan
from gpuplan.app.traffic import Stored, SurgeAnswer, answer_surge, push_traffic
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
    replan: SharedReplan = field(init=False)

    def __post_init__(self) -> None:
        self.replan = SharedReplan(self._hot_path)

    def _hot_path(self) -> PlanRun | None:
        with self.plan_lock():
            return hot_path_plan(self.store, self.clock(), self.config, self.forecasters)

    def submit(self, token: ApiToken, document: object, *, source: str) -> SubmitResult:
        """The submit use case as this token's team (the API and the page); the replan that
        answers it is shared with the submits that arrive meanwhile, under the plan lock."""
        now = self.clock()
        return submit(
            self.store,
            document,
            now,
            self.config,
            source=source,
            default_id=f"{token.team}-{now:%Y%m%dT%H%M%S%f}",
            forecasters=self.forecasters,
            token=token,
            replanner=self.replan,
        )

    def push_traffic(
        self, app: str, rows: Sequence[tuple[datetime, float]]
    ) -> tuple[Stored, SurgeAnswer | None]:
        """Store pushed hours; a count of the hour in progress that outruns the app's GPUs is a
        surge, answered at once under the plan lock (a re-plan that amends the hour)."""
        now = self.clock()
        stored = push_traffic(self.store, app, rows, now)
        if stored.observed is None:
            return stored, None
        with self.plan_lock():
            return stored, answer_surge(
                self.store, now, self.config, self.executor, forecasters=self.forecasters
            )

    def cancel(self, token: ApiToken, job_id: str) -> Job:
        return cancel(self.store, job_id, self.clock(), self.executor, token=token)
