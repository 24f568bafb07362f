"""The service end to end on a real SQLite file: cycles, commits, submit, done, status, export."""

from __future__ import annotations

import itertools
import json
import logging
import pickle
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from contract.errors import InputError
from contract.records import Amendment, Assignment, Commit, JobState, Outcome, TrafficHour
from contract.scenario_io import parse_scenario
from gpuplan.app.adapters.executors import InMemoryExecutor, JsonLinesExecutor, default_feed
from gpuplan.app.adapters.executors.registry import make_executor
from gpuplan.app.adapters.executors.simulated import ActualRun, SimulatedCluster
from gpuplan.app.core.bridge import column_commit
from gpuplan.app.core.config import demo_config
from gpuplan.app.cycle.outbox import deliver_pending
from gpuplan.app.cycle.tick import load_profile, next_unseen_hour, plan_cycle, recalibrate
from gpuplan.app.lab.demo import demo_world
from gpuplan.app.lab.seed import demo_durations, ensure_service
from scheduler.check import check_plan
from storage.factory import open_store
from tests.service_fixtures import Result, _in_tmp_path, models_dir, quick_config, run_cli

__all__ = ["_in_tmp_path", "models_dir"]

T0 = datetime(2026, 11, 30, 10, 5, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gpuplan.db'}"


def _once(db: str, models: Path, at: datetime) -> None:
    result = run_cli("daemon", "--once", "--db", db, "--models", models, "--at", at.isoformat())
    assert result.code == 0, result.err
    assert "cycle hour=" in result.out


def _export(db: str, out: Path, run: str = "latest") -> tuple[dict, dict, dict]:
    result = run_cli("export", run, "--db", db, "--out", out)
    assert result.code == 0, result.err
    return tuple(json.loads((out / name).read_text()) for name in ("scenario.json", "plan.json", "run.json"))  # type: ignore[return-value]


def _commit_rows(db: str) -> list[dict]:
    result = run_cli("report", "commits", "--db", db, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_first_cycle_on_an_empty_database_commits_column_zero_of_a_legal_plan(
    tmp_path: Path, models_dir: Path
) -> None:
    db = _db(tmp_path)
    _once(db, models_dir, T0)
    scenario, plan, run = _export(db, tmp_path / "export")
    instance = parse_scenario(scenario, source="exported")
    assert instance.gpus == 16 and len(instance.realtime_jobs) == 2 and instance.queued_jobs
    assert check_plan(instance, plan["grid"]) == []
    assert run["start"] == "2026-11-30T10:00:00+00:00" and run["committed"] is True
    store = open_store(db)
    try:
        commit = store.commit(datetime(2026, 11, 30, 10, tzinfo=UTC))
    finally:
        store.close()
    assert commit is not None
    assert commit.assignments == column_commit(plan["grid"], commit.hour).assignments
    assert commit.assignments  # the demo starts work in its first hour


def test_a_second_cycle_in_the_hour_replans_from_the_next_hour_and_commits_nothing(
    tmp_path: Path, models_dir: Path
) -> None:
    db = _db(tmp_path)
    _once(db, models_dir, T0)
    first = open_store(db)
    try:
        committed = first.commits()
    finally:
        first.close()
    _once(db, models_dir, T0 + timedelta(minutes=35))
    scenario, plan, run = _export(db, tmp_path / "again")
    assert run["start"] == "2026-11-30T11:00:00+00:00" and run["committed"] is False
    assert check_plan(parse_scenario(scenario), plan["grid"]) == []
    store = open_store(db)
    try:
        assert store.commits() == committed
        assert len(store.runs(limit=10)) == 2
    finally:
        store.close()


def test_committed_jobs_keep_their_gpus_in_the_next_hour(tmp_path: Path, models_dir: Path) -> None:
    db = _db(tmp_path)
    _once(db, models_dir, T0)
    _, first_plan, _ = _export(db, tmp_path / "h10")
    _once(db, models_dir, T0 + HOUR)
    scenario, plan, run = _export(db, tmp_path / "h11")
    assert run["start"] == "2026-11-30T11:00:00+00:00" and run["committed"] is True
    instance = parse_scenario(scenario)
    assert check_plan(instance, plan["grid"]) == []
    batch = {job.id for job in instance.batch_jobs}
    started = {row[0] for row in first_plan["grid"] if row[0] is not None and row[0] in batch}
    assert started, "the first hour started no batch job"
    for job in started:
        before = [g for g, row in enumerate(first_plan["grid"]) if row[0] == job]
        if job in instance.running_batch:  # still running: pinned on the same block
            assert [g for g, row in enumerate(plan["grid"]) if row[0] == job] == before
    rows = _commit_rows(db)
    assert {row["hour"] for row in rows} == {"2026-11-30T10:00:00+00:00", "2026-11-30T11:00:00+00:00"}


def test_real_time_gpus_change_across_cycles_within_the_swap_cap(tmp_path: Path, models_dir: Path) -> None:
    db = _db(tmp_path)
    for hour in range(4):
        _once(db, models_dir, T0 + hour * HOUR)
    store = open_store(db)
    try:
        commits = store.commits()
        caps = {app.id: app.swap_cap for app in store.apps()}
    finally:
        store.close()
    assert len(commits) == 4
    for before, after in itertools.pairwise(commits):
        held_before = {a.job: set(a.gpus) for a in before.assignments}
        held_after = {a.job: set(a.gpus) for a in after.assignments}
        for app, cap in caps.items():
            changed = held_before.get(app, set()) ^ held_after.get(app, set())
            assert len(changed) <= cap, (app, before.hour, changed)


def _submit(tmp_path: Path, db: str, models_dir: Path, spec: dict[str, object], *flags: str) -> Result:
    """``gpuplan submit`` at ``T0`` of a 2-hour batch inference job with ``spec``'s fields."""
    path = tmp_path / f"{spec['id']}.yaml"
    path.write_text(yaml.safe_dump({"kind": "batch_inference", "hours": 2, **spec}))
    return run_cli("submit", path, "--db", db, "--models", models_dir, *flags, "--at", T0.isoformat())


def test_submit_answers_with_a_planned_start_and_a_bad_spec_stores_nothing(
    tmp_path: Path, models_dir: Path
) -> None:
    db = _db(tmp_path)
    _once(db, models_dir, T0)
    result = _submit(tmp_path, db, models_dir, {"id": "bi-1", "priority": 95, "gpus": 4}, "--json")
    assert result.code == 0, result.err
    answer = json.loads(result.out)
    keys = {"job", "gpus", "hours_p50", "hours_p90", "planned_start", "promised_start", "first_gpu", "reason"}
    assert set(answer) == keys
    assert answer["job"] == "bi-1" and answer["gpus"] == 4 and answer["hours_p90"] == 2
    assert answer["planned_start"] is not None and answer["first_gpu"] % 4 == 0
    assert datetime.fromisoformat(answer["planned_start"]) >= datetime(2026, 11, 30, 11, tzinfo=UTC)
    store = open_store(db)
    try:  # the start promised at submit is kept; nothing arrived before it, so it is the plan's
        promised = store.job("bi-1")
        assert promised is not None
        assert promised.promised_start == datetime.fromisoformat(answer["promised_start"])
        assert answer["promised_start"] == answer["planned_start"]
    finally:
        store.close()

    result = _submit(tmp_path, db, models_dir, {"id": "bi-2", "priority": 5, "gpus": 3})
    assert result.code == 2
    assert "`gpus` must be a power of two" in result.err
    store = open_store(db)
    try:
        assert store.job("bi-2") is None
        assert store.job("bi-1") is not None
    finally:
        store.close()


def test_a_cycle_a_month_after_a_promise_still_plans_and_commits_the_waiting_job(
    tmp_path: Path, models_dir: Path
) -> None:
    db = _db(tmp_path)
    _once(db, models_dir, T0)
    submitted = _submit(tmp_path, db, models_dir, {"id": "bi-old", "priority": 95, "gpus": 4}, "--json")
    assert submitted.code == 0, submitted.err
    promised = datetime.fromisoformat(json.loads(submitted.out)["promised_start"])
    # The daemon was down for a month: the job still waits, its promise 31 days past.
    later = T0 + timedelta(days=31)
    assert (later - promised) / HOUR > 672
    _once(db, models_dir, later)
    scenario, plan, run = _export(db, tmp_path / "later")
    assert run["committed"] is True and run["start"] == "2026-12-31T10:00:00+00:00"
    instance = parse_scenario(scenario)
    assert check_plan(instance, plan["grid"]) == []
    (job,) = [job for job in instance.batch_jobs if job.id == "bi-old"]
    # carried at the oldest promise a scenario takes: broken whatever the start, as it is
    assert job.promise_step == -672
    assert instance.promise_cost(job, 0) > 0
    store = open_store(db)
    try:
        commit = store.last_commit()
    finally:
        store.close()
    assert commit is not None and commit.hour == datetime(2026, 12, 31, 10, tzinfo=UTC)
    assert any("bi-old" in row for row in plan["grid"])  # and the waiting job is planned


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"id": "x", "kind": "training", "priority": float("nan")}, "priority"),
        ({"id": "x y", "kind": "training"}, "id"),
        ({"id": "x", "kind": "realtime"}, "kind"),
        ({"id": "x", "kind": "batch_inference", "gpus": 2}, "hours"),
        ({"id": "x", "kind": "training", "variant": "full_sft"}, "params_billion"),
    ],
)
def test_malformed_submissions_exit_2_naming_the_field(
    tmp_path: Path, models_dir: Path, spec: dict, field: str
) -> None:
    db = _db(tmp_path)
    _once(db, models_dir, T0)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = run_cli("submit", path, "--db", db, "--models", models_dir)
    assert result.code == 2
    assert f"`{field}" in result.err or field in result.err
    store = open_store(db)
    try:
        assert store.job("x") is None and store.job("x y") is None
    finally:
        store.close()


