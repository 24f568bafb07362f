"""The Slurm executor's figures, measured on the test fixture's cluster (tests/slurm.py).

    python -m benchmarks.slurm_figures [--rounds 3] [--cycles 12]

- commit to RUNNING: rounds of 8 one-GPU jobs, submitted held; each round's plan cycle
  commits them; the time runs from the executor's call with the stored commit to the job
  first seen RUNNING in ``squeue`` (polled every 20 ms);
- completion delay: the same jobs run ``sleep 5``; the poller runs every second; the
  delay is from Slurm's end time (whole seconds) to the history row being written;
- cycle latency: the same queue on two SQLite files, one cycle per 30 simulated minutes,
  with the Slurm executor (its reading of Slurm, the plan, the commit and its release)
  and with the in-memory one;
- takeover: two ``gpuplan daemon`` processes on one PostgreSQL database (tests/pg.py);
  the leader is killed with SIGKILL; the time runs to ``status`` naming the standby as
  the leader (``--takeovers`` times).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from contract.records import Amendment, Cluster, Commit, JobState
from gpuplan.app.adapters.executors import InMemoryExecutor
from gpuplan.app.adapters.executors.slurm import SlurmExecutor
from gpuplan.app.adapters.slurm.batch import slurm_job_id
from gpuplan.app.adapters.slurm.client import RUNNING
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.cycle.reconcile import poll, reconcile
from gpuplan.app.cycle.tick import plan_cycle
from gpuplan.app.jobs.submit import submit
from gpuplan.app.lab.seed import ensure_service
from gpuplan.table import format_table
from storage.factory import open_store
from storage.store import Store
from tests.slurm import SlurmServer

HOUR = timedelta(hours=1)
ROUND_JOBS = 8


def _spec(job_id: str, gpus: int, hours: float, command: str | None) -> dict[str, object]:
    spec: dict[str, object] = {
        "id": job_id,
        "kind": "batch_inference",
        "priority": 50,
        "gpus": gpus,
        "hours": hours,
    }
    if command is not None:
        spec["slurm"] = {"command": command}
    return spec


@dataclass
class TimedExecutor:
    """The Slurm executor, noting when each commit reaches it."""

    inner: SlurmExecutor
    called_at: list[float] = field(default_factory=list)

    name = SlurmExecutor.name

    @property
    def target(self) -> str:
        return self.inner.target

    def deliver(self, commit: Commit) -> bool:
        self.called_at.append(time.perf_counter())
        return self.inner.deliver(commit)

    def amend(self, amendment: Amendment) -> bool:
        return self.inner.amend(amendment)

    def stop(self, job: str, at: datetime) -> None:
        self.inner.stop(job, at)


def _until(probe: Callable[[], bool], timeout_s: float = 60.0, period_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError("not seen in time")
        time.sleep(period_s)


def commit_to_running(folder: Path, config: ServiceConfig, rounds: int) -> tuple[list[float], list[float]]:
    """Milliseconds from commit to RUNNING per job, and seconds from Slurm's end to the history row.

    Each round is a fresh database on the real clock (an hour is committed once, and Slurm's
    end times are real ones).
    """
    to_running: list[float] = []
    delays: list[float] = []
    for r in range(rounds):
        store = open_store(f"sqlite:///{folder}/round-{r}.db")
        try:
            ensure_service(store, config, datetime.now(UTC))
            running, ended = _round(store, config, f"r{r}")
        finally:
            store.close()
        to_running += running
        delays += ended
    return to_running, delays


def _round(store: Store, config: ServiceConfig, prefix: str) -> tuple[list[float], list[float]]:
    executor = SlurmExecutor.from_config(config)
    timed = TimedExecutor(executor)
    now = datetime.now(UTC)
    ids = [
        submit(store, _spec(f"{prefix}-{n}", 1, 1.0, "sleep 5"), now, config, replan=False, held=executor).job
        for n in range(ROUND_JOBS)
    ]
    reconcile(executor, store, now)
    plan_cycle(store, now, config, timed)
    (called,) = timed.called_at
    slurm_ids = {slurm_job_id(store.job(i)) for i in ids}  # type: ignore[arg-type]
    seen: dict[int, float] = {}

    def all_running() -> bool:
        for job in executor.client.jobs(executor.settings.partition):
            if job.id in slurm_ids and job.id not in seen and job.state in {RUNNING, "COMPLETED"}:
                seen[job.id] = time.perf_counter()
        return len(seen) == len(slurm_ids)

    _until(all_running)
    recorded: dict[str, float] = {}

    def all_recorded() -> bool:
        for job in poll(executor, store, datetime.now(UTC)):
            recorded[job.id] = time.time()
        return len(recorded) == len(ids)

    _until(all_recorded, period_s=1.0)
    delays = []
    for job_id in ids:
        job = store.job(job_id)
        assert job is not None and job.state is JobState.DONE and job.ended_at is not None
        delays.append(recorded[job_id] - job.ended_at.timestamp())
    return [(t - called) * 1000 for t in seen.values()], delays


def cycle_latencies(folder: Path, config: ServiceConfig, cycles: int) -> dict[str, list[float]]:
    """Milliseconds per cycle with each executor, on the same queue and the same clock."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=2, minutes=1)
    found: dict[str, list[float]] = {}
    for name in ("slurm", "memory"):
        store = open_store(f"sqlite:///{folder}/{name}.db")
        try:
            ensure_service(store, config, start)
            command = "sleep 3600" if name == "slurm" else None
            slurm = SlurmExecutor.from_config(config) if name == "slurm" else None
            for n in range(12):
                spec = _spec(f"c{n}", (1, 2, 4)[n % 3], 1.0 + n % 4, command)
                submit(store, spec, start, config, replan=False, held=slurm)
            memory = InMemoryExecutor()
            ms = []
            for n in range(cycles):
                now = start + n * timedelta(minutes=30)
                began = time.perf_counter()
                if slurm is not None:
                    reconcile(slurm, store, now)
                plan_cycle(store, now, config, slurm or memory)
                ms.append((time.perf_counter() - began) * 1000)
            found[name] = ms
        finally:
            store.close()
    return found


