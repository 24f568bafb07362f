"""The daemon as a process: real APScheduler, signals, kill -9, two daemons, a lost database."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import daemon
from contract.errors import StoreError
from contract.records import DeliveryState, JobState
from contract.scenario_io import parse_scenario
from gpuplan.app.core.config import PrometheusSource, demo_config
from gpuplan.app.cycle.outbox import FAULT_MARKER, FAULT_PAUSE, FAULT_POINTS
from gpuplan.app.lab.seed import ensure_service
from gpuplan.app.service import make_service
from scheduler.check import check_plan
from storage.factory import open_store
from tests.pg import PgServer, free_port
from tests.service_fixtures import _in_tmp_path, models_dir, quick_config
from tests.waiting import wait_until

__all__ = ["_in_tmp_path", "models_dir"]

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 30, 10, 5, tzinfo=UTC)


def _gpuplan(*argv: object, env: dict[str, str] | None = None, **kwargs: object) -> subprocess.Popen[str]:
    """``gpuplan ARGV`` in a child process, in the test's folder (where it writes var/)."""
    return subprocess.Popen(
        [sys.executable, "-m", "gpuplan", *map(str, argv)],
        cwd=Path.cwd(),
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        text=True,
        **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs},  # type: ignore[arg-type]
    )


def _assert_store_consistent(db: str) -> None:
    """Every stored run is whole and legal; at most one commit per hour, equal to its run's column 0."""
    store = open_store(db)
    try:
        runs = store.runs(limit=1000)
        for run in runs:
            assert check_plan(parse_scenario(run.scenario), run.grid) == [], run.id
        hours = [commit.hour for commit in store.commits()]
        assert len(hours) == len(set(hours))
        for commit in store.commits():
            run = store.run(commit.run_id)
            assert run is not None and run.start == commit.hour
            column = {}
            for gpu, row in enumerate(run.grid):
                if row[0] is not None:
                    column.setdefault(row[0], []).append(gpu)
            assert {a.job: list(a.gpus) for a in commit.assignments} == column
    finally:
        store.close()


def _seed_once(db: str, models: Path) -> None:
    with _gpuplan("daemon", "--once", "--db", db, "--models", models, "--at", T0.isoformat()) as process:
        _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err