def test_done_frees_the_gpus_at_the_next_cycle_and_enters_the_history(
    tmp_path: Path, models_dir: Path
) -> None:
    db = _db(tmp_path)
    _once(db, models_dir, T0)
    status = json.loads(run_cli("status", "--db", db, "--json").out)
    assert status["running"], "the first cycle started nothing"
    job = next(r for r in status["running"] if r["job"].startswith("demo-training"))
    store = open_store(db)
    try:
        history_before = len(store.history())
    finally:
        store.close()
    result = run_cli("done", job["job"], "--db", db, "--at", (T0 + timedelta(minutes=30)).isoformat())
    assert result.code == 0, result.err
    _once(db, models_dir, T0 + HOUR)
    scenario, plan, _ = _export(db, tmp_path / "after")
    assert job["job"] not in {j["id"] for j in scenario["jobs"]}
    assert all(job["job"] not in row for row in plan["grid"])
    store = open_store(db)
    try:
        done = store.job(job["job"])
        assert done is not None and done.state is JobState.DONE
        assert len(store.history()) == history_before + 1
    finally:
        store.close()
    again = run_cli("done", job["job"], "--db", db)
    assert again.code == 2 and "already done" in again.err


def test_status_json_has_the_documented_shape(tmp_path: Path, models_dir: Path) -> None:
    db = _db(tmp_path)
    _once(db, models_dir, T0)
    status = json.loads(run_cli("status", "--db", db, "--json", "--at", T0.isoformat()).out)
    assert set(status) == {"at", "running", "queue", "last_run", "leader", "gpu_map"}
    assert status["leader"] is None  # SQLite: no standby, so no leader to name
    assert status["gpu_map"] is None  # no Slurm partition read
    batch = {"job", "kind", "team", "gpus", "since", "time_limit", "overrun"}
    assert all(set(r) in ({"job", "kind", "team", "gpus", "since"}, batch) for r in status["running"])
    assert any(set(r) == batch for r in status["running"])
    assert all(
        set(q) == {"job", "team", "priority", "gpus", "planned_start", "reason"} for q in status["queue"]
    )
    assert all(q["reason"] for q in status["queue"])
    assert status["last_run"]["start"] == "2026-11-30T10:00:00+00:00"


