"""What a new user hit in a first day (issue 52, items 7-13 and 16-19): bad input refused in one
line, flags that would do nothing refused, answers that say why, and output that reads right."""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from contract.records import JobState
from gpuplan.app.core.config import demo_config
from gpuplan.cli import build_parser
from storage.factory import open_store
from tests.cli.test_operator_answers import T0, demo_db, demo_db_file
from tests.service_fixtures import _in_tmp_path, models_dir, run_cli
from tests.strategies import small_doc

__all__ = ["_in_tmp_path", "demo_db", "demo_db_file", "models_dir"]

ROOT = Path(__file__).resolve().parents[2]
AT = (T0 + timedelta(minutes=15)).isoformat()


def _spec(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def _submit(db: str, spec: Path, models: Path, at: str = AT, *extra: object) -> tuple[int, str, str]:
    result = run_cli("submit", spec, "--db", db, "--models", models, "--at", at, *extra)
    return result.code, result.out, result.err


def _running(db: str) -> list[str]:
    store = open_store(db)
    try:
        return sorted(job.id for job in store.jobs([JobState.RUNNING]))
    finally:
        store.close()


# --- 7. only the daemon creates a database ----------------------------------------------------


@pytest.mark.parametrize("argv", [["status"], ["report", "commits"], ["done", "job-x"]])
def test_a_zero_byte_db_file_is_refused_and_left_empty(tmp_path: Path, argv: list[str]) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    result = run_cli(*argv, "--db", f"sqlite:///{empty}")
    assert result.code == 2
    assert "empty file" in result.err and "gpuplan daemon --once" in result.err
    assert empty.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


# --- 8. times a job cannot have ended at, and a status before what it shows -------------------


def test_done_refuses_an_end_centuries_on_or_before_the_submission(demo_db: str) -> None:
    running = _running(demo_db)
    job = next(j for j in running if j.startswith("demo-training"))
    far = run_cli("done", job, "--db", demo_db, "--at", "2199-01-01T00:00")
    assert far.code == 2
    assert "`--at` must be a time within 8,760 hours" in far.err and "got '2199-01-01" in far.err
    store = open_store(demo_db)
    try:
        queued = next(j.id for j in store.jobs([JobState.QUEUED]))
        history = len(store.history())
    finally:
        store.close()
    early = run_cli("done", queued, "--db", demo_db, "--at", "1970-06-01", "--outcome", "cancelled")
    assert early.code == 2
    assert "`--at` must be a time at or after the job's submission 2026-12-02T10:05" in early.err
    store = open_store(demo_db)
    try:  # nothing half-written: both jobs as they were, no history row
        assert store.job(job).state is JobState.RUNNING  # type: ignore[union-attr]
        assert store.job(queued).state is JobState.QUEUED  # type: ignore[union-attr]
        assert len(store.history()) == history
    finally:
        store.close()
    assert run_cli("done", job, "--db", demo_db, "--at", AT).code == 0  # a plausible end is taken


def test_status_refuses_a_time_before_the_state_it_shows(demo_db: str) -> None:
    result = run_cli("status", "--db", demo_db, "--at", "1970-01-01")
    assert result.code == 2 and result.out == ""
    assert "`--at` must be a time at or after the stored state it reports" in result.err
    assert "2026-12-02T10:05" in result.err
    assert run_cli("status", "--db", demo_db, "--at", AT).code == 0


# --- 9. a flag that would do nothing is refused ---------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--policy", "fast", "--time-limit", "5"],
            "`--time-limit` must be given only when the full policy plans",
        ),
        (["--policy", "fifo", "--workers", "4"], "`--workers` must be given only when the full policy plans"),
        (["--compare", "fifo,full", "--budget-ms", "50"], "`--budget-ms` must be given only when the fast"),
    ],
)
def test_plan_refuses_an_option_no_chosen_policy_reads(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(small_doc()))
    out = tmp_path / "plan.json"
    result = (
        run_cli("plan", scenario, "--out", out, *extra)
        if "--compare" not in extra
        else run_cli("plan", scenario, *extra)
    )
    assert result.code == 2 and message in result.err
    assert not out.exists()
    full = run_cli("plan", scenario, "--policy", "full", "--time-limit", "5", "--workers", "1")
    assert full.code == 0, full.err


