"""The storage contract: one suite, run on a SQLite file and on a PostgreSQL server.

Every test that takes ``db_url`` (or the ``store`` built on it) runs on both back ends;
the PostgreSQL case carries the ``postgres`` marker. The fixtures check at teardown that
no connection was left checked out of the pool, and that none is left at all once the
store is closed (PostgreSQL's ``pg_stat_activity``, the SQLite file's descriptors).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from contract.errors import InputError, StoreError
from contract.records import (
    Amendment,
    App,
    Assignment,
    Cluster,
    Commit,
    DeliveryState,
    DownWindowRecord,
    JobEstimate,
    JobState,
    ObservedTraffic,
    Outcome,
    RunMode,
    TrafficHour,
)
from storage.factory import DEFAULT_URL, open_store
from storage.sql import SqlStore, alembic_config, head_revision
from storage.sql import engine as sql_engine
from storage.tables import SCHEMA_REVISION, Base
from tests.leaks import open_files
from tests.pg import PgServer
from tests.storage_children import (
    HOUR,
    queued_job,
    sample_commit,
    sample_run,
)
from training_data.history import BUNDLED_HISTORY, validate_history

TRAINING_SPEC = Path(__file__).parents[2] / "training_data" / "example_job_training.yaml"
TABLES = {
    "alembic_version",
    "api_tokens",
    "app_profiles",
    "apps",
    "cluster",
    "cluster_down",
    "commit_amendments",
    "commit_assignments",
    "commits",
    "deliveries",
    "job_counts",
    "gpu_map",
    "job_history",
    "jobs",
    "locks",
    "plan_runs",
    "run_forecasts",
    "traffic",
    "traffic_observed",
    "web_sessions",
}


@pytest.fixture
def store(db_url: str) -> Iterator[SqlStore]:
    opened = SqlStore.open(db_url)
    try:
        yield opened
        assert opened.engine.pool.checkedout() == 0, "a connection was left checked out of the pool"  # type: ignore[attr-defined]
    finally:
        opened.close()


def revision_of(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


# --- opening, the schema and its migrations --------------------------------------------


def test_open_creates_the_schema_at_the_newest_revision(db_url: str) -> None:
    store = SqlStore.open(db_url)
    try:
        assert set(inspect(store.engine).get_table_names()) == TABLES
    finally:
        store.close()
    assert revision_of(db_url) == head_revision() == SCHEMA_REVISION


def test_the_migrations_build_exactly_the_tables_of_the_models(store: SqlStore) -> None:
    with store.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_an_older_database_is_upgraded_on_open(db_url: str) -> None:
    SqlStore.open(db_url).close()
    revisions = [r.revision for r in ScriptDirectory.from_config(alembic_config()).walk_revisions()]
    engine = create_engine(db_url)
    try:
        for older in ["base", *revisions[1:]]:  # every revision before the newest
            with engine.begin() as connection:
                command.downgrade(alembic_config(connection), older)
            assert revision_of(db_url) == (None if older == "base" else older)
            store = SqlStore.open(db_url)
            try:
                store.save_cluster(Cluster(gpus=8))
                assert store.cluster() == Cluster(gpus=8)
            finally:
                store.close()
            assert revision_of(db_url) == head_revision()
    finally:
        engine.dispose()


def test_a_database_of_a_newer_gpuplan_is_refused(db_url: str) -> None:
    SqlStore.open(db_url).close()
    engine = create_engine(db_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(StoreError, match="A database written by a newer gpuplan needs that version"):
        SqlStore.open(db_url)


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "mysql://user@host/db",
        "postgresql+psycopg2://user@host/db",
        "postgresql+psycopg://user@host:port/db",
    ],
)
def test_a_malformed_url_names_the_db_field(url: str) -> None:
    with pytest.raises(InputError, match=re.escape("`db` must be a database URL: sqlite:///PATH")):
        open_store(url)


def test_an_unreachable_server_is_a_store_error() -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql+psycopg://gpuplan:secret@127.0.0.1:{port}/db"
    with pytest.raises(StoreError, match="Connection refused") as raised:
        open_store(url)
    shown = f"postgresql+psycopg://gpuplan:***@127.0.0.1:{port}/db"  # the password stays out of logs
    assert str(raised.value).startswith(f"cannot reach or use the database at {shown}: connection failed")


def test_connections_the_server_ended_are_replaced_once_idle_and_fail_only_the_transaction_in_flight(
    pg_server: PgServer, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqlStore.open(pg_url)
    try:
        assert store.jobs() == []  # a connection now in the pool
        pg_server.terminate(pg_url)
        assert not pg_server.settled_sessions(pg_url)
        # idle past the threshold: pinged as it is checked out, found dead, replaced
        monkeypatch.setattr(sql_engine, "PING_AFTER_IDLE_S", 0.0)
        assert store.jobs() == []
        # handed out again within the threshold: not pinged, so that transaction fails; the
        # pool drops the dead connection and the next one works
        monkeypatch.setattr(sql_engine, "PING_AFTER_IDLE_S", 3600.0)
        pg_server.terminate(pg_url)
        assert not pg_server.settled_sessions(pg_url)
        with pytest.raises(StoreError, match="cannot reach or use the database"):
            store.jobs()
        assert store.jobs() == []
    finally:
        store.close()


def test_a_sqlite_file_that_cannot_be_opened_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("")
    with pytest.raises(StoreError, match="cannot create the folder of the SQLite database"):
        open_store(f"sqlite:///{tmp_path}/plain-file/gpuplan.db")
    (tmp_path / "a-folder.db").mkdir()
    with pytest.raises(
        StoreError,
        match=re.escape(
            f"cannot reach or use the database at sqlite:///{tmp_path}/a-folder.db: unable to open"
        ),
    ):
        open_store(f"sqlite:///{tmp_path}/a-folder.db")


def test_the_default_url_creates_var_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert DEFAULT_URL == "sqlite:///var/gpuplan.db"
    open_store().close()
    assert (tmp_path / "var" / "gpuplan.db").is_file()
    assert revision_of(f"sqlite:///{tmp_path}/var/gpuplan.db") == head_revision()


def test_an_in_memory_store_keeps_its_data_for_its_lifetime() -> None:
    store = open_store("sqlite://")
    try:
        store.add_job(queued_job())
        stored = store.record_run(sample_run(), sample_commit())
        assert stored.committed
        assert store.run() == stored
        assert store.jobs()[0].state is JobState.RUNNING
    finally:
        store.close()


def test_the_leak_checks_see_a_store_left_open(db_url: str, request: pytest.FixtureRequest) -> None:
    store = SqlStore.open(db_url)
    store.cluster()  # a connection now waits in the pool

    def still_open() -> list[Any]:
        if store.dialect == "postgresql":  # a closed session leaves pg_stat_activity a moment later
            return request.getfixturevalue("pg_server").settled_sessions(db_url)  # type: ignore[no-any-return]
        return open_files(Path(store.engine.url.database or ""))

    assert still_open()
    store.close()
    assert not still_open()


# --- cluster, apps, profiles, traffic ----------------------------------------------------


def test_the_cluster_is_saved_whole_and_replaced_whole(store: SqlStore) -> None:
    assert store.cluster() is None
    first = Cluster(
        gpus=16,
        step_minutes=60,
        horizon_steps=24,
        decay=0.9,
        rt_penalty=6.0,
        down=(
            DownWindowRecord(3, HOUR, HOUR + timedelta(hours=4)),
            DownWindowRecord(5, HOUR + timedelta(hours=1)),
        ),
    )
    store.save_cluster(first)
    assert store.cluster() == first
    second = Cluster(gpus=32, down=(DownWindowRecord(0, HOUR),))
    store.save_cluster(second)
    assert store.cluster() == second


def test_apps_are_replaced_by_id_and_their_profiles_round_trip(store: SqlStore) -> None:
    chat = App("chat", priority=80.0, swap_cap=2, requests_per_gpu_hour=1200.0, headroom=0.1)
    store.save_app(chat)
    store.save_app(App("batch-embed", 40.0, 1, 300.0))
    store.save_app(replace(chat, swap_cap=4))
    assert store.apps() == [App("batch-embed", 40.0, 1, 300.0), replace(chat, swap_cap=4)]

    assert store.profile("chat") is None
    assert store.profile_through("chat") is None
    blob = bytes(range(256)) * 40
    store.save_profile("chat", blob, through=HOUR)
    store.save_profile("chat", blob[::-1], through=HOUR + timedelta(hours=1))
    assert store.profile("chat") == blob[::-1]
    assert store.profile_through("chat") == HOUR + timedelta(hours=1)


def test_the_hour_in_progress_is_kept_per_app_apart_from_the_finished_hours(store: SqlStore) -> None:
    hour = datetime(2026, 3, 2, 9, tzinfo=UTC)
    store.observe_traffic(
        [ObservedTraffic("chat", hour, 10.0, 20.0), ObservedTraffic("other", hour, 1.0, 5.0)]
    )
    store.observe_traffic([ObservedTraffic("chat", hour, 30.0, 40.0)])  # later in the hour: replaced
    assert store.observed_traffic(hour) == [
        ObservedTraffic("chat", hour, 30.0, 40.0),
        ObservedTraffic("other", hour, 1.0, 5.0),
    ]
    store.observe_traffic([ObservedTraffic("chat", hour + timedelta(hours=1), 2.0, 10.0)])  # the next hour
    assert [o.app for o in store.observed_traffic(hour)] == ["other"]
    assert store.traffic("chat") == []
    with pytest.raises(InputError, match=re.escape("observed.minutes")):
        store.observe_traffic([ObservedTraffic("chat", hour, 1.0, 0.0)])


def test_traffic_is_replaced_by_app_and_hour_and_read_in_a_range(store: SqlStore) -> None:
    hours = [HOUR + timedelta(hours=h) for h in range(6)]
    store.add_traffic([TrafficHour("chat", h, 100.0 * i) for i, h in enumerate(hours)])
    store.add_traffic([TrafficHour("chat", hours[2], 999.0), TrafficHour("other", hours[2], 1.0)])
    assert [t.requests for t in store.traffic("chat")] == [0.0, 100.0, 999.0, 300.0, 400.0, 500.0]
    assert store.traffic("chat", since=hours[1], until=hours[3]) == [
        TrafficHour("chat", hours[1], 100.0),
        TrafficHour("chat", hours[2], 999.0),
    ]
    assert store.traffic("nobody") == []


def test_times_go_in_in_any_zone_and_come_back_in_utc(store: SqlStore) -> None:
    plus_two = timezone(timedelta(hours=2))
    store.add_traffic([TrafficHour("chat", datetime(2026, 3, 2, 11, tzinfo=plus_two), 5.0)])
    (back,) = store.traffic("chat")
    assert back.hour == HOUR
    assert back.hour.tzinfo is UTC
    with pytest.raises(InputError, match=re.escape("`traffic.hour` must be a timezone-aware hour")):
        store.add_traffic([TrafficHour("chat", datetime(2026, 3, 2, 9), 5.0)])
    with pytest.raises(
        ValueError, match="storage takes timezone-aware datetimes; got the naive 2026-03-02T09:00:00"
    ):
        store.save_profile("chat", b"x", through=datetime(2026, 3, 2, 9))
    assert store.profile("chat") is None


# --- jobs and their history ---------------------------------------------------------------


def test_jobs_are_added_once_and_listed_in_submission_order(store: SqlStore) -> None:
    for job_id in ("job-b", "job-a", "job-c"):
        store.add_job(queued_job(job_id))
    with pytest.raises(InputError, match=re.escape("`id` must be a job id not used before; got 'job-a'.")):
        store.add_job(queued_job("job-a"))
    assert [j.id for j in store.jobs()] == ["job-b", "job-a", "job-c"]
    assert store.job("job-a") == queued_job("job-a")
    assert store.job("nobody") is None

    store.set_estimate("job-c", JobEstimate(gpus=8, hours_p50=1.5, hours_p90=2.0))
    assert store.job("job-c") == replace(queued_job("job-c"), estimate=JobEstimate(8, 1.5, 2.0))
    with pytest.raises(
        InputError, match=re.escape("`job_id` must be the id of a submitted job; got 'nobody'.")
    ):
        store.set_estimate("nobody", JobEstimate(1, 1.0, 1.0))
    assert store.jobs([JobState.RUNNING]) == []
    assert [j.id for j in store.jobs([JobState.QUEUED, JobState.DONE])] == ["job-b", "job-a", "job-c"]


def _bundled_sample() -> pd.DataFrame:
    raw = pd.read_csv(BUNDLED_HISTORY, nrows=600)
    assert set(raw["kind"]) == {"training", "quantization"}
    typed = validate_history(raw, source="bundled sample")
    return typed.sort_values(["submit_time", "job_id"]).reset_index(drop=True)


def test_the_history_comes_back_as_the_forecasters_schema_accepts_it(store: SqlStore) -> None:
    assert validate_history(store.history(), source="empty store").empty
    sample = _bundled_sample()
    assert store.append_history(sample) == len(sample)
    assert store.append_history(sample.head(10)) == 0  # already there
    back = store.history()
    pd.testing.assert_frame_equal(validate_history(back, source="store"), sample)


def test_a_run_comes_back_as_it_was_stored(store: SqlStore) -> None:
    assert store.run() is None
    first = store.record_run(sample_run())
    assert first.id is not None and not first.committed
    assert store.run(first.id) == first
    review = store.record_run(
        replace(sample_run(), mode=RunMode.REVIEW, policy="full", bound=130.25, status="OPTIMAL")
    )
    later = store.record_run(sample_run(HOUR + timedelta(hours=1)))
    assert store.run() == later
    assert store.run(review.id) == review
    assert store.run(10_000) is None
    assert [r.id for r in store.runs()] == [later.id, review.id, first.id]
    assert store.runs(mode="review") == [review]
    assert [r.id for r in store.runs(mode=RunMode.PLAN, start=HOUR)] == [first.id]
    assert store.runs(limit=1) == [later]
    with pytest.raises(
        InputError, match=re.escape("`mode` must be one of ['plan', 'review', 'submit']; got 'nightly'.")
    ):
        store.runs(mode="nightly")


def test_each_hour_is_committed_once_and_starts_its_queued_jobs(store: SqlStore) -> None:
    store.add_job(queued_job("job-a"))
    store.add_job(queued_job("job-b"))
    first = store.record_run(sample_run(), sample_commit())
    assert first.committed
    job = store.job("job-a")
    assert job is not None
    assert (job.state, job.first_gpu, job.gpus, job.started_at) == (JobState.RUNNING, 0, 2, HOUR)
    assert store.job("job-b") == queued_job("job-b")  # not in the commit

    other = Commit(HOUR, None, (Assignment("job-a", (4, 5)), Assignment("job-b", (0, 1))))
    second = store.record_run(sample_run(objective=99.0), other)
    assert not second.committed
    assert store.run(second.id) == second
    assert store.commit(HOUR) == replace(sample_commit(), run_id=first.id)
    assert store.job("job-b") == queued_job("job-b")  # the refused commit started nothing
    assert store.job("job-a") == job

    # The next hour: job-a keeps running where it started; job-b starts.
    next_hour = HOUR + timedelta(hours=1)
    moved = Commit(next_hour, None, (Assignment("job-a", (2, 3)), Assignment("job-b", (4, 5))))
    third = store.record_run(sample_run(next_hour), moved)
    assert third.committed
    assert store.job("job-a") == job
    started_b = store.job("job-b")
    assert started_b is not None and (started_b.first_gpu, started_b.started_at) == (4, next_hour)

    assert store.commits() == [replace(sample_commit(), run_id=first.id), replace(moved, run_id=third.id)]
    assert store.commits(since=next_hour) == [replace(moved, run_id=third.id)]
    assert store.commits(until=next_hour) == [replace(sample_commit(), run_id=first.id)]
    assert store.last_commit() == replace(moved, run_id=third.id)
    assert store.last_commit(before=next_hour) == replace(sample_commit(), run_id=first.id)
    assert store.last_commit(before=HOUR) is None
    assert store.commit(HOUR + timedelta(hours=2)) is None


def test_a_job_that_came_in_during_the_hour_it_is_committed_for_starts_at_its_arrival(
    store: SqlStore,
) -> None:
    came = HOUR + timedelta(minutes=50)  # the hour is committed late, after the job came in
    store.add_job(replace(queued_job("job-a"), submitted_at=came))
    store.add_job(queued_job("job-b"))  # came in before the hour: starts at its top
    commit = Commit(HOUR, None, (Assignment("job-a", (0, 1)), Assignment("job-b", (2, 3))))
    assert store.record_run(sample_run(), commit).committed
    late, early = store.job("job-a"), store.job("job-b")
    assert late is not None and late.started_at == came
    assert early is not None and early.started_at == HOUR


def test_a_failing_record_leaves_nothing(store: SqlStore) -> None:
    store.add_job(queued_job())
    run = sample_run()
    broken = replace(run, forecasts=(*run.forecasts, run.forecasts[0]))  # one (app, hour) twice
    with pytest.raises(StoreError, match="refused the operation"):
        store.record_run(broken, sample_commit())
    assert store.runs() == []
    assert store.commits() == []
    assert store.job("job-a") == queued_job()
    assert store.record_run(run, sample_commit()).committed  # the hour is still free


def test_submits_and_their_run_are_stored_together_or_not_at_all(store: SqlStore) -> None:
    store.add_job(queued_job("job-b"))
    before = store.marks()
    promised = replace(queued_job("job-a"), promised_start=HOUR)
    with pytest.raises(InputError, match="job-b"):  # one id taken: nothing of the batch is stored
        store.record_submits([promised, queued_job("job-b")], sample_run())
    assert store.runs() == [] and store.marks() == before
    assert store.job("job-a") is None
    run = store.record_submits([promised, queued_job("job-c")], sample_run())
    assert store.runs() == [run] and store.job("job-a") == promised
    # the marks moved as one: the latest run is this one, two more jobs, nothing else
    assert store.marks() == (run.id, before[1] + 2, *before[2:])


def counted_jobs(store: SqlStore) -> tuple[int, int, int]:
    """The jobs, and the running and done ones, counted from the jobs table itself."""
    with store.engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT count(*), coalesce(sum(CASE WHEN state = 'running' THEN 1 ELSE 0 END), 0), "
                "coalesce(sum(CASE WHEN state = 'done' THEN 1 ELSE 0 END), 0) FROM jobs"
            )
        ).one()
    return int(row[0]), int(row[1]), int(row[2])


def test_the_marks_count_the_jobs_as_the_table_holds_them_whoever_writes(store: SqlStore) -> None:
    """The database keeps the jobs counted as they are written (``job_counts``): after every kind
    of write the store makes, a refused one, and plain SQL of another writer (a change of state,
    an update that changes none, a delete), the marks show what a count of the table finds."""

    def agrees() -> tuple[int, ...]:
        marks = store.marks()
        assert marks[1:4] == counted_jobs(store)
        return marks

    assert agrees()[1:4] == (0, 0, 0)
    store.add_jobs([queued_job("job-a"), queued_job("job-b")])
    agrees()
    with pytest.raises(InputError):  # one id taken: the batch is refused whole
        store.add_jobs([queued_job("job-c"), queued_job("job-a")])
    assert agrees()[1] == 2
    store.record_submits([queued_job("job-c")], sample_run())
    store.record_run(sample_run(), sample_commit())  # job-a starts
    assert agrees()[1:4] == (3, 1, 0)
    store.requeue_job("job-a")
    assert agrees()[2] == 0
    later = HOUR + timedelta(hours=1)
    store.record_run(sample_run(later), sample_commit(later))
    store.finish_job("job-a", later + timedelta(minutes=20), Outcome.OK, lambda job: None)
    assert agrees()[1:4] == (3, 0, 1)
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE jobs SET state = 'running' WHERE id = 'job-b'"))
        connection.execute(text("UPDATE jobs SET state = 'running' WHERE id = 'job-b'"))  # no change
        connection.execute(text("DELETE FROM jobs WHERE id = 'job-c'"))
    assert agrees()[1:4] == (2, 1, 1)


def test_an_upgraded_database_starts_its_job_counts_from_the_jobs_it_holds(db_url: str) -> None:
    store = SqlStore.open(db_url)
    try:
        store.add_jobs([queued_job("job-a"), queued_job("job-b"), queued_job("job-c")])
        store.record_run(sample_run(), sample_commit())  # job-a runs
        store.finish_job("job-a", HOUR + timedelta(minutes=30), Outcome.OK, lambda job: None)
        store.record_run(
            sample_run(HOUR + timedelta(hours=1)),
            replace(sample_commit(HOUR + timedelta(hours=1)), assignments=(Assignment("job-b", (0,)),)),
        )
    finally:
        store.close()
    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:  # back to the schema before the counts
            command.downgrade(alembic_config(connection), "0005")
    finally:
        engine.dispose()
    store = SqlStore.open(db_url)  # upgraded: the counts start from the rows
    try:
        assert store.marks()[1:4] == counted_jobs(store) == (3, 1, 1)
        store.add_job(queued_job("job-d"))
        assert store.marks()[1:4] == counted_jobs(store) == (4, 1, 1)
    finally:
        store.close()


def test_writers_on_two_connections_at_once_keep_the_job_counts(db_url: str) -> None:
    """Two stores (two connection pools, as two processes) insert jobs and move their states at
    once: every write lands, none waits on the other for good, and the counts are the table's."""
    stores = [SqlStore.open(db_url) for _ in range(2)]
    errors: list[BaseException] = []

    def write(store: SqlStore, name: str) -> None:
        try:
            for i in range(25):
                store.add_jobs([queued_job(f"{name}-{i}-a"), queued_job(f"{name}-{i}-b")])
                with store.engine.begin() as connection:
                    connection.execute(
                        text("UPDATE jobs SET state = 'running' WHERE id = :id"), {"id": f"{name}-{i}-a"}
                    )
                    connection.execute(
                        text("UPDATE jobs SET state = 'done' WHERE id = :id"), {"id": f"{name}-{i}-b"}
                    )
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    try:
        threads = [threading.Thread(target=write, args=(s, f"w{n}")) for n, s in enumerate(stores)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors
        assert stores[0].marks()[1:4] == counted_jobs(stores[0]) == (100, 50, 50)
    finally:
        for opened in stores:
            opened.close()


def test_a_submit_run_with_its_base_runs_forecasts_stores_a_copy_of_them(store: SqlStore) -> None:
    """The forecasts of a run made from a stored one are its: stored as a copy of its rows, read
    back the same as stored row by row; other forecasts, or a base pruned since, are stored
    from the run itself."""
    base = store.record_run(sample_run())
    later = HOUR + timedelta(hours=1)
    moved = tuple(replace(f, p90=f.p90 + 1) for f in base.forecasts)
    cases = [
        ("job-a", replace(sample_run(), forecasts=base.forecasts), base),  # copied
        ("job-b", replace(sample_run(), forecasts=moved), base),  # not the base's: inserted
        ("job-c", replace(sample_run(later), forecasts=base.forecasts), None),  # no base: inserted
    ]
    for job_id, run, source in cases:
        stored = store.record_submits([queued_job(job_id)], run, forecasts_of=source)
        assert stored.id is not None
        read = store.run(stored.id)
        assert read is not None and len(read.forecasts) == 24 and set(read.forecasts) == set(run.forecasts), (
            job_id
        )
    # the base pruned: nothing to copy, and the run's own rows are stored
    assert store.prune_runs(base.created_at + timedelta(seconds=1)) >= 1 and store.run(base.id) is None
    stored = store.record_submits(
        [queued_job("job-d")], replace(sample_run(later), forecasts=base.forecasts), forecasts_of=base
    )
    assert stored.id is not None
    read = store.run(stored.id)
    assert read is not None and set(read.forecasts) == set(base.forecasts)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"objective": float("nan")}, "`run.objective` must be a finite number; got nan."),
        (
            {"metrics": {"utilization": float("inf")}},
            "`run.metrics.utilization` must be a finite number; got inf.",
        ),
        ({"bound": float("inf")}, "`run.bound` must be a finite number; got inf."),
    ],
)
def test_a_run_with_a_non_finite_number_is_refused(
    store: SqlStore, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        store.record_run(replace(sample_run(), **change))
    assert store.runs() == []


def test_a_commit_must_be_a_whole_hour_with_one_entry_per_job(store: SqlStore) -> None:
    with pytest.raises(InputError, match=re.escape("`commit.hour` must be a timezone-aware hour")):
        store.record_run(sample_run(), replace(sample_commit(), hour=HOUR + timedelta(minutes=30)))
    twice = Commit(HOUR, None, (Assignment("job-a", (0,)), Assignment("job-a", (1,))))
    with pytest.raises(InputError, match=re.escape("`commit.assignments` must be one entry per job")):
        store.record_run(sample_run(), twice)
    assert store.runs() == []


def test_a_commit_before_the_latest_committed_hour_is_refused(store: SqlStore) -> None:
    later = HOUR + timedelta(hours=2)
    assert store.record_run(sample_run(later), sample_commit(later)).committed
    store.add_job(queued_job("job-a"))
    back = store.record_run(sample_run(), sample_commit())  # a clock stepped back two hours
    assert not back.committed
    assert [c.hour for c in store.commits()] == [later]
    assert store.job("job-a") == queued_job("job-a")  # the refused commit started nothing


def test_a_commit_and_its_delivery_are_stored_together_and_acknowledged_once(store: SqlStore) -> None:
    first = store.record_run(sample_run(), sample_commit(), deliver_to="jsonl")
    store.record_run(sample_run(HOUR + timedelta(hours=1)), sample_commit(HOUR + timedelta(hours=1)))
    pending = store.pending_deliveries("jsonl")
    assert [(d.item, d.state, d.attempts) for d in pending] == [
        (replace(sample_commit(), run_id=first.id), DeliveryState.PENDING, 0)
    ]
    assert store.pending_deliveries("memory") == []
    failed = store.record_delivery(pending[0], at=HOUR, acknowledged=False, error="feed not writable")
    assert (failed.state, failed.attempts, failed.last_error) == (
        DeliveryState.PENDING,
        1,
        "feed not writable",
    )
    done = store.record_delivery(pending[0], at=HOUR + timedelta(minutes=5), acknowledged=True)
    assert (done.state, done.attempts, done.last_error) == (DeliveryState.ACKNOWLEDGED, 2, None)
    assert done.acknowledged_at == HOUR + timedelta(minutes=5)
    assert store.pending_deliveries("jsonl") == []
    assert store.deliveries() == [done]


def test_pruning_deletes_old_runs_and_their_forecasts_and_keeps_every_commit(store: SqlStore) -> None:
    old = store.record_run(sample_run(), sample_commit(), deliver_to="jsonl")
    uncommitted = store.record_run(sample_run())
    recent_hour = HOUR + timedelta(days=40)
    recent = store.record_run(sample_run(recent_hour), sample_commit(recent_hour))
    assert store.prune_runs(before=HOUR + timedelta(days=30)) == 2
    assert [r.id for r in store.runs()] == [recent.id]
    assert old.id is not None and store.run(old.id) is None and store.run(uncommitted.id) is None
    with store.engine.connect() as connection:
        forecast_runs = {row[0] for row in connection.execute(text("SELECT run_id FROM run_forecasts"))}
    assert forecast_runs == {recent.id}
    assert store.commits() == [sample_commit(), replace(sample_commit(recent_hour), run_id=recent.id)]
    assert [d.item.hour for d in store.deliveries()] == [HOUR]
    assert store.prune_runs(before=HOUR + timedelta(days=30)) == 0


def test_the_outbox_revision_keeps_every_commit_its_assignments_and_amendments(db_url: str) -> None:
    store = SqlStore.open(db_url)
    try:
        stored = store.record_run(sample_run(), sample_commit())
        amendment = store.record_amendment(_late_addition(stored.id))
    finally:
        store.close()
    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "0003")  # the revision before the outbox's
    finally:
        engine.dispose()
    store = SqlStore.open(db_url)  # upgraded again: commits are copied, their children kept aside
    try:
        assert store.commits() == [replace(sample_commit(), run_id=stored.id)]
        assert store.amendments() == [amendment]
    finally:
        store.close()


