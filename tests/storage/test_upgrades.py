"""Upgrades, backups and restores of the service's database (docs/operations.md, "Upgrade").

Each earlier schema revision is a fixture built the way an older gpuplan left it: an empty
database migrated to that revision with Alembic, then rows valid at that revision written
into its tables as they were then. ``gpuplan db upgrade`` (and the daemon's start, through
``open_store``) brings it to the newest revision; every row is read back through the store.
On SQLite and on a real PostgreSQL server (tests/pg.py).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import MetaData, create_engine, inspect, text

from contract.records import GpuMapReading, Job, JobEstimate, JobState, Outcome, TrafficHour
from contract.scenario import JobKind
from gpuplan.cli import main
from storage import maintenance
from storage.factory import open_store
from storage.sql import alembic_config
from storage.sql.engine import known_revisions

HOUR = datetime(2026, 12, 1, 10, tzinfo=UTC)
REVISIONS = known_revisions()
EARLIER = REVISIONS[:-1]


def _time(value: datetime, dialect: str) -> datetime:
    """A timestamp as the older gpuplan stored it: naive UTC on SQLite, timestamptz on PostgreSQL."""
    return value.replace(tzinfo=None) if dialect == "sqlite" else value


def _insert(connection: Any, tables: MetaData, table: str, **values: Any) -> None:
    connection.execute(tables.tables[table].insert().values(**values))


def build_at(url: str, revision: str) -> None:
    """The database at ``url`` at ``revision``, holding rows of every table that revision has."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection), revision)
        n = REVISIONS.index(revision)
        with engine.begin() as connection:
            dialect = connection.dialect.name
            tables = MetaData()
            tables.reflect(connection)

            def t(value: datetime) -> datetime:
                return _time(value, dialect)

            _rows_of_0001(connection, tables, t)
            _rows_added_after_0001(connection, tables, t, n)
    finally:
        engine.dispose()


def _rows_of_0001(connection: Any, tables: MetaData, t: Callable[[datetime], datetime]) -> None:
    """A row in each table of the first revision (``t``: a time as that database stores it)."""
    _insert(
        connection,
        tables,
        "cluster",
        id=1,
        gpus=8,
        step_minutes=60,
        horizon_steps=24,
        decay=0.95,
        rt_penalty=8.0,
    )
    _insert(
        connection,
        tables,
        "apps",
        id="chat",
        priority=80.0,
        swap_cap=2,
        requests_per_gpu_hour=1200.0,
        headroom=0.1,
    )
    jobs = [
        ("done-1", "done", 2, 0, HOUR - timedelta(hours=5), HOUR - timedelta(hours=1), "completed"),
        ("queued-1", "queued", None, None, None, None, None),
        ("running-1", "running", 2, 2, HOUR, None, None),
    ]
    for seq, (job_id, state, gpus, first, started, ended, outcome) in enumerate(jobs, start=1):
        _insert(
            connection,
            tables,
            "jobs",
            seq=seq,
            id=job_id,
            kind="batch_inference",
            priority=50.0,
            spec={"kind": "batch_inference", "gpus": 2, "hours": 3},
            submitted_at=t(HOUR - timedelta(hours=6)),
            state=state,
            estimate_gpus=2,
            estimate_hours_p50=3.0,
            estimate_hours_p90=3.0,
            first_gpu=first,
            gpus=gpus,
            started_at=None if started is None else t(started),
            ended_at=None if ended is None else t(ended),
            outcome=outcome,
        )
    _insert(
        connection,
        tables,
        "job_history",
        job_id="old-1",
        kind="training",
        submit_time=t(HOUR - timedelta(days=2)),
        start_time=t(HOUR - timedelta(days=2)),
        end_time=t(HOUR - timedelta(days=1)),
        gpus=4,
        outcome="completed",
        features={},
    )
    _insert(connection, tables, "traffic", app="chat", hour=t(HOUR - timedelta(hours=1)), requests=1000.0)
    _insert(
        connection,
        tables,
        "plan_runs",
        id=1,
        start=t(HOUR),
        created_at=t(HOUR),
        mode="plan",
        policy="fast",
        inputs_hash="h",
        objective=1.0,
        bound=None,
        latency_ms=5.0,
        status="feasible",
        scenario={},
        grid=[],
        metrics={},
        committed=True,
        extra={},
    )
    _insert(connection, tables, "commits", hour=t(HOUR), run_id=1, created_at=t(HOUR))
    _insert(connection, tables, "commit_assignments", hour=t(HOUR), job="running-1", gpus=[2, 3])