def test_the_json_lines_executor_appends_one_line_per_job(tmp_path: Path, models_dir: Path) -> None:
    store = open_store(_db(tmp_path))
    try:
        config = quick_config(models_dir)
        ensure_service(store, config, T0)
        executor = JsonLinesExecutor(tmp_path / "commits.jsonl")
        report = plan_cycle(store, T0, config, executor)
        again = plan_cycle(store, T0 + timedelta(minutes=30), config, executor)
        commit = store.commit(report.hour)
    finally:
        store.close()
    assert report.committed and not again.committed
    lines = [json.loads(line) for line in (tmp_path / "commits.jsonl").read_text().splitlines()]
    assert commit is not None
    assert lines == [
        {"hour": commit.hour.isoformat(), "seq": 0, "job": a.job, "gpus": list(a.gpus)}
        for a in commit.assignments
    ]


def test_the_json_lines_executor_skips_what_it_already_holds(tmp_path: Path) -> None:
    feed = tmp_path / "feed.jsonl"
    hour = datetime(2026, 11, 30, 10, tzinfo=UTC)
    commit = Commit(hour, 1, (Assignment("job-a", (0, 1)), Assignment("job-b", (2,))))
    # A crash cut the commit's write short: one whole line and half of the next.
    whole = json.dumps({"hour": hour.isoformat(), "seq": 0, "job": "job-a", "gpus": [0, 1]})
    feed.write_text(whole + "\n" + '{"hour": "2026-', encoding="utf-8")
    assert JsonLinesExecutor(feed).deliver(commit)
    executor = JsonLinesExecutor(feed)
    assert executor.deliver(commit) and executor.deliver(commit)  # re-sent: nothing changes
    later = Commit(hour + HOUR, 2, (Assignment("job-a", (0, 1)),))
    assert executor.deliver(later)
    lines = feed.read_text(encoding="utf-8").splitlines()
    assert lines[0] == whole and lines[1] == '{"hour": "2026-'
    assert [json.loads(line)["job"] for line in lines[2:]] == ["job-b", "job-a"]
    assert [json.loads(line)["hour"] for line in lines[2:]] == [hour.isoformat(), (hour + HOUR).isoformat()]


