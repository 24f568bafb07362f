"""What the storage tests run in other processes (multiprocessing with ``spawn``), how they
start them, and the sample job and run they store. Kept apart from the test module so that a child imports little.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from datetime import UTC, datetime, timedelta
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from sqlalchemy import event

from contract.records import AppForecast, Assignment, Commit, Job, JobEstimate, PlanRun, RunMode
from storage.sql import SqlStore

HOUR = datetime(2026, 3, 2, 9, tzinfo=UTC)
SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited pool or lock


def spawn(target: Any, *args: Any) -> multiprocessing.process.BaseProcess:
    child = SPAWN.Process(target=target, args=args)
    child.start()
    return child


def queued_job(job_id: str = "job-a", *, kind: str = "training", spec: dict[str, Any] | None = None) -> Job:
    return Job(
        id=job_id,
        kind=kind,
        priority=50.0,
        spec=spec if spec is not None else {"kind": kind},
        submitted_at=HOUR - timedelta(hours=2),
        estimate=JobEstimate(gpus=2, hours_p50=5.0, hours_p90=6.5),
    )


def sample_run(
    start: datetime = HOUR, *, gpus: int = 8, policy: str = "fast", objective: float = 123.5
) -> PlanRun:
    grid: list[list[str | None]] = [[None] * 24 for _ in range(gpus)]
    for step in range(6):
        grid[0][step] = grid[1][step] = "job-a"
    for step in range(24):
        grid[gpus - 1][step] = "chat"
    return PlanRun(
        start=start,
        created_at=start + timedelta(minutes=1, seconds=30),
        mode=RunMode.PLAN,
        policy=policy,
        inputs_hash="f" * 64,
        objective=objective,
        bound=None,
        latency_ms=12.5,
        status="FEASIBLE",
        scenario={"name": "sample", "gpus": gpus, "horizon": 24, "jobs": [], "running": []},
        grid=grid,
        metrics={"utilization": 0.25, "objective": objective, "completed": 1.0},
        forecasts=tuple(
            AppForecast("chat", start + timedelta(hours=h), 100.0 + h, 150.0 + h, 1) for h in range(24)
        ),
        extra={"note": "sample"},
    )


def sample_commit(hour: datetime = HOUR) -> Commit:
    return Commit(hour=hour, run_id=None, assignments=(Assignment("job-a", (0, 1)), Assignment("chat", (7,))))


def race_to_commit(url: str, hour: datetime, barrier: Barrier, results: Queue[tuple[int, bool]]) -> None:
    """Wait for the other racer, open the store, record a run that commits ``hour``."""
    barrier.wait(timeout=60)
    store = SqlStore.open(url)
    try:
        stored = store.record_run(sample_run(hour), sample_commit(hour))
        assert stored.id is not None
        results.put((stored.id, stored.committed))
    finally:
        store.close()


def die_inside_record_run(url: str, statement: str) -> None:
    """Record a committing run, and kill -9 this process right after ``statement`` ran in it."""
    store = SqlStore.open(url)

    def kill(*args: Any) -> None:
        if args[2].lstrip().upper().startswith(statement):
            os.kill(os.getpid(), signal.SIGKILL)

    event.listen(store.engine, "after_cursor_execute", kill)
    store.record_run(sample_run(), sample_commit())


def die_holding_lock(url: str, name: str) -> None:
    """Take the cycle lock and die with it held (exit code 3 when it was not free)."""
    store = SqlStore.open(url)
    with store.cycle_lock(name) as held:
        if held:
            os.kill(os.getpid(), signal.SIGKILL)
    store.close()
    raise SystemExit(3)