def takeovers(folder: Path, config: ServiceConfig, count: int) -> list[float]:
    """Seconds from SIGKILL of the leading daemon to ``status`` naming the standby."""
    import yaml

    from gpuplan.app.cycle.retrain import retrain
    from gpuplan.app.views.status import status
    from tests.pg import PgServer
    from training_data.history import generate_history, validate_history

    models = folder / "takeover-models"
    history = validate_history(
        generate_history(seed=5, training_jobs=1_200, quantization_jobs=240), source="bench"
    )
    retrain(history, source="bench", models_dir=models, traffic_paths=None)
    settings = config.slurm
    assert settings is not None
    slurm = {"partition": settings.partition, "slurm_conf": str(settings.slurm_conf)}
    document = {"executor": "slurm", "cluster": {"gpus": 16}, "apps": [], "cycle_minutes": 1}
    document |= {"review_every_hours": None, "commits_file": None, "slurm": slurm}
    path = folder / "takeover.yaml"
    path.write_text(yaml.safe_dump(document))
    server = PgServer.start()
    seconds = []
    try:
        for n in range(count):
            url = server.fresh_url()

            def leads(pid: int, url: str = url) -> bool:
                store = open_store(url)
                try:
                    found = status(store, datetime.now(UTC)).leader
                finally:
                    store.close()
                return found is not None and found["pid"] == pid

            argv = [
                sys.executable,
                "-m",
                "gpuplan",
                "daemon",
                "--db",
                url,
                "--config",
                str(path),
                "--models",
                str(models),
            ]
            with (folder / f"takeover-{n}.log").open("w") as log:
                first = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
                _until(partial(leads, first.pid), timeout_s=120, period_s=0.1)
                second = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
                time.sleep(5)  # the standby is up and waits
                os.killpg(first.pid, signal.SIGKILL)
                killed = time.perf_counter()
                _until(partial(leads, second.pid), timeout_s=120, period_s=0.05)
                seconds.append(time.perf_counter() - killed)
                first.wait()
                os.killpg(second.pid, signal.SIGTERM)
                second.wait(timeout=60)
            server.drop(url)
    finally:
        server.stop()
    return seconds


def _row(name: str, values: list[float], unit: str) -> list[object]:
    ordered = sorted(values)
    return [name, len(values), f"{statistics.median(ordered):.1f} {unit}", f"{ordered[-1]:.1f} {unit}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help=f"rounds of {ROUND_JOBS} jobs")
    parser.add_argument("--cycles", type=int, default=12)
    parser.add_argument("--conf", default="", help="more slurm.conf lines for the fixture")
    parser.add_argument("--takeovers", type=int, default=5)
    args = parser.parse_args(argv)
    from scheduler.policies import warm_up

    warm_up()  # as the daemon does: the cycle's budget goes to planning
    server = SlurmServer.start(extra=args.conf)
    try:
        with tempfile.TemporaryDirectory() as folder:
            config = ServiceConfig(
                cluster=Cluster(gpus=16),
                apps=(),
                models_dir=Path(folder) / "models",
                commits_file=None,
                review_every_hours=None,
                slurm=server.settings(),
            )
            running_ms, delays = commit_to_running(Path(folder), config, args.rounds)
            server.reset()
            cycles = cycle_latencies(Path(folder), replace(config), args.cycles)
            server.reset()
            taken = takeovers(Path(folder), config, args.takeovers) if args.takeovers else []
    finally:
        server.stop()
    rows = [
        _row("commit to RUNNING", running_ms, "ms"),
        _row("completion delay (poll every 1 s)", delays, "s"),
        _row("cycle, Slurm executor", cycles["slurm"], "ms"),
        _row("cycle, in-memory executor", cycles["memory"], "ms"),
    ]
    if taken:
        rows.append(_row("standby takeover (standby polls every 2 s)", taken, "s"))
    sys.stdout.write(format_table(["measure", "n", "median", "worst"], rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