def test_idle_windows_refuse_min_gpus_with_a_job_to_book(demo_db: str) -> None:
    result = run_cli(
        "report", "idle-windows", "--db", demo_db, "--gpus", "2", "--hours", "2", "--min-gpus", "4"
    )
    assert result.code == 2 and "`--min-gpus` must be absent with --gpus/--hours; got '4'" in result.err
    hours = run_cli(
        "report", "idle-windows", "--db", demo_db, "--gpus", "2", "--hours", "2", "--min-hours", "3"
    )
    assert hours.code == 2 and "`--min-hours`" in hours.err
    assert run_cli("report", "idle-windows", "--db", demo_db, "--min-gpus", "4").code == 0


def test_forecast_job_refuses_a_spec_with_schema_and_kind_without_it(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "job", (ROOT / "training_data" / "example_job_training.yaml").read_text())
    with_schema = run_cli("forecast", "job", "--schema", spec)
    assert with_schema.code == 2 and "`JOB` must be absent with --schema" in with_schema.err
    kind = run_cli("forecast", "job", spec, "--kind", "quantization")
    assert kind.code == 2 and "`--kind` must be given only with --schema" in kind.err
    schema = run_cli("forecast", "job", "--schema", "--kind", "quantization")
    assert schema.code == 0 and json.loads(schema.out)


# --- 10. what YAML reads as a number or as text ---------------------------------------------------


def test_a_priority_written_1e6_is_a_number(demo_db: str, tmp_path: Path, models_dir: Path) -> None:
    spec = _spec(tmp_path, "big", "id: big\nkind: batch_inference\npriority: 1e6\ngpus: 1\nhours: 2\n")
    code, _, err = _submit(demo_db, spec, models_dir)
    assert code == 0, err
    store = open_store(demo_db)
    try:
        assert store.job("big").priority == 1e6  # type: ignore[union-attr]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id: 12345\n", 'got 12345. That is a number, not text: quote it (id: "12345").'),
        ('id: quoted\npriority: "5"\n', "got '5'. That is text: write the number without quotes."),
    ],
)
def test_a_number_for_text_or_text_for_a_number_says_how_to_write_it(
    demo_db: str, tmp_path: Path, models_dir: Path, text: str, message: str
) -> None:
    spec = _spec(tmp_path, "x", text + "kind: batch_inference\ngpus: 1\nhours: 2\n")
    code, _, err = _submit(demo_db, spec, models_dir)
    assert code == 2 and message in err


# --- 11. batch inference has no forecaster ------------------------------------------------------


def test_forecast_job_on_batch_inference_says_it_takes_gpus_and_hours(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "batch", "id: b\nkind: batch_inference\ngpus: 2\nhours: 3\n")
    result = run_cli("forecast", "job", spec)
    assert result.code == 2
    assert "Batch inference has no forecaster: its spec states `gpus` and `hours`" in result.err
    assert "Add `kind" not in result.err


# --- 12. a read-only database says so ------------------------------------------------------------


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody may write to (root: the immutable attribute, which binds root too)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    yield folder
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)], check=False)
    folder.chmod(0o755)


def _lock(folder: Path) -> None:
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not supported here: {done.stderr.decode().strip()}")
    else:
        folder.chmod(0o555)


@pytest.mark.parametrize("argv", [["status"], ["report", "commits"]])
def test_a_read_only_database_is_called_read_only(
    demo_db_file: Path, read_only: Path, argv: list[str]
) -> None:
    shutil.copyfile(demo_db_file, read_only / "demo.db")
    _lock(read_only)
    result = run_cli(*argv, "--db", f"sqlite:///{read_only / 'demo.db'}")
    assert result.code == 1
    assert f"the SQLite database {read_only / 'demo.db'} is read-only: its folder {read_only}" in result.err
    assert "unable to open" not in result.err


# --- 13. progress bars only on a terminal --------------------------------------------------------