def _until_first_commit(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    while line and not line.startswith("commit "):
        line = process.stdout.readline()
    return line


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_after_a_cycle_lets_it_finish_and_exits_cleanly(
    tmp_path: Path, models_dir: Path, signum: signal.Signals
) -> None:
    db = f"sqlite:///{tmp_path / 'd.db'}"
    log_path = tmp_path / "daemon.log"
    with log_path.open("w") as log_file:
        process = _gpuplan(
            "-v", "daemon", "--db", db, "--models", models_dir, "--print-commits", stderr=log_file
        )
    with process:
        line = _until_first_commit(process)  # the cycle ran CP-SAT, which must not take Ctrl-C
        # The job's end: its one line is logged once its solves are over.
        _wait(lambda: "cycle hour=" in log_path.read_text() or process.poll() is not None, "the cycle's line")
        process.send_signal(signum)
        process.communicate(timeout=60)
    err = log_path.read_text()
    assert line.startswith("commit "), err
    assert process.returncode == 0, err
    assert "daemon stopped" in err
    _assert_store_consistent(db)


#: Where a ``--once`` cycle is killed: once started (its first line written, nothing of the cycle
#: yet), and at the outbox's fault points (the commit stored; the executor has it, the store does not
#: know). A start after one of these re-delivers first, so its own kill comes at that re-delivery.
KILL_AT = ("started", *FAULT_POINTS, "started", FAULT_POINTS[0])


def _killed_at(moment: str, argv: tuple[object, ...], marker: Path) -> None:
    """``gpuplan ARGV`` killed with SIGKILL at ``moment`` (one of :data:`KILL_AT`)."""
    env = {} if moment == "started" else {FAULT_PAUSE: moment, FAULT_MARKER: str(marker)}
    marker.unlink(missing_ok=True)
    with _gpuplan(*argv, env=env) as process:
        assert process.stderr is not None
        if moment == "started":
            line = process.stderr.readline()
            while line and "commits go to" not in line:
                line = process.stderr.readline()
            assert line, process.communicate()[1]
        else:
            _wait(lambda: marker.exists() or process.poll() is not None, f"the fault point {moment}", 300)
            assert marker.exists(), process.communicate()[1]
        process.send_signal(signal.SIGKILL)
        process.communicate()


def test_kill_9_mid_cycle_leaves_no_half_run_and_the_next_cycle_carries_on(
    tmp_path: Path, models_dir: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'k.db'}"
    _seed_once(db, models_dir)
    # Kill cycles of the next hours at different moments: before the write, after it, mid-delivery.
    for n, moment in enumerate(KILL_AT):
        at = (T0 + timedelta(hours=1 + n)).isoformat()
        _killed_at(
            moment, ("daemon", "--once", "--db", db, "--models", models_dir, "--at", at), tmp_path / "m"
        )
        _assert_store_consistent(db)
    at = (T0 + timedelta(hours=8)).isoformat()
    with _gpuplan("daemon", "--once", "--db", db, "--models", models_dir, "--at", at) as final:
        out, err = final.communicate(timeout=300)
    assert final.returncode == 0, err
    assert "committed=true" in out
    _assert_store_consistent(db)
    store = open_store(db)
    try:  # what the killed runs left pending went out at the final start
        assert store.pending_deliveries("jsonl") == []
    finally:
        store.close()


@pytest.mark.parametrize("spot", FAULT_POINTS)
def test_a_commit_whose_delivery_died_with_kill_9_is_delivered_once_at_restart(
    tmp_path: Path, models_dir: Path, spot: str
) -> None:
    db = f"sqlite:///{tmp_path / 'o.db'}"
    feed = tmp_path / "o.commits.jsonl"
    _seed_once(db, models_dir)  # hour 10, delivered
    marker = tmp_path / "paused"
    at = T0 + timedelta(hours=1)
    env = {FAULT_PAUSE: spot, FAULT_MARKER: str(marker)}
    with _gpuplan(
        "daemon", "--once", "--db", db, "--models", models_dir, "--at", at.isoformat(), env=env
    ) as process:
        _wait(lambda: marker.exists() or process.poll() is not None, f"the fault point {spot}", 300)
        assert marker.exists(), process.communicate()[1]
        process.send_signal(signal.SIGKILL)  # between the database commit and its acknowledgement
        process.communicate()
    hour = datetime(2026, 11, 30, 11, tzinfo=UTC)
    store = open_store(db)
    try:
        commit = store.commit(hour)
        pending = store.pending_deliveries("jsonl")
    finally:
        store.close()
    assert commit is not None and commit.assignments
    assert [d.item.hour for d in pending] == [hour]
    held = [line for line in _feed(feed) if line["hour"] == hour.isoformat()]
    assert len(held) == (0 if spot == "before-delivery" else len(commit.assignments))

    # Restarted in the same hour: nothing new to commit, the pending commit goes out at start.
    later = (at + timedelta(minutes=20)).isoformat()
    for _ in range(2):
        with _gpuplan("daemon", "--once", "--db", db, "--models", models_dir, "--at", later) as again:
            out, err = again.communicate(timeout=300)
        assert again.returncode == 0, err
        assert "committed=false" in out
    lines = [(line["job"], line["gpus"]) for line in _feed(feed) if line["hour"] == hour.isoformat()]
    assert lines == [(a.job, list(a.gpus)) for a in commit.assignments]  # exactly once
    store = open_store(db)
    try:
        deliveries = {d.item.hour: d for d in store.deliveries()}
    finally:
        store.close()
    assert deliveries[hour].state is DeliveryState.ACKNOWLEDGED
    assert deliveries[hour].attempts == 1
    _assert_store_consistent(db)


def _feed(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_two_daemons_on_one_database_commit_each_hour_once(tmp_path: Path, models_dir: Path) -> None:
    db = f"sqlite:///{tmp_path / 'two.db'}"
    for hour in (0, 1, 2):  # hour 0 on an empty database: both also race to create and seed it
        at = (T0 + timedelta(hours=hour)).isoformat()
        pair = [
            _gpuplan("daemon", "--once", "--db", db, "--models", models_dir, "--at", at) for _ in range(2)
        ]
        outputs = []
        for process in pair:
            with process:
                outputs.append(process.communicate(timeout=300))
        assert [process.returncode for process in pair] == [0, 0], outputs
        committed = [out.count("committed=true") for out, _ in outputs]
        assert sum(committed) == 1, outputs
    _assert_store_consistent(db)
    store = open_store(db)
    try:
        assert len(store.commits()) == 3
        jobs = [job.id for job in store.jobs()]
        assert len(jobs) == len(set(jobs)) == 14  # the demo queue, seeded once
    finally:
        store.close()


@pytest.mark.postgres
def test_a_lost_database_fails_one_cycle_and_the_next_succeeds(
    pg_server: PgServer, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database = pg_server.create_database()  # its own database, to take away and give back
    store = open_store(pg_server.database_url(database))
    clock = iter([T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)])
    try:
        config = quick_config(models_dir)
        ensure_service(store, config, T0)
        service = make_service(store, replace(config, executor="memory"))
        service.clock = lambda: next(clock)
        plan = daemon.job(service, "plan")
        plan()  # hour 10
        with pg_server.admin() as admin:  # the database goes away: no new sessions, old ones ended
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (database,)
            )
        plan()  # hour 11: fails, logged, the daemon goes on
        with pg_server.admin() as admin:
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        plan()  # hour 12
        assert [c.hour.hour for c in store.commits()] == [10, 12]
    finally:
        store.close()
        with pg_server.admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    assert any("plan failed; the next run will try again" in r.getMessage() for r in caplog.records)


@pytest.mark.postgres
def test_a_leader_whose_lock_is_gone_stops_acting_and_leads_again_once_it_holds_it(
    pg_server: PgServer, tmp_path: Path, models_dir: Path
) -> None:
    database = pg_server.create_database()
    db = pg_server.database_url(database)
    log_path = tmp_path / "daemon.log"
    store = open_store(db)
    try:
        with log_path.open("w") as out:
            process = _gpuplan("-v", "daemon", "--db", db, "--models", models_dir, stdout=out, stderr=out)
        with process:
            try:
                _wait(lambda: store.leader() == f"{socket.gethostname()}:{process.pid}", "the daemon leads")
                # The server ends the lock's connection (a network parted, an idle timeout).
                with pg_server.admin() as admin:
                    ended = admin.execute(
                        "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
                        " WHERE l.locktype = 'advisory' AND l.granted AND d.datname = %s"
                        " AND l.objid::bigint = (hashtext('leader')::bigint & 4294967295)",
                        (database,),
                    ).fetchall()
                assert ended == [(True,)]
                _wait(lambda: "lost the lead" in log_path.read_text(), "the daemon sees it lost the lead")
                _wait(lambda: store.leader() is not None, "the daemon leads again")
                assert process.poll() is None  # it never exited
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=120)
        text = log_path.read_text()
        assert process.returncode == 0, text
        assert text.count("takes the lead") == 2, text
        hours = [c.hour for c in store.commits()]
        assert len(hours) == len(set(hours))  # nothing committed twice across the change
    finally:
        store.close()
        with pg_server.admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _wait(condition: Callable[[], object], what: str, timeout_s: float = 120.0) -> None:
    wait_until(condition, what, timeout_s, every_s=0.2)