def _late_addition(run_id: int | None) -> Amendment:
    """An amendment of HOUR at :30: GPU 7 for the commit's real-time app."""
    return Amendment(HOUR, 0, HOUR + timedelta(minutes=30), run_id, (Assignment("job-late", (7,)),))


def test_an_amendment_is_delivered_through_the_outbox_after_its_commit(store: SqlStore) -> None:
    run = store.record_run(sample_run(), sample_commit(), deliver_to="jsonl")
    amendment = store.record_amendment(_late_addition(run.id), deliver_to="jsonl")
    pending = store.pending_deliveries("jsonl")
    assert [d.item for d in pending] == [replace(sample_commit(), run_id=run.id), amendment]
    assert [d.item.key for d in pending] == [f"{HOUR.isoformat()}#0", f"{HOUR.isoformat()}#1"]
    store.record_delivery(pending[1], at=HOUR, acknowledged=True)
    assert [d.item for d in store.pending_deliveries("jsonl")] == [replace(sample_commit(), run_id=run.id)]
    # Pruned, the run's amendment stays with its hour, its run forgotten.
    assert store.prune_runs(before=HOUR + timedelta(days=30)) == 1
    assert store.amendments() == [replace(amendment, run_id=None)]


def test_a_running_job_goes_back_to_the_queue_holding_nothing(store: SqlStore) -> None:
    store.add_job(queued_job("job-a"))
    store.record_run(sample_run(), sample_commit())
    requeued = store.requeue_job("job-a")
    assert requeued == store.job("job-a") == queued_job("job-a")
    with pytest.raises(InputError, match=re.escape("`job_id` must be a running job; got 'job-a (queued)'.")):
        store.requeue_job("job-a")
    # Committed again in the next hour, it starts there.
    next_hour = HOUR + timedelta(hours=1)
    store.record_run(sample_run(next_hour), Commit(next_hour, None, (Assignment("job-a", (2, 3)),)))
    job = store.job("job-a")
    assert job is not None and (job.state, job.first_gpu, job.started_at) == (JobState.RUNNING, 2, next_hour)