def _stderr_on_a_terminal(*argv: str) -> bytes:
    """What ``gpuplan argv`` writes to stderr when stderr is a (pseudo-)terminal."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal's size
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "gpuplan", *argv]
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=follower, env=env) as process:
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            seen += chunk
    os.close(leader)
    assert process.returncode == 0, seen.decode(errors="replace")
    return seen


def test_train_draws_no_bar_on_a_pipe_and_one_on_a_terminal(tmp_path: Path) -> None:
    piped = run_cli("train", "--models", tmp_path / "m1")
    assert piped.code == 0, piped.err
    assert "\r" not in piped.err and "/7" not in piped.err
    seen = _stderr_on_a_terminal("train", "--models", str(tmp_path / "m2"))
    assert b"train:" in seen and b"/7" in seen


# --- 16. a promise later than the plan says why -------------------------------------------------


def test_a_promise_later_than_the_planned_start_gives_the_why(
    demo_db: str, tmp_path: Path, models_dir: Path
) -> None:
    for n in range(4):  # higher-priority work arriving fast
        spec = _spec(
            tmp_path, f"hi{n}", f"id: hi{n}\nkind: batch_inference\npriority: 90\ngpus: 2\nhours: 4\n"
        )
        assert _submit(demo_db, spec, models_dir, (T0 + timedelta(minutes=6 + n)).isoformat())[0] == 0
    low = _spec(tmp_path, "low", "id: low\nkind: batch_inference\npriority: 1\ngpus: 1\nhours: 1\n")
    code, out, err = _submit(demo_db, low, models_dir, AT, "--json")
    assert code == 0, err
    answer = json.loads(out)
    planned = datetime.fromisoformat(answer["planned_start"])
    promised = datetime.fromisoformat(answer["promised_start"])
    assert promised > planned
    later = (promised - planned) / timedelta(hours=1)
    assert f"promised {later:g} h after the planned start: higher-priority jobs" in answer["reason"]
    api = (ROOT / "docs" / "api.md").read_text()
    operations = (ROOT / "docs" / "operations.md").read_text()
    for doc in (api, operations):
        assert "`promised_start`" in doc and "promised" in doc and "h after the planned start" in doc


# --- 17. the demo's first cycle has its traffic; a user's moved traffic is logged once -----------


def test_a_fresh_demo_cycle_warns_of_no_missing_traffic(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = f"sqlite:///{tmp_path / 'd.db'}"
    with caplog.at_level(logging.INFO):
        result = run_cli("daemon", "--once", "--db", db, "--models", models_dir, "--at", T0)
    assert result.code == 0, result.err
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    store = open_store(db)
    try:  # every app's traffic reaches the hour before the first cycle
        last = {app.id: store.traffic(app.id)[-1].hour for app in store.apps()}
    finally:
        store.close()
    assert set(last.values()) == {T0.replace(minute=0) - timedelta(hours=1)}, last


def test_a_users_traffic_moved_by_whole_weeks_is_logged_once(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    traffic = Path(demo_config().traffic[0].path)
    config = tmp_path / "config.yaml"
    app = {"id": "chat", "peak_gpus": 4, "traffic": str(traffic)}
    config.write_text(yaml.safe_dump({"cluster": {"gpus": 8}, "apps": [app], "plan_budget_ms": 50}))
    db = f"sqlite:///{tmp_path / 'c.db'}"
    with caplog.at_level(logging.WARNING, logger="gpuplan.app.lab.seed"):
        for at in (T0, T0 + timedelta(hours=1)):  # the second start finds the traffic stored
            result = run_cli(
                "daemon", "--once", "--config", config, "--db", db, "--models", models_dir, "--at", at
            )
            assert result.code == 0, result.err
    moved = [
        m
        for m in caplog.messages
        if re.match(r"app chat: the traffic in \S+ ends at \S+; moved forward by \d+ whole weeks", m)
    ]
    assert len(moved) == 1, caplog.messages


# --- 18. the command line's own manners -------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"gpuplan {version('gpuplan')}"


@pytest.mark.parametrize(
    "argv", [["-v", "status"], ["status", "-v"], ["status", "--verbose"], ["report", "commits", "-v"]]
)
def test_verbose_before_or_after_the_command(argv: list[str]) -> None:
    command = next(a for a in argv if not a.startswith("-"))
    assert build_parser(command).parse_args(argv).verbose is True
    assert (
        build_parser(command).parse_args([a for a in argv if a not in ("-v", "--verbose")]).verbose is False
    )


@pytest.mark.parametrize("command", ["train", "backtest", "simulate"])
def test_traffic_files_repeated_or_listed_alike(command: str) -> None:
    parser = build_parser(command)
    listed = parser.parse_args([command, "--traffic", "a.csv", "b.csv"]).traffic
    repeated = parser.parse_args([command, "--traffic", "a.csv", "--traffic", "b.csv"]).traffic
    assert listed == repeated == [Path("a.csv"), Path("b.csv")]


def _actions(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            yield " ".join(path), action


def test_every_argument_has_help_and_no_rst_quoting_shows() -> None:
    parser = build_parser()
    missing = [
        f"{path} {a.option_strings or a.dest}" for path, a in _actions(parser, ("gpuplan",)) if not a.help
    ]
    assert missing == []
    assert "``" not in parser.format_help()
    backtest = build_parser("backtest")._actions[-1].choices["backtest"].format_help()  # type: ignore[attr-defined]
    assert "--png DIR" in backtest and "folder" in backtest


# --- 19. output that reads right -----------------------------------------------------------------


def test_report_tables_show_dashes_shares_in_percent_and_singular_counts(demo_db: str) -> None:
    commits = run_cli("report", "commits", "--db", demo_db)
    assert commits.code == 0 and "None" not in commits.out
    utilization = run_cli("report", "utilization", "--db", demo_db)
    assert utilization.code == 0
    assert "1 committed hour " in utilization.out and "1 committed hours" not in utilization.out
    row = utilization.out.splitlines()[3]
    assert re.search(r"\d+\.\d%$", row), row


def test_submit_and_status_say_one_gpu_and_show_the_queue_s_gpus_and_priority(
    demo_db: str, tmp_path: Path, models_dir: Path
) -> None:
    spec = _spec(tmp_path, "one", "id: one\nkind: batch_inference\npriority: 5\ngpus: 1\nhours: 2\n")
    code, out, err = _submit(demo_db, spec, models_dir)
    assert code == 0, err
    first = out.splitlines()[0]
    assert "queued one: 1 GPU," in first and re.search(r"on GPU \d+(;|$)", first) and "GPUs" not in first
    status = run_cli("status", "--db", demo_db, "--at", AT).out
    queue = status.split("queue:\n", 1)[1].splitlines()
    assert queue[0].split()[:3] == ["job", "gpus", "priority"]
    line = next(row for row in queue if row.startswith("one "))
    assert line.split()[1:3] == ["1", "5"]


def test_the_review_log_rounds_the_bound(
    demo_db: str, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from gpuplan.app.cycle.tick import review

    config = replace(demo_config(models_dir=models_dir), review_time_limit_s=2.0, plan_wall_clock=False)
    store = open_store(demo_db)
    try:
        with caplog.at_level(logging.INFO, logger="gpuplan.app.cycle.tick"):
            run = review(store, T0 + timedelta(minutes=20), config)
    finally:
        store.close()
    (line,) = [m for m in caplog.messages if m.startswith("review start=")]
    bound = re.search(r"bound=(\S+)", line)
    assert bound is not None
    assert bound.group(1) == ("none" if run.bound is None else f"{run.bound:.1f}")


def test_the_sharding_note_is_logged_once_per_retrain(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from gpuplan.app.cycle.retrain import retrain
    from training_data.history import generate_history, validate_history

    history = validate_history(
        generate_history(seed=5, training_jobs=1_200, quantization_jobs=240), source="t"
    )
    with caplog.at_level(logging.INFO, logger="forecasting.training_estimator"):
        retrain(history, source="t", models_dir=tmp_path / "m", traffic_paths=None)
    notes = [m for m in caplog.messages if "fit only with more sharding" in m]
    assert len(notes) == 1, notes


def test_the_simulate_bar_counts_each_policy_s_hours() -> None:
    seen = _stderr_on_a_terminal(
        "simulate", "--days", "1", "--gpus", "8", "--policy", "fifo,priority-backfill"
    )
    assert b"simulated hours (2 policies x 24 h)" in seen and b"48/48" in seen