def test_metrics_are_served_while_the_daemon_runs(tmp_path: Path, models_dir: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    db = f"sqlite:///{tmp_path / 'm.db'}"
    argv = ("daemon", "--db", db, "--models", models_dir, "--metrics-port", port, "--print-commits")
    with _gpuplan(*argv) as process:
        _until_first_commit(process)
        text = ""
        for _ in range(50):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                text = response.read().decode()
            # the cycle's figures, then what the store holds after it (read just after them)
            if "gpuplan_cycle_latency_seconds_count 1.0" in text and 'gpuplan_jobs{state="running"}' in text:
                break
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    assert "gpuplan_cycle_latency_seconds_count 1.0" in text
    assert "gpuplan_planned_utilization" in text and "gpuplan_queue_length" in text
    # what an operator reads beside the cycle's figures
    assert 'gpuplan_jobs{state="queued"}' in text and 'gpuplan_jobs{state="running"}' in text
    assert "gpuplan_deliveries_pending 0.0" in text
    assert "gpuplan_slurm_commands_failed_total 0.0" in text
    assert 'gpuplan_forecast_age_seconds{app="' in text


def test_every_start_schedules_the_configs_services(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    store = open_store(db)
    try:
        config = demo_config(models_dir)
        ensure_service(store, config, T0)
        service = make_service(store, config)
        for _ in range(2):  # a restart schedules the same again
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="apscheduler"):
                daemon.serve(service, max_seconds=0.5)
            ids = _scheduled(caplog)
            assert {"plan", "recalibrate", "review", "prune"} <= ids
            assert "watch" not in ids and "poll" not in ids  # no Prometheus feed, no Slurm
            assert ids == set(daemon.schedule_of(service))
    finally:
        store.close()


def test_an_app_fed_by_prometheus_gets_the_surge_watch_job_and_loses_it_with_its_source(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = f"sqlite:///{tmp_path / 'w.db'}"
    store = open_store(db)
    try:
        base = demo_config(models_dir)
        nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens: the reads fail and are logged
        source = PrometheusSource(base.apps[0].id, nowhere, "sum(increase(requests_total[1h]))")
        config = replace(base, prometheus=(source,), surge_watch_minutes=7)
        ensure_service(store, config, T0)
        watching = make_service(store, config)
        assert daemon.schedule_of(watching)["watch"] == {"trigger": "interval", "seconds": 7 * 60}
        with caplog.at_level(logging.INFO, logger="apscheduler"):
            daemon.serve(watching, max_seconds=0.5)
        watched = _scheduled(caplog)
        caplog.clear()
        # Started again without Prometheus: no watch.
        with caplog.at_level(logging.INFO, logger="apscheduler"):
            daemon.serve(make_service(store, base), max_seconds=0.5)
    finally:
        store.close()
    assert "watch" in watched and "watch" not in _scheduled(caplog)


def _scheduled(caplog: pytest.LogCaptureFixture) -> set[str]:
    """The names of the jobs APScheduler logged as added (``Added job "NAME" to job store ...``)."""
    return {
        record.getMessage().split('"')[1]
        for record in caplog.records
        if record.name.startswith("apscheduler") and record.getMessage().startswith("Added job")
    }


def test_the_live_demo_on_a_fast_clock_finishes_jobs_and_starts_new_ones(
    tmp_path: Path, models_dir: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    argv = ("-v", "daemon", "--db", db, "--models", models_dir, "--demo-speed", "3600")
    with _gpuplan(*argv) as process:
        deadline = time.monotonic() + 300
        ended: list[str] = []
        started_later: list[str] = []
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(2)
            if not Path(tmp_path / "demo.db").exists():
                continue
            try:
                store = open_store(db)
            except StoreError:
                continue  # the daemon is still creating it
            try:
                ended = [job.id for job in store.jobs([JobState.DONE])]
                commits = store.commits()
                started_later = [
                    job.id
                    for job in store.jobs([JobState.RUNNING, JobState.DONE])
                    if commits and job.started_at is not None and job.started_at > commits[0].hour
                ]
            finally:
                store.close()
            if ended and started_later:
                break
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    assert ended and started_later, err
    assert process.returncode == 0, err
    assert err.count("heap settled after the first cycle") == 1, err  # once, whatever followed
    _assert_store_consistent(db)