def _rows_added_after_0001(
    connection: Any, tables: MetaData, t: Callable[[datetime], datetime], n: int
) -> None:
    """Rows in the tables and columns the revisions after the first added, up to ``REVISIONS[n]``."""
    if n >= REVISIONS.index("0002"):
        _insert(
            connection,
            tables,
            "api_tokens",
            id="tok1",
            secret_sha256="a" * 64,
            team="ml",
            scopes="read,submit",
            max_priority=None,
            created_at=t(HOUR),
            revoked_at=None,
        )
        connection.execute(text("UPDATE jobs SET team = 'ml' WHERE id = 'queued-1'"))
    if n >= REVISIONS.index("0003"):
        connection.execute(
            tables.tables["jobs"]
            .update()
            .where(tables.tables["jobs"].c.id == "queued-1")
            .values(promised_start=t(HOUR + timedelta(hours=2)))
        )
        _insert(
            connection,
            tables,
            "commit_amendments",
            hour=t(HOUR),
            seq=1,
            run_id=1,
            created_at=t(HOUR + timedelta(minutes=30)),
            assignments=[{"job": "running-1", "gpus": [4, 5]}],
        )
    if n >= REVISIONS.index("0004"):
        _insert(
            connection,
            tables,
            "deliveries",
            hour=t(HOUR),
            seq=0,
            executor="jsonl",
            state="acknowledged",
            attempts=1,
            last_error=None,
            created_at=t(HOUR),
            acknowledged_at=t(HOUR),
        )
    if n >= REVISIONS.index("0005"):
        _insert(
            connection,
            tables,
            "traffic_observed",
            app="chat",
            hour=t(HOUR),
            requests=10.0,
            minutes=15.0,
        )


def check_kept(url: str, revision: str) -> None:
    """Every row :func:`build_at` wrote at ``revision``, read back through the upgraded store."""
    n = REVISIONS.index(revision)
    store = open_store(url)
    try:
        cluster = store.cluster()
        assert cluster is not None and cluster.gpus == 8
        assert [app.id for app in store.apps()] == ["chat"]
        states = {job_id: store.job(job_id) for job_id in ("done-1", "queued-1", "running-1")}
        assert {job_id: job.state for job_id, job in states.items() if job} == {
            "done-1": JobState.DONE,
            "queued-1": JobState.QUEUED,
            "running-1": JobState.RUNNING,
        }
        assert len(store.history()) == 1
        assert store.traffic("chat") == [TrafficHour("chat", HOUR - timedelta(hours=1), 1000.0)]
        commit = store.commit(HOUR)
        assert commit is not None and [(a.job, a.gpus) for a in commit.assignments] == [("running-1", (2, 3))]
        queued = states["queued-1"]
        assert queued is not None
        assert queued.team == ("ml" if n >= REVISIONS.index("0002") else None)
        assert [token.id for token in store.tokens()] == (["tok1"] if n >= REVISIONS.index("0002") else [])
        promised = HOUR + timedelta(hours=2) if n >= REVISIONS.index("0003") else None
        assert queued.promised_start == promised
        amendments = store.amendments()
        assert [(a.seq, a.assignments[0].gpus) for a in amendments] == (
            [(1, (4, 5))] if n >= REVISIONS.index("0003") else []
        )
        deliveries = store.deliveries()
        assert len(deliveries) == (1 if n >= REVISIONS.index("0004") else 0)
        observed = store.observed_traffic(HOUR)
        assert [(o.app, o.requests) for o in observed] == (
            [("chat", 10.0)] if n >= REVISIONS.index("0005") else []
        )
        # 0006 counts the jobs already stored (3, one running, one done), and moves with each write.
        assert store.marks()[1:4] == (3, 1, 1)
        store.finish_job("running-1", HOUR + timedelta(hours=1), Outcome.OK, lambda _job: None)
        assert store.marks()[1:4] == (3, 0, 2)
        assert store.gpu_map() is None  # 0007: no reading of a partition yet
        assert queued.estimate is not None and queued.estimate.by_model is None  # 0008: every pool
    finally:
        store.close()


def test_a_jobs_hours_per_gpu_model_are_kept_after_the_upgrade_that_adds_them(db_url: str) -> None:
    build_at(db_url, "0007")
    store = open_store(db_url)
    try:
        by_model = {"h100-80gb": (1.5, 2.0), "a100-40gb": (3.25, 4.0)}
        store.set_estimate("queued-1", JobEstimate(2, 1.5, 2.0, by_model))
        queued = store.job("queued-1")
        assert queued is not None and queued.estimate == JobEstimate(2, 1.5, 2.0, by_model)
        store.set_estimate("queued-1", JobEstimate(2, 3.0, 3.0))  # back to every pool
        again = store.job("queued-1")
        assert again is not None and again.estimate is not None and again.estimate.by_model is None
    finally:
        store.close()


def test_a_new_job_is_stored_with_its_hours_per_gpu_model(db_url: str) -> None:
    store = open_store(db_url)
    try:
        estimate = JobEstimate(4, 2.0, 2.0, {"a100-40gb": (4.3, 4.3)})
        store.add_job(
            Job("new-1", JobKind.BATCH_INFERENCE, 5.0, {"kind": "batch_inference"}, HOUR, estimate=estimate)
        )
        stored = store.job("new-1")
        assert stored is not None and stored.estimate == estimate
    finally:
        store.close()


