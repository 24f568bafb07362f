"""A served database for the HTTP tests: the demo service after one cycle, tokens per role."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from gpuplan.app.adapters.executors import InMemoryExecutor
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.core.forecasters import Forecasters
from gpuplan.app.core.tokens import create_token, parse_scopes
from gpuplan.app.cycle.tick import plan_cycle
from gpuplan.app.lab.seed import ensure_service
from gpuplan.app.views.health import Health
from gpuplan.http.context import ApiContext
from storage.factory import open_store
from storage.store import Store
from tests.service_fixtures import quick_config

T0 = datetime(2026, 11, 30, 10, 5, tzinfo=UTC)


@dataclass
class Served:
    context: ApiContext
    executor: InMemoryExecutor
    tokens: dict[str, str]  # role -> secret
    token_ids: dict[str, str]

    @property
    def store(self) -> Store:
        return self.context.store

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def cycle(self, at: datetime) -> None:
        """One plan cycle at ``at``, handed to the API as the daemon's cycle hands it."""
        with self.context.plan_lock():
            report = plan_cycle(
                self.store, at, self.context.config, self.executor, forecasters=self.context.forecasters
            )
            assert report.run is not None
            self.context.changes.planned(report.run, self.store.marks())
        self.context.batcher.settle()  # the plan the next submit starts from, made ahead
        self.context.health.record(at, None)


ROLES = {
    "reader": ("ml", "read", None),
    "ml": ("ml", "read,submit", 50.0),
    "vision": ("vision", "submit", None),
    "admin": ("ops", "admin", None),
}


@contextmanager
def served(
    db: str,
    models: Path,
    *,
    now: datetime = T0,
    config: ServiceConfig | None = None,
    clock: Callable[[], datetime] | None = None,
) -> Iterator[Served]:
    config = config or quick_config(models)
    store = open_store(db)
    try:
        ensure_service(store, config, now)
        executor = InMemoryExecutor()
        forecasters = Forecasters(config.models_dir)
        first = plan_cycle(store, now, config, executor, forecasters=forecasters)
        mutex = threading.Lock()

        @contextmanager
        def lock() -> Iterator[None]:
            with mutex:
                yield

        health = Health(started_at=now)
        health.record(now, None)
        context = ApiContext(
            store=store,
            config=config,
            executor=executor,
            forecasters=forecasters,
            clock=clock or (lambda: now),
            plan_lock=lock,
            health=health,
        )
        assert first.run is not None
        context.changes.planned(first.run, store.marks())
        context.batcher.settle()  # the plan the first submit starts from, made ahead
        tokens, ids = {}, {}
        for role, (team, scopes, cap) in ROLES.items():
            made = create_token(store, team, parse_scopes(scopes), cap, now)
            tokens[role], ids[role] = made.secret, made.token.id
        yield Served(context, executor, tokens, ids)
    finally:
        store.close()


@contextmanager
def served_api(
    db_url: str, models_dir: Path, config: ServiceConfig | None = None
) -> Iterator[tuple[httpx.Client, Served]]:
    """The API of :func:`served` (on ``config``) on uvicorn at a free loopback port, and an HTTP
    client for it."""
    from gpuplan.http.server import HttpServer

    with served(db_url, models_dir, config=config) as service:
        server = HttpServer(service.context, "127.0.0.1", 0).start()
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{server.bound_port}", timeout=60) as client:
                yield client, service
        finally:
            server.stop()
