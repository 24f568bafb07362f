"""The storage contract across stores and processes: the cycle lock, races for one hour, and
kill -9 inside a write, on a SQLite file and on a PostgreSQL server (the fixtures as in
tests/storage/test_storage.py)."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event

from storage.sql import SqlStore
from tests.storage_children import (
    HOUR,
    SPAWN,
    die_holding_lock,
    die_inside_record_run,
    queued_job,
    race_to_commit,
    sample_commit,
    sample_run,
    spawn,
)
from tests.waiting import wait_until

# --- two stores, two processes, kill -9 ---------------------------------------------------


def test_the_cycle_lock_excludes_a_second_store(db_url: str) -> None:
    first, second = SqlStore.open(db_url), SqlStore.open(db_url)
    try:
        with first.cycle_lock("plan") as held:
            assert held
            with second.cycle_lock("plan") as also:
                assert not also
            with second.cycle_lock("review") as other_name:
                assert other_name
        with second.cycle_lock("plan") as held_after:
            assert held_after
    finally:
        first.close()
        second.close()


def test_the_cycle_lock_of_a_killed_process_is_free_again(db_url: str) -> None:
    child = spawn(die_holding_lock, db_url, "plan")
    child.join(60)
    assert child.exitcode == -9  # it died holding the lock
    store = SqlStore.open(db_url)
    try:

        def free() -> bool:
            with store.cycle_lock("plan") as held:
                return held

        # PostgreSQL ends the dead client's session asynchronously.
        wait_until(free, "the dead process's lock is free", timeout_s=10, every_s=0.05)
    finally:
        store.close()


def test_an_expired_sqlite_lock_is_taken_over(sqlite_url: str) -> None:
    brief, other = SqlStore.open(sqlite_url, lock_ttl=timedelta(0)), SqlStore.open(sqlite_url)
    try:
        with brief.cycle_lock("plan") as held, other.cycle_lock("plan") as taken_over:
            assert held and taken_over
    finally:
        brief.close()
        other.close()


def test_two_processes_racing_for_one_hour_on_a_new_database_commit_it_once(db_url: str) -> None:
    # From an empty database: the two also race to create the schema, as two daemons started at once would.
    barrier, results = SPAWN.Barrier(2), SPAWN.Queue()
    children = [spawn(race_to_commit, db_url, HOUR, barrier, results) for _ in range(2)]
    outcomes = [results.get(timeout=120) for _ in children]
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    assert sorted(committed for _, committed in outcomes) == [False, True]
    store = SqlStore.open(db_url)
    try:
        (winner,) = [run_id for run_id, committed in outcomes if committed]
        assert store.commits() == [replace(sample_commit(), run_id=winner)]
        assert sorted(r.id for r in store.runs()) == sorted(run_id for run_id, _ in outcomes)  # type: ignore[type-var]
    finally:
        store.close()


def test_the_hour_key_stops_a_commit_that_checked_before_the_other_committed(
    db_url: str, request: pytest.FixtureRequest
) -> None:
    """The winner pauses after inserting its commit; the loser checks, finds no commit,
    tries to insert its own and must wait; once the winner commits, the loser's run is
    stored uncommitted (PostgreSQL: the unique hour; SQLite: the write lock)."""
    winner, loser = SqlStore.open(db_url), SqlStore.open(db_url)
    paused, resume = threading.Event(), threading.Event()

    def pause_after_the_commit_insert(*args: Any) -> None:
        if args[2].lstrip().upper().startswith("INSERT INTO COMMITS"):
            paused.set()
            resume.wait(60)

    event.listen(winner.engine, "after_cursor_execute", pause_after_the_commit_insert)
    results: dict[str, bool] = {}
    try:
        first = threading.Thread(
            target=lambda: results.update(a=winner.record_run(sample_run(), sample_commit()).committed)
        )
        first.start()
        assert paused.wait(60)
        asking = threading.Event()  # the loser is at BEGIN IMMEDIATE, which waits for the winner's lock
        event.listen(
            loser.engine,
            "before_cursor_execute",
            lambda *args: args[2].startswith("BEGIN IMMEDIATE") and asking.set(),
        )
        second = threading.Thread(
            target=lambda: results.update(b=loser.record_run(sample_run(), sample_commit()).committed)
        )
        second.start()
        if loser.dialect == "postgresql":
            server = request.getfixturevalue("pg_server")
            wait_until(
                lambda: server.waiting_on_locks(db_url),
                "the loser waits on the winner's lock",
                30,
                every_s=0.02,
            )
        else:
            assert asking.wait(60)
        resume.set()
        first.join(60)
        second.join(60)
        assert results == {"a": True, "b": False}
        assert len(winner.runs()) == 2
        assert [c.run_id for c in winner.commits()] == [min(r.id for r in winner.runs())]  # type: ignore[type-var]
    finally:
        resume.set()
        winner.close()
        loser.close()


@pytest.mark.parametrize("statement", ["INSERT INTO PLAN_RUNS", "INSERT INTO COMMITS", "UPDATE JOBS"])
def test_kill_9_inside_a_record_leaves_no_half_written_run(db_url: str, statement: str) -> None:
    store = SqlStore.open(db_url)
    try:
        store.add_job(queued_job())
        child = spawn(die_inside_record_run, db_url, statement)
        child.join(60)
        assert child.exitcode == -9  # killed right after the statement ran, before its COMMIT
        assert store.runs() == []
        assert store.commits() == []
        assert store.job("job-a") == queued_job()
        again = store.record_run(sample_run(), sample_commit())  # the next cycle carries on
        assert again.committed
        assert store.commits() == [replace(sample_commit(), run_id=again.id)]
    finally:
        store.close()


def test_one_store_leads_on_postgresql_until_it_lets_go(db_url: str) -> None:
    first, second = SqlStore.open(db_url), SqlStore.open(db_url)
    try:
        postgres = first.dialect == "postgresql"
        assert first.leader() is None
        assert first.still_leads() is not postgres  # SQLite: every daemon may act
        with first.leadership("host-a:1") as leads:
            assert leads and first.still_leads()
            with second.leadership("host-b:2") as also:
                assert also is not postgres  # SQLite: every daemon works, under the cycle lock
            assert second.leader() == ("host-a:1" if postgres else None)
        assert second.leader() is None
        with second.leadership("host-b:2") as leads:
            assert leads
            assert first.leader() == ("host-b:2" if postgres else None)
    finally:
        first.close()
        second.close()