def test_the_gpu_map_is_stored_replaced_and_shown_by_status(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    build_at(db_url, EARLIER[-1])
    store = open_store(db_url)
    try:
        marks = [store.marks()]
        first = GpuMapReading("gpu", ("node2", "node10"), 4, HOUR)
        store.save_gpu_map(first)
        assert store.gpu_map() == first
        marks.append(store.marks())
        second = GpuMapReading("gpu", ("node10",), 8, HOUR + timedelta(hours=1))
        store.save_gpu_map(second)  # replaced whole: node2 is gone
        assert store.gpu_map() == second
        marks.append(store.marks())
        store.save_gpu_map(first)
        marks.append(store.marks())
        # Each new reading moves the marks (a served status is rebuilt); the map's mark is its
        # read_at, and the revoked tokens stay the last mark.
        assert len(set(marks[:3])) == 3 and marks[3] != marks[2] and marks[3] == marks[1]
        assert {m[-1] for m in marks} == {marks[0][-1]}
    finally:
        store.close()
    assert main(["status", "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert f"gpu map (Slurm partition gpu, read {HOUR.isoformat()}; GPU id = first + IDX):" in out
    rows = out.split("GPU id = first + IDX):\n", 1)[1].splitlines()
    assert [row.split() for row in rows[-2:]] == [["node2", "0", "0-3"], ["node10", "4", "4-7"]]
    assert main(["status", "--json", "--db", db_url]) == 0
    shown = json.loads(capsys.readouterr().out)["gpu_map"]
    assert shown["partition"] == "gpu"
    assert [(n["node"], n["first"], n["gpus"]) for n in shown["nodes"]] == [
        ("node2", 0, [0, 1, 2, 3]),
        ("node10", 4, [4, 5, 6, 7]),
    ]


def test_the_fixtures_cover_every_earlier_revision() -> None:
    assert tuple(f"{k:04d}" for k in range(1, len(REVISIONS))) == EARLIER


@pytest.mark.parametrize("revision", EARLIER)
def test_db_upgrade_keeps_the_data_of_each_earlier_revision(db_url: str, revision: str) -> None:
    build_at(db_url, revision)
    assert maintenance.schema_state(db_url).revision == revision
    assert main(["db", "upgrade", "--db", db_url]) == 0
    assert maintenance.schema_state(db_url).current
    check_kept(db_url, revision)


@pytest.mark.parametrize("revision", [EARLIER[0], EARLIER[-1]])
def test_the_daemons_start_upgrades_an_earlier_revision(db_url: str, revision: str) -> None:
    build_at(db_url, revision)
    open_store(db_url).close()  # what every command and the daemon's start do
    check_kept(db_url, revision)


def test_a_newer_schema_is_refused_and_nothing_is_written(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    open_store(db_url).close()
    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
            connection.execute(text("DROP TABLE job_counts"))  # what a newer gpuplan might have done
        assert main(["db", "upgrade", "--db", db_url]) == 1
        assert "newer than this gpuplan's" in capsys.readouterr().err
        assert main(["db", "version", "--db", db_url]) == 1
        assert "schema revision 9999, newer" in capsys.readouterr().out
        with engine.connect() as connection:
            assert connection.scalar(text("SELECT version_num FROM alembic_version")) == "9999"
            assert not inspect(connection).has_table("job_counts")  # not recreated: nothing written
    finally:
        engine.dispose()


def _traffic(url: str) -> list[float]:
    store = open_store(url)
    try:
        return [row.requests for row in store.traffic("chat")]
    finally:
        store.close()


def test_backup_and_restore_round_trip_on_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "state").mkdir()
    url = f"sqlite:///{tmp_path / 'state' / 'gpuplan.db'}"
    build_at(url, EARLIER[-1])
    live = open_store(url)  # a daemon holding the database open while it is backed up
    try:
        assert main(["db", "backup", str(tmp_path / "backup.db"), "--db", url]) == 0
        live.add_traffic([TrafficHour("chat", HOUR, 2000.0)])  # written after the backup
    finally:
        live.close()
    assert _traffic(url) == [1000.0, 2000.0]
    # A backup never overwrites, and leaves no partial file behind.
    assert main(["db", "backup", str(tmp_path / "backup.db"), "--db", url]) == 2
    assert "never overwrites" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.db", "state"]
    assert main(["db", "restore", str(tmp_path / "backup.db"), "--db", url]) == 0
    # The backup was at the older revision: restored, then upgraded, with its rows only.
    assert maintenance.schema_state(url).current
    assert _traffic(url) == [1000.0]
    check_kept(url, EARLIER[-1])


def test_a_restore_of_something_else_leaves_the_database_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    build_at(url, REVISIONS[-1])
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    assert main(["db", "restore", str(empty), "--db", url]) == 2
    assert "No schema in it" in capsys.readouterr().err
    newer = tmp_path / "newer.db"
    assert main(["db", "backup", str(newer), "--db", url]) == 0
    with sqlite3.connect(newer) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999'")
    connection.close()
    assert main(["db", "restore", str(newer), "--db", url]) == 1
    assert "nothing restored" in capsys.readouterr().err
    assert _traffic(url) == [1000.0]
    assert maintenance.schema_state(url).current


@pytest.mark.postgres
def test_backup_on_postgresql_names_pg_dump(
    pg_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    open_store(pg_url).close()
    assert main(["db", "backup", str(tmp_path / "b"), "--db", pg_url]) == 2
    assert "pg_dump" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
