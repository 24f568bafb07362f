"""The daemon with ``executor: slurm`` as a process: kill -9 between a commit and its release,
a standby daemon taking over on PostgreSQL, the replica metric."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.records import JobState, Outcome
from gpuplan.app.adapters.executors.registry import slurm_partition
from gpuplan.app.adapters.slurm.batch import slurm_job_id
from gpuplan.app.adapters.slurm.client import RUNNING, SlurmClient
from gpuplan.app.adapters.slurm.cluster import read_cluster
from gpuplan.app.core.config import load_config
from gpuplan.app.jobs.submit import submit
from gpuplan.app.lab.seed import ensure_service
from storage.factory import open_store
from tests.app.adapters.test_slurm_client import wait_for
from tests.app.adapters.test_slurm_executor import FEATURES, traffic_csv
from tests.service_fixtures import models_dir, run_cli
from tests.slurm import PARTITION, SlurmServer, pausing_bin

__all__ = ["models_dir"]

ROOT = Path(__file__).resolve().parents[2]


def write_config(path: Path, server: SlurmServer, **overrides: Any) -> Path:
    document: dict[str, Any] = {
        "executor": "slurm",
        "cluster": {"gpus": 16},
        "apps": [],
        "cycle_minutes": 1,
        "review_every_hours": None,
        "plan_budget_ms": 200,
        "commits_file": None,
        "slurm": {"partition": PARTITION, "slurm_conf": str(server.conf), "timeout_s": 10, "poll_seconds": 2},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            document[key] = {**document[key], **value}
        else:
            document[key] = value
    path.write_text(yaml.safe_dump(document))
    return path


@contextmanager
def daemon_process(log: Path, *argv: object) -> Iterator[subprocess.Popen[str]]:
    """``gpuplan ARGV`` in its own process group (killed whole, as a crash would take it), its
    output in ``log`` (a file: a pipe nobody reads would stall a talkative daemon)."""
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gpuplan", *map(str, argv)],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)


def seed(db: str, config_path: Path, jobs: dict[str, int], command: str = "sleep 300") -> None:
    """The database with its cluster, and ``jobs`` (id -> GPUs) submitted to Slurm held."""
    config = load_config(config_path)
    store = open_store(db)
    try:
        now = datetime.now(UTC)
        ensure_service(store, config, now, from_file=True)
        for job_id, gpus in jobs.items():
            spec = {"id": job_id, "kind": "training", "priority": 50, "gpus": gpus, "hours": 3.0, **FEATURES}
            slurm = {"slurm": {"command": command}}
            submit(store, {**spec, **slurm}, now, config, replan=False, held=slurm_partition(config))
    finally:
        store.close()


@pytest.mark.slurm
def test_kill_9_between_the_commit_and_the_release_runs_the_job_exactly_once(
    slurm: SlurmServer, tmp_path: Path, models_dir: Path
) -> None:
    bin_dir = pausing_bin(tmp_path)
    config = write_config(tmp_path / "gpuplan.yaml", slurm, slurm={"bin_dir": str(bin_dir)})
    db = f"sqlite:///{tmp_path / 'g.db'}"
    seed(db, config, {"once": 4})
    (tmp_path / "pause").touch()
    once = ("daemon", "--once", "--db", db, "--config", config, "--models", models_dir)
    with daemon_process(tmp_path / "first.log", *once) as first:
        wait_for(lambda: (tmp_path / "paused").exists() or first.poll() is not None, "the release reached")
        assert first.poll() is None, (tmp_path / "first.log").read_text()
        os.killpg(first.pid, signal.SIGKILL)  # the daemon and its scontrol, between commit and release
    store = open_store(db)
    try:
        commit = store.commit(datetime.now(UTC).replace(minute=0, second=0, microsecond=0))
        assert commit is not None and [a.job for a in commit.assignments] == ["once"]
        planned = commit.assignments[0].gpus
        job = store.job("once")
        assert job is not None
        slurm_id = slurm_job_id(job)
    finally:
        store.close()
    client = SlurmClient(slurm.settings())
    held = client.job(slurm_id)  # type: ignore[arg-type]
    assert held is not None and held.held  # placed, never released
    (tmp_path / "pause").unlink()
    with daemon_process(tmp_path / "second.log", *once) as second:
        second.wait(timeout=300)
    assert second.returncode == 0, (tmp_path / "second.log").read_text()
    wait_for(lambda: client.job(slurm_id).state == RUNNING, "the job RUNNING")  # type: ignore[union-attr, arg-type]
    running = client.job(slurm_id)  # type: ignore[arg-type]
    gpu_map = read_cluster(client, slurm.settings(), datetime.now(UTC)).gpu_map
    assert gpu_map.gpus_of(running) == planned  # type: ignore[arg-type]
    ours = [j for j in client.jobs(PARTITION) if j.name == "once" and not j.finished]
    assert [j.id for j in ours] == [slurm_id]  # exactly once


def status_of(db: str) -> dict[str, Any]:
    result = run_cli("status", "--db", db, "--json")
    assert result.code == 0, result.err
    status: dict[str, Any] = json.loads(result.out)
    return status


@pytest.mark.slurm
@pytest.mark.postgres
def test_the_standby_leads_within_one_cycle_after_the_leader_is_killed(
    slurm: SlurmServer, pg_url: str, tmp_path: Path, models_dir: Path
) -> None:
    config = write_config(tmp_path / "gpuplan.yaml", slurm)
    seed(pg_url, config, {"first": 2}, command="sleep 20")
    argv = ("-v", "daemon", "--db", pg_url, "--config", config, "--models", models_dir)
    client = SlurmClient(slurm.settings())
    with daemon_process(tmp_path / "leader.log", *argv) as leader:
        wait_for(lambda: leader_pid(pg_url) == leader.pid, "the first daemon leads", 120)
        with daemon_process(tmp_path / "standby.log", *argv) as standby:
            first_id = slurm_job_id(open_job(pg_url, "first"))
            assert first_id is not None
            wait_for(lambda: client.job(first_id).state == RUNNING, "the leader's release")  # type: ignore[union-attr]
            standby_log = tmp_path / "standby.log"
            wait_for(lambda: "is the standby" in standby_log.read_text(), "the standby up, and waiting", 120)
            assert leader_pid(pg_url) == leader.pid
            os.killpg(leader.pid, signal.SIGKILL)
            killed = time.monotonic()
            wait_for(lambda: leader_pid(pg_url) == standby.pid, "the standby leads", 60)
            takeover_s = time.monotonic() - killed
            assert takeover_s < 60, takeover_s  # one cycle period (cycle_minutes: 1)
            # It carries on from the stored state: the leader's job ends and enters the history once.
            done = wait_for(
                lambda: (j := open_job(pg_url, "first")).state is JobState.DONE and j, "the end", 90
            )
            assert done.outcome is Outcome.OK
            assert [j.id for j in client.jobs(PARTITION) if j.name == "first"] == [first_id]
            os.killpg(standby.pid, signal.SIGTERM)
            assert standby.wait(timeout=60) == 0
    log = (tmp_path / "standby.log").read_text()
    assert "takes the lead from the standby" in log, log
    history = open_history(pg_url)
    assert list(history["job_id"]) == ["first"]


def leader_pid(db: str) -> int | None:
    leader = status_of(db)["leader"]
    return None if leader is None else int(leader["pid"])


def open_job(db: str, job_id: str) -> Any:
    store = open_store(db)
    try:
        return store.job(job_id)
    finally:
        store.close()


def open_history(db: str) -> Any:
    store = open_store(db)
    try:
        return store.history()
    finally:
        store.close()


@pytest.mark.slurm
def test_the_running_replicas_per_app_are_a_metric(
    slurm: SlurmServer, tmp_path: Path, models_dir: Path
) -> None:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    traffic = traffic_csv(tmp_path / "chat.csv", now)
    app = {"id": "chat", "priority": 90, "swap_cap": 8, "requests_per_gpu_hour": 100, "traffic": str(traffic),
           "replica_command": "sleep 3600"}  # fmt: skip
    config = write_config(tmp_path / "gpuplan.yaml", slurm, apps=[app])
    db = f"sqlite:///{tmp_path / 'm.db'}"
    port = free_port()
    argv = ("daemon", "--db", db, "--config", config, "--models", models_dir, "--metrics-port", port)
    with daemon_process(tmp_path / "daemon.log", *argv):

        def replicas() -> float | None:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                return None
            for line in body.splitlines():
                if line.startswith('gpuplan_replicas{app="chat"}'):
                    return float(line.split()[-1]) or None
            return None

        client = SlurmClient(slurm.settings())

        def agree() -> float | None:
            live = [
                j for j in client.jobs(PARTITION) if j.name.startswith("gpuplan-chat-") and j.state == RUNNING
            ]
            count = replicas()
            return count if count is not None and count == len(live) else None

        assert wait_for(agree, "the replica metric equal to the running replicas", 120) >= 1


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