def test_a_cycle_before_the_latest_committed_hour_commits_nothing_and_says_why(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = _db(tmp_path)
    _once(db, models_dir, T0)  # 10:05
    _once(db, models_dir, T0 + HOUR)  # 11:05
    with caplog.at_level(logging.WARNING):
        back = run_cli("daemon", "--once", "--db", db, "--models", models_dir, "--at", "2026-11-30T09:00Z")
    assert back.code == 0, back.err
    assert "committed=false" in back.out
    assert "start=2026-11-30T12:00:00+00:00" in back.out  # planned from the latest committed state
    assert "before the latest committed hour 2026-11-30T11:00:00+00:00" in caplog.text
    store = open_store(db)
    try:
        hours = [c.hour.hour for c in store.commits()]
        running = {job.id: job.started_at for job in store.jobs([JobState.RUNNING])}
    finally:
        store.close()
    assert hours == [10, 11]
    assert all(started is not None and started.hour in (10, 11) for started in running.values())


def test_each_database_has_its_own_feed_named_at_start(tmp_path: Path, models_dir: Path) -> None:
    feeds = {}
    for name in ("demo", "other"):
        result = run_cli(
            "daemon",
            "--once",
            "--db",
            f"sqlite:///{tmp_path / name}.db",
            "--models",
            models_dir,
            "--at",
            T0.isoformat(),
        )
        assert result.code == 0, result.err
        feed = tmp_path / f"{name}.commits.jsonl"
        assert f"commits go to the JSON-lines feed {feed}" in result.err
        feeds[name] = [json.loads(line) for line in feed.read_text(encoding="utf-8").splitlines()]
    assert feeds["demo"] and feeds["other"]
    assert not (tmp_path / "var" / "commits.jsonl").exists()
    store = open_store(f"sqlite:///{tmp_path / 'other'}.db")
    try:
        other = store.commits()
    finally:
        store.close()
    assert [(line["hour"], line["job"]) for line in feeds["other"]] == [
        (c.hour.isoformat(), a.job) for c in other for a in c.assignments
    ]


def test_an_in_memory_or_server_database_gets_a_feed_of_its_own() -> None:
    memory = open_store("sqlite://")
    try:
        assert default_feed(memory) is None
        assert make_executor(demo_config(), memory).name == "memory"
    finally:
        memory.close()


def test_a_missing_or_garbage_traffic_hour_is_skipped_and_logged(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(_db(tmp_path))
    try:
        config = demo_config(models_dir)
        ensure_service(store, config, T0)
        app = store.apps()[0].id
        profile = load_profile(store, app)
        assert profile is not None
        first = next_unseen_hour(profile)
        # first: a good hour; first+1: missing; first+2: not a count; first+3: good
        store.add_traffic(
            [
                TrafficHour(app, first, 10.0),
                TrafficHour(app, first + 2 * HOUR, -40.0),
                TrafficHour(app, first + 3 * HOUR, 12.0),
            ]
        )
        with caplog.at_level(logging.WARNING, logger="gpuplan.app.cycle.tick"):
            updated = recalibrate(store, first + 4 * HOUR, config)
        after = load_profile(store, app)
    finally:
        store.close()
    assert app in updated
    assert after is not None and next_unseen_hour(after) == first + 4 * HOUR
    messages = " ".join(record.getMessage() for record in caplog.records)
    assert f"no traffic for {(first + HOUR).isoformat()}" in messages
    assert "is not a count" in messages


def test_in_memory_executor_gets_each_committed_hour_once(tmp_path: Path, models_dir: Path) -> None:
    store = open_store(_db(tmp_path))
    executor = InMemoryExecutor()
    try:
        config = quick_config(models_dir)
        ensure_service(store, config, T0)
        for minutes in (0, 30, 60, 90, 120):
            plan_cycle(store, T0 + timedelta(minutes=minutes), config, executor)
    finally:
        store.close()
    assert [c.hour.hour for c in executor.commits] == [10, 11, 12]


def test_ingested_traffic_recalibrates_the_profile_and_an_unknown_app_is_refused(
    tmp_path: Path, models_dir: Path
) -> None:
    db = _db(tmp_path)
    _once(db, models_dir, T0)
    store = open_store(db)
    try:
        app = store.apps()[0].id
        profile = load_profile(store, app)
        assert profile is not None
        first = next_unseen_hour(profile)
    finally:
        store.close()
    hours = int((datetime(2026, 11, 30, 11, tzinfo=UTC) - first) / HOUR)
    csv = tmp_path / "traffic.csv"
    csv.write_text(
        "hour,requests\n"
        + "".join(f"{(first + n * HOUR).strftime('%Y-%m-%dT%H:%M')},{10 + n % 7}\n" for n in range(hours))
    )
    result = run_cli("ingest", app, "--traffic", csv, "--db", db)
    assert result.code == 0, result.err
    assert f"stored {hours} hours" in result.out
    _once(db, models_dir, T0 + HOUR)  # recalibrates on every hour before 11:00
    store = open_store(db)
    try:
        after = load_profile(store, app)
    finally:
        store.close()
    assert after is not None and next_unseen_hour(after) == datetime(2026, 11, 30, 11, tzinfo=UTC)
    unknown = run_cli("ingest", "no-such-app", "--traffic", csv, "--db", db)
    assert unknown.code == 2 and "`APP` must be one of the stored apps" in unknown.err


@pytest.mark.parametrize("argv", [["status"], ["export", "latest", "--out", "out"], ["done", "job-x"]])
def test_commands_on_a_missing_database_exit_2_and_create_none(tmp_path: Path, argv: list[str]) -> None:
    db = tmp_path / "nowhere" / "gpuplan.db"
    result = run_cli(*argv, "--db", f"sqlite:///{db}")
    assert result.code == 2
    assert "`--db` must be the URL of an existing database" in result.err
    assert not db.exists() and not (tmp_path / "out").exists()


@pytest.mark.postgres
def test_a_server_database_feeds_a_file_named_by_its_url(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        feed = default_feed(store)
    finally:
        store.close()
    assert feed is not None and feed.parent == Path("var/feeds")
    assert feed.name.startswith("postgresql-") and feed.name.endswith(".commits.jsonl")
    # Another database on the same server is another feed.
    other = open_store(pg_url.rsplit("/", 1)[0] + "/postgres")
    try:
        assert default_feed(other) != feed
    finally:
        other.close()


def test_a_stored_profile_that_is_not_json_is_refused_and_refitted_never_loaded(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = _db(tmp_path)
    _once(db, models_dir, T0)
    store = open_store(db)
    try:
        app = store.apps()[0].id
        profile = load_profile(store, app)
        assert profile is not None and store.profile(app).startswith(b"{")  # type: ignore[union-attr]
        through = store.profile_through(app)
        assert through is not None
        store.save_profile(app, pickle.dumps(profile), through=through)  # as an older version kept it
        with pytest.raises(InputError, match=re.escape("It is a pickle, which gpuplan never loads")):
            load_profile(store, app)
    finally:
        store.close()
    # The next cycle never loads it: it fits a new profile on the stored traffic instead.
    with caplog.at_level(logging.WARNING, logger="gpuplan.app.cycle.tick"):
        _once(db, models_dir, T0 + HOUR)
    assert "It is a pickle, which gpuplan never loads" in caplog.text
    assert "The next recalibration fits a new one on the app's stored traffic" in caplog.text
    store = open_store(db)
    try:
        refitted = load_profile(store, app)
        stored = store.profile(app)
    finally:
        store.close()
    assert refitted is not None and stored is not None and stored.startswith(b"{")


def test_prune_deletes_old_runs_and_keeps_commits_and_history(tmp_path: Path, models_dir: Path) -> None:
    db = _db(tmp_path)
    for hours in (0, 1, 2):
        _once(db, models_dir, T0 + hours * HOUR)
    assert run_cli("prune", "--db", db, "--keep-days", "0").code == 2  # refused before any work
    store = open_store(db)
    try:
        commits, history = store.commits(), store.history()
        runs = store.runs(limit=100)
    finally:
        store.close()
    at = (T0 + timedelta(days=30, hours=1, minutes=30)).isoformat()
    result = run_cli("prune", "--db", db, "--keep-days", "30", "--at", at)
    assert result.code == 0, result.err
    assert f"pruned {len(runs) - 1} plan run(s)" in result.out  # the runs of hours 10 and 11
    store = open_store(db)
    try:
        kept = store.runs(limit=100)
        after = store.commits()
        assert store.history().equals(history)
    finally:
        store.close()
    assert [r.id for r in kept] == [runs[0].id]
    assert [(c.hour, c.assignments) for c in after] == [(c.hour, c.assignments) for c in commits]
    assert [c.run_id for c in after] == [None, None, runs[0].id]
    _once(db, models_dir, T0 + 3 * HOUR)  # the service goes on from the kept state
    bad = tmp_path / "bad.yaml"
    bad.write_text("prune_keep_days: 0\n")
    refused = run_cli("daemon", "--once", "--db", db, "--config", bad)
    assert (
        refused.code == 2 and "`prune_keep_days` must be a whole number of days in [1, 36500]" in refused.err
    )


def test_the_simulated_cluster_starts_each_job_once_and_ends_it_after_its_actual_hours() -> None:
    hour = datetime(2026, 11, 30, 10, tzinfo=UTC)
    runs = {"a": ActualRun(1.5), "b": ActualRun(0.5, Outcome.FAILED)}
    inner = InMemoryExecutor()
    cluster = SimulatedCluster(runs.get, inner)
    first = Commit(hour, 1, (Assignment("a", (0, 1)), Assignment("chat", (7,))))
    assert cluster.deliver(first) and cluster.deliver(first)  # re-sent: nothing changes
    second = Commit(hour + HOUR, 2, (Assignment("a", (0, 1)), Assignment("b", (2,))))
    assert cluster.deliver(second)
    assert cluster.name == "memory" and inner.commits == [first, second] == cluster.commits
    assert cluster.started == {"a": hour, "b": hour + HOUR} and cluster.gpus == {"a": 2, "b": 1}
    assert cluster.ended(hour + HOUR) == []
    assert cluster.ended(hour + 2 * HOUR) == [
        (hour + 1.5 * HOUR, "a", Outcome.OK),
        (hour + 1.5 * HOUR, "b", Outcome.FAILED),
    ]
    assert cluster.next_end() is None and cluster.ended(hour + 9 * HOUR) == []


def test_a_job_committed_after_it_came_in_runs_from_its_arrival_and_an_amendment_starts_it_when_made() -> (
    None
):
    hour = datetime(2026, 11, 30, 10, tzinfo=UTC)
    came = hour + timedelta(minutes=50)  # the hour is committed at 10:55, after the job came in
    runs = {"late": ActualRun(0.1, not_before=came), "amended": ActualRun(1.0)}
    cluster = SimulatedCluster(runs.get)
    assert cluster.deliver(Commit(hour, 1, (Assignment("late", (0,)),)))
    amendment = Amendment(hour, 1, hour + timedelta(minutes=30), 1, (Assignment("amended", (1, 2)),))
    assert cluster.amend(amendment) and cluster.amend(amendment)  # re-sent: nothing changes
    assert cluster.started == {"late": came, "amended": hour + timedelta(minutes=30)}
    assert cluster.amendments == [amendment]
    assert cluster.ended(hour + 2 * HOUR) == [
        (came + timedelta(hours=0.1), "late", Outcome.OK),
        (hour + timedelta(minutes=90), "amended", Outcome.OK),
    ]


def test_new_jobs_keep_arriving_in_the_demo_drawn_from_the_bundled_history(
    tmp_path: Path, models_dir: Path
) -> None:
    """The demo's seeded queue starts within hours; later in the day the demo world has
    submitted new jobs, at their drawn times, each once (a second world on the same store
    submits none of them again), and they start."""
    store = open_store(_db(tmp_path))
    try:
        config = replace(demo_config(models_dir), plan_budget_ms=100.0, plan_wall_clock=False)
        ensure_service(store, config, T0)
        seeded = {job.id for job in store.jobs()}
        world = demo_world(store, config)
        assert world.arrivals is not None
        for k in range(24):  # twelve hours, a cycle every 30 minutes
            now = T0 + k * timedelta(minutes=30)
            world.advance(store, now)
            plan_cycle(store, now, config, world.cluster)
        arrived = [job for job in store.jobs() if job.id not in seeded]
        demo_world(store, config).advance(store, now)  # a restarted demo
        again = [job for job in store.jobs() if job.id not in seeded]
    finally:
        store.close()
    drawn = {job.id: at for w in world.arrivals.weeks.values() for at, job in w}
    assert arrived, "no job arrived in twelve simulated hours"
    assert [job.id for job in again] == [job.id for job in arrived]
    for job in arrived:
        assert job.id.startswith("arrival-") and T0 < job.submitted_at <= now
        assert job.submitted_at == drawn[job.id]
    due = {job_id for job_id, at in drawn.items() if T0 < at <= now}
    assert {job.id for job in arrived} == due
    assert any(job.started_at is not None for job in arrived)


def test_the_demo_world_ends_jobs_after_their_actual_hours_and_feeds_traffic_hourly(
    tmp_path: Path, models_dir: Path
) -> None:
    store = open_store(_db(tmp_path))
    try:
        # A work-only budget: the same plans however busy the machine is.
        config = replace(demo_config(models_dir), plan_budget_ms=100.0, plan_wall_clock=False)
        ensure_service(store, config, T0)
        seeded = {app.id: store.traffic(app.id)[-1].hour for app in store.apps()}
        world = demo_world(store, config)
        durations = demo_durations()
        for k in range(24):  # twelve hours, a cycle every 30 minutes
            now = T0 + k * timedelta(minutes=30)
            world.advance(store, now)
            recalibrate(store, now, config)
            plan_cycle(store, now, config, world.cluster)
        done = store.jobs([JobState.DONE])
        traffic = {app.id: store.traffic(app.id, since=seeded[app.id] + HOUR) for app in store.apps()}
        profiles = {app.id: store.profile_through(app.id) for app in store.apps()}
    finally:
        store.close()
    assert done, "no job ended in twelve simulated hours"
    for job in done:
        assert job.started_at is not None and job.ended_at is not None
        # Committed for the hour it came in (10:05), a job runs from its submission.
        began = max(job.started_at, job.submitted_at)
        # A job that arrived since runs for the hours its history row took, as a seeded one.
        hours = durations.get(job.id) or (world.arrivals and world.arrivals.actual_hours(job.id))
        assert hours is not None
        assert job.ended_at - began == timedelta(hours=hours)
    assert len(world.cluster.started) > len(done)  # jobs started after others ended
    end = datetime(2026, 11, 30, 20, tzinfo=UTC)  # the last full hour before the last cycle (21:35)
    for app, rows in traffic.items():
        assert [row.hour for row in rows] == [seeded[app] + (n + 1) * HOUR for n in range(len(rows))]
        assert rows[-1].hour == end and all(row.requests >= 0 for row in rows)
        assert profiles[app] == end  # the profiles recalibrated on the arriving traffic


def test_a_failing_delivery_stays_pending_with_its_error_and_goes_out_once_the_executor_is_back(
    tmp_path: Path, models_dir: Path
) -> None:
    store = open_store(_db(tmp_path))
    feed = tmp_path / "feed.jsonl"
    try:
        config = replace(demo_config(models_dir), plan_budget_ms=100.0, plan_wall_clock=False)
        ensure_service(store, config, T0)
        feed.mkdir()  # the executor cannot write its feed
        executor = JsonLinesExecutor(feed)
        plan_cycle(store, T0, config, executor)
        plan_cycle(store, T0 + HOUR, config, executor)
        pending = store.pending_deliveries("jsonl")
        assert [d.item.hour.hour for d in pending] == [10, 11]
        assert pending[0].attempts == 2 and "IsADirectoryError" in (pending[0].last_error or "")
        assert pending[1].attempts == 0  # a later hour never overtakes an earlier one
        feed.rmdir()
        assert deliver_pending(store, executor, T0 + HOUR) == 2
        assert store.pending_deliveries("jsonl") == []
        commits = store.commits()
    finally:
        store.close()
    lines = [json.loads(line) for line in feed.read_text().splitlines()]
    assert [(line["hour"], line["job"]) for line in lines] == [
        (c.hour.isoformat(), a.job) for c in commits for a in c.assignments
    ]


def test_a_restart_on_a_config_whose_app_capacity_comes_from_its_traffic_keeps_that_capacity(
    tmp_path: Path, models_dir: Path
) -> None:
    traffic = Path(demo_config().traffic[0].path)
    config = tmp_path / "config.yaml"
    app = {"id": "chat", "peak_gpus": 4, "traffic": str(traffic)}
    config.write_text(yaml.safe_dump({"cluster": {"gpus": 8}, "apps": [app], "plan_budget_ms": 50}))
    db = _db(tmp_path)
    for at in (T0, T0 + HOUR):  # the second start finds the app and its profile stored
        result = run_cli(
            "daemon", "--once", "--config", config, "--db", db, "--models", models_dir, "--at", at.isoformat()
        )
        assert result.code == 0, result.err
    store = open_store(db)
    try:
        (stored,) = store.apps()
    finally:
        store.close()
    peak = max(float(line.split(",")[1]) for line in traffic.read_text().splitlines()[1:])
    assert stored.requests_per_gpu_hour == pytest.approx(peak / 4)
