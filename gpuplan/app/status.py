"""What runs now, what waits and when it is planned; and exporting a stored run offline."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from contract.errors import InputError
from contract.records import JobState, PlanRun, RunMode
from gpuplan.app.bridge import planned_place
from storage.store import Store


def run_summary(run: PlanRun) -> dict[str, Any]:
    """A stored run as ``run.json`` and ``status`` show it (``start``: the wall-clock hour of step 0)."""
    return {
        "id": run.id,
        "start": run.start.isoformat(),
        "policy": run.policy,
        "objective": run.objective,
        "status": run.status,
        "mode": run.mode.value,
        "committed": run.committed,
        "bound": run.bound,
        "latency_ms": round(run.latency_ms, 3),
        "created_at": run.created_at.isoformat(),
    }


@dataclass(frozen=True)
class Status:
    at: datetime
    running: list[dict[str, Any]]
    queue: list[dict[str, Any]]
    last_run: dict[str, Any] | None
    leader: dict[str, Any] | None = None  # the leading daemon (PostgreSQL): host, pid

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "running": self.running,
            "queue": self.queue,
            "last_run": self.last_run,
            "leader": self.leader,
        }


def leader_of(owner: str | None) -> dict[str, Any] | None:
    """A daemon's ``host:pid`` as status shows it."""
    if owner is None:
        return None
    host, _, pid = owner.rpartition(":")
    return {"host": host, "pid": int(pid)} if pid.isdigit() else {"host": owner, "pid": None}


def status(store: Store, now: datetime) -> Status:
    """Running jobs with their GPUs, the queue with planned starts from the latest plan, the last
    run, and the leading daemon (on PostgreSQL, where a standby may wait)."""
    last = store.run()
    plan = next(iter(store.runs(mode=RunMode.PLAN, limit=1)), None)
    newest = last if last is not None and last.mode is not RunMode.REVIEW else plan
    running = [
        {
            "job": job.id,
            "gpus": list(range(job.first_gpu, job.first_gpu + job.gpus)),
            "since": job.started_at.isoformat(),
        }
        for job in store.jobs([JobState.RUNNING])
        if job.first_gpu is not None and job.gpus is not None and job.started_at is not None
    ]
    queue = []
    for job in store.jobs([JobState.QUEUED]):
        start = planned_place(newest, job.id)[0] if newest is not None else None
        queue.append({"job": job.id, "planned_start": None if start is None else start.isoformat()})
    summary = None if last is None else run_summary(last)
    return Status(now, running, queue, summary, leader_of(store.leader()))


def find_run(store: Store, which: str) -> PlanRun:
    """``latest`` or a run id; InputError when there is none."""
    if which == "latest":
        run = store.run()
        if run is None:
            raise InputError("run_id", "a stored run (the database has none yet)", which)
        return run
    if not which.isdigit():
        raise InputError("run_id", "a run id (a whole number) or `latest`", which)
    run = store.run(int(which))
    if run is None:
        raise InputError("run_id", "the id of a stored run", which)
    return run


def export_run(run: PlanRun, out_dir: Path) -> list[Path]:
    """Write ``scenario.json``, ``plan.json`` (CONTRACT.md formats) and ``run.json`` into ``out_dir``."""
    from contract.scenario_io import write_json_atomic

    plan = {
        "scenario": run.scenario.get("name"),
        "policy": run.policy,
        "grid": run.grid,
        "metrics": run.metrics,
        "solve_ms": round(run.latency_ms, 3),
        "status": run.status,
        "bound": run.bound,
    }
    files = {"scenario.json": run.scenario, "plan.json": plan, "run.json": run_summary(run)}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, payload in files.items():
        write_json_atomic(out_dir / name, payload)
        written.append(out_dir / name)
    return written
