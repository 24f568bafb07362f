"""Bytes one stored plan run takes, on SQLite and on PostgreSQL, at 16 and 256 GPUs.

Each run is a real fast-mode plan of a generated scenario (``gpuplan.app.lab.synthetic``,
256 GPUs with 100 batch jobs), with its scenario, whole 24-step grid, metrics, one
forecast per real-time app and hour, and the commit of its first hour. ``RUNS`` runs
go into a fresh database; the growth divided by ``RUNS`` is the cost of one cycle.

    PYTHONPATH=. .venv/bin/python benchmarks/storage_size.py [RUNS]
    PYTHONPATH=. .venv/bin/python benchmarks/storage_size.py --month [KEEP_DAYS]

PostgreSQL comes from tests/pg.py's throwaway server (Debian's postgresql package).

``--month``: a simulated month of the daemon at 256 GPUs on SQLite (a run every 30 minutes,
each hour committed once), stored twice: with no pruning, and pruned once a day as the
daemon does (``gpuplan.app.cycle.prune``, keeping ``KEEP_DAYS`` days, 7 by default: the
daemon's default of 30 would not prune within one month). Prints the file sizes.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

from contract.records import AppForecast, Assignment, Commit, PlanRun, RunMode
from contract.scenario_io import parse_scenario
from gpuplan.app.core.bridge import run_record
from gpuplan.app.lab.bench import scale_shape
from gpuplan.app.lab.synthetic import generate
from scheduler.policies import PolicyName, plan
from storage.sql import SqlStore
from tests.pg import PgServer

START = datetime(2026, 3, 2, tzinfo=UTC)


def sample(gpus: int) -> tuple[PlanRun, Commit]:
    shape = replace(scale_shape(gpus), batch_jobs=100) if gpus >= 256 else scale_shape(gpus)
    document = generate(shape, seed=7)
    instance = parse_scenario(document, source=f"scale {gpus}")
    result = plan(instance, PolicyName.FAST)
    grid = [list(row) for row in result.grid]
    apps = [job["id"] for job in document["jobs"] if job["kind"] == "realtime"]
    run = run_record(
        document,
        start=START,
        created_at=START,
        mode=RunMode.PLAN,
        policy="fast",
        grid=grid,
        metrics=result.metrics.as_dict(),
        latency_ms=result.solve_ms,
        status=result.status,
        inputs_hash_="0" * 64,
        forecasts=tuple(
            AppForecast(app, START + timedelta(hours=h), 1000.0 + h, 1200.0 + h, 3)
            for app in apps
            for h in range(24)
        ),
    )
    holders: dict[str, list[int]] = {}
    for gpu, row in enumerate(grid):
        if row[0] is not None:
            holders.setdefault(row[0], []).append(gpu)
    commit = Commit(START, None, tuple(Assignment(job, tuple(g)) for job, g in holders.items()))
    return run, commit


def size_bytes(store: SqlStore, path: Path | None) -> int:
    with store.engine.connect() as connection:
        if path is not None:
            connection.execution_options(isolation_level="AUTOCOMMIT")
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            return path.stat().st_size
        return int(connection.scalar(text("SELECT pg_database_size(current_database())")) or 0)


def measure(url: str, path: Path | None, run: PlanRun, commit: Commit, runs: int) -> float:
    store = SqlStore.open(url)
    try:
        before = size_bytes(store, path)
        for i in range(runs):
            hour = START + timedelta(hours=i)
            store.record_run(replace(run, start=hour), replace(commit, hour=hour))
        return (size_bytes(store, path) - before) / runs
    finally:
        store.close()


def month(keep_days: int | None, path: Path, run: PlanRun, commit: Commit, days: int = 30) -> int:
    """The SQLite file's size after ``days`` days of cycles, pruned daily when ``keep_days`` is set."""
    from gpuplan.app.cycle.prune import prune

    store = SqlStore.open(f"sqlite:///{path}")
    try:
        for half_hour in range(days * 48):
            now = START + timedelta(minutes=30 * half_hour)
            hour = now.replace(minute=0)
            committed = now.minute == 0
            store.record_run(
                replace(run, start=hour if committed else hour + timedelta(hours=1), created_at=now),
                replace(commit, hour=hour) if committed else None,
            )
            if keep_days is not None and now.hour == 0 and committed:
                prune(store, now, keep_days)
        return size_bytes(store, path)
    finally:
        store.close()


def main_month(keep_days: int) -> int:
    run, commit = sample(256)
    with tempfile.TemporaryDirectory() as tmp:
        print("30 days at 256 GPUs, 48 runs and 24 commits a day, SQLite")
        for label, keep in (("no pruning", None), (f"pruned daily, keep {keep_days} days", keep_days)):
            size = month(keep, Path(tmp) / f"month-{keep}.db", run, commit)
            print(f"  {label:<28} {size / 1e6:8.1f} MB")
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--month":
        return main_month(int(argv[1]) if len(argv) > 1 else 7)
    runs = int(argv[0]) if argv else 100
    server = PgServer.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            header = ("GPUs", "grid JSON", "scenario JSON", "SQLite B/run", "PostgreSQL B/run")
            print("  ".join(header))
            for gpus in (16, 256):
                run, commit = sample(gpus)
                path = Path(tmp) / f"size-{gpus}.db"
                sqlite = measure(f"sqlite:///{path}", path, run, commit, runs)
                postgres = measure(server.database_url(server.create_database()), None, run, commit, runs)
                grid_json, scenario_json = len(json.dumps(run.grid)), len(json.dumps(run.scenario))
                cells = (gpus, grid_json, scenario_json, round(sqlite), round(postgres))
                print("  ".join(f"{c:>{len(h)}}" for c, h in zip(cells, header, strict=True)))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
