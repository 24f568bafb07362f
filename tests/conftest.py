from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.leaks import open_files
from tests.pg import PgServer
from tests.slurm import SlurmServer

# CI runs the contract's 500 examples per property, derandomized so a run is repeatable
# (a property that fails, fails every run); locally set HYPOTHESIS_PROFILE=dev for speed
# and fresh random examples.
settings.register_profile(
    "ci",
    max_examples=500,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# --- databases: one SQLite file or one PostgreSQL database per test ------------------
# Use `db_url` to run a test on both back ends (its PostgreSQL case carries the
# `postgres` marker), or `sqlite_url` / `pg_url` for one. Each checks at teardown that
# the test closed every connection it opened.


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A PostgreSQL server for the whole session (`pg_server.url`: its gpuplan_test database)."""
    server = PgServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """`postgresql+psycopg://postgres@127.0.0.1:PORT/gpuplan_test?...`: a fresh, empty schema, dropped afterwards."""
    url = pg_server.fresh_url()
    try:
        yield url
        left = pg_server.settled_sessions(url)
        assert not left, f"the test left connections open: {left}"
    finally:
        pg_server.drop(url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    """`sqlite:////tmp/.../gpuplan.db`: a file in the test's own folder."""
    path = tmp_path / "gpuplan.db"
    yield f"sqlite:///{path}"
    left = open_files(path)
    assert not left, f"the test left the database open: {left}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """The URL of an empty database on each back end in turn."""
    url: str = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    return url


# --- a machine that crawls: every look at the clock finds a second gone -----------------


class CrawlingClock:
    """A stand-in for the ``time`` module whose ``perf_counter`` jumps a second per call:
    what a budget sees on a machine busy enough to starve it."""

    def __init__(self) -> None:
        import time

        self._real = time
        self._ticks = 0

    def perf_counter(self) -> float:
        self._ticks += 1
        return self._real.perf_counter() + self._ticks


@pytest.fixture
def crawl(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``crawl(module, ...)``: those modules' ``time`` becomes a :class:`CrawlingClock`."""

    def slow_down(*modules: object) -> None:
        clock = CrawlingClock()
        for module in modules:
            monkeypatch.setattr(module, "time", clock)

    return slow_down


# --- Slurm: one cluster (two nodes of 8 fake GPUs) per session, reset after each test ----------


@pytest.fixture(scope="session")
def slurm_server() -> Iterator[SlurmServer]:
    """munged, slurmctld and two slurmd on loopback (tests/slurm.py), stopped by PID at the end."""
    server = SlurmServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def slurm(slurm_server: SlurmServer) -> Iterator[SlurmServer]:
    """The session's cluster with no job, no reservation and every node idle, before and after."""
    if slurm_server.controller is None or slurm_server.controller.poll() is not None:
        slurm_server.start_controller()  # a test stopped it
    slurm_server.reset()
    yield slurm_server
    if slurm_server.controller is None or slurm_server.controller.poll() is not None:
        slurm_server.start_controller()
    slurm_server.reset()
