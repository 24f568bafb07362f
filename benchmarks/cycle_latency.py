"""Plan-cycle latency and database growth of the service, measured on real SQLite files.

    python -m benchmarks.cycle_latency [--cycles 24] [--models models]

Two clusters: the demo (16 GPUs, two real-time apps on bundled traffic, its seeded queue)
and 256 GPUs with 100 queued jobs (plus four apps). Each cycle is the daemon's own
``run_once`` at a clock that moves 30 minutes a cycle; latency is the cycle's wall time
(load, forecast, plan, store, commit). Then a simulated week of 30-minute cycles on the
demo database gives the database's size. Prints median and p99 for each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.served import large_config, percentile, queue_jobs
from gpuplan.app.core.config import demo_config
from gpuplan.app.lab.seed import ensure_models, ensure_service
from gpuplan.app.service import make_service, run_once
from gpuplan.table import format_table
from storage.factory import open_store

T0 = datetime(2026, 11, 30, 0, 5, tzinfo=UTC)
CYCLE = timedelta(minutes=30)


def _cycles(db: str, config: object, cycles: int, *, large: bool) -> list[float]:
    store = open_store(db)
    try:
        service = make_service(store, config)  # type: ignore[arg-type]
        ensure_service(store, config, T0)  # type: ignore[arg-type]
        if large:
            queue_jobs(store, 100, T0)
        latencies = []
        for n in range(cycles):
            started = time.perf_counter()
            run_once(service, T0 + n * CYCLE)
            latencies.append((time.perf_counter() - started) * 1000)
        return latencies
    finally:
        store.close()


def _submits(db: str, config: object, count: int) -> list[float]:
    """The hot path: ``submit`` (validate, queue, fast-mode replan at the hot-path budget, store)."""
    from gpuplan.app.jobs.submit import submit

    store = open_store(db)
    try:
        service = make_service(store, config)  # type: ignore[arg-type]
        ensure_service(store, config, T0)  # type: ignore[arg-type]
        run_once(service, T0)
        latencies = []
        for n in range(count):
            spec = {"id": f"hot-{n}", "kind": "batch_inference", "priority": 50, "gpus": 2, "hours": 3}
            started = time.perf_counter()
            submit(store, spec, T0, config, forecasters=service.forecasters)  # type: ignore[arg-type]
            latencies.append((time.perf_counter() - started) * 1000)
        return latencies
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=24)
    parser.add_argument("--models", type=Path, default=Path("models"))
    parser.add_argument("--week", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)
    demo = replace(demo_config(args.models), executor="memory")
    ensure_models(demo)
    large = large_config(demo)
    rows: list[tuple[object, ...]] = []
    with tempfile.TemporaryDirectory() as folder:
        for name, config, is_large in (("demo (16 GPUs)", demo, False), ("256 GPUs, 100 jobs", large, True)):
            db = f"sqlite:///{folder}/{'large' if is_large else 'demo'}.db"
            ms = _cycles(db, config, args.cycles, large=is_large)
            rows.append((name, len(ms), statistics.median(ms), percentile(ms, 0.99), max(ms)))
        ms = _submits(f"sqlite:///{folder}/submit.db", demo, args.cycles)
        rows.append(
            ("submit on the demo (hot path)", len(ms), statistics.median(ms), percentile(ms, 0.99), max(ms))
        )
        table = [
            [name, n, f"{median:.1f}", f"{p99:.1f}", f"{worst:.1f}"] for name, n, median, p99, worst in rows
        ]
        sys.stdout.write(format_table(["cluster", "calls", "median ms", "p99 ms", "max ms"], table) + "\n")
        if args.week:
            path = Path(folder) / "week.db"
            week = 7 * 48
            ms = _cycles(f"sqlite:///{path}", demo, week, large=False)
            sys.stdout.write(
                f"a week: {week} 30-minute cycles on the demo, median {statistics.median(ms):.1f} ms, "
                f"p99 {percentile(ms, 0.99):.1f} ms; database {path.stat().st_size / 1e6:.1f} MB\n"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
