"""Answers an operator can trust: why a job has no start, one job spec for every command,
errors that name the right field, Ctrl-C and a closed stdout, files others can read."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from contract.records import Job, JobEstimate, JobState
from contract.scenario import JobKind
from gpuplan.app.core.config import demo_config
from gpuplan.app.cycle.tick import plan_cycle
from gpuplan.app.lab.seed import ensure_service
from storage.factory import open_store
from tests.service_fixtures import _in_tmp_path, models_dir, run_cli

__all__ = ["_in_tmp_path", "models_dir"]

ROOT = Path(__file__).resolve().parents[2]
GPUPLAN = Path(sys.executable).with_name("gpuplan")
EXAMPLE = ROOT / "training_data" / "example_job_training.yaml"
T0 = datetime(2026, 12, 2, 10, 5, tzinfo=UTC)
SUBMIT_AT = (T0 + timedelta(minutes=15)).isoformat()


@pytest.fixture(scope="module")
def demo_db_file(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Path:
    """The demo database after its first cycle (made once; each test works on a copy)."""
    path = tmp_path_factory.mktemp("demo") / "demo.db"
    result = run_cli("daemon", "--once", "--db", f"sqlite:///{path}", "--models", models_dir, "--at", T0)
    assert result.code == 0, result.err
    return path


@pytest.fixture
def demo_db(demo_db_file: Path, tmp_path: Path) -> str:
    copy = tmp_path / "demo.db"
    shutil.copyfile(demo_db_file, copy)
    return f"sqlite:///{copy}"


def _spec(tmp_path: Path, name: str, **fields: object) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(fields))
    return path


def _training_spec(tmp_path: Path, name: str, **fields: object) -> Path:
    """The bundled example job, with queue keys added."""
    return _spec(tmp_path, name, **{**yaml.safe_load(EXAMPLE.read_text()), **fields})


def _cluster_db(tmp_path: Path, models: Path, cluster: dict[str, object]) -> str:
    """A database for ``cluster`` with no real-time apps and no queue, after one cycle."""
    config = tmp_path / "cluster.yaml"
    # Work-only plans: the answers these tests pin must not depend on the machine's load.
    settings = {"cluster": cluster, "apps": [], "review_every_hours": None, "plan_wall_clock": False}
    config.write_text(yaml.safe_dump(settings))
    db = f"sqlite:///{tmp_path / 'cluster.db'}"
    result = run_cli("daemon", "--once", "--db", db, "--config", config, "--models", models, "--at", T0)
    assert result.code == 0, result.err
    return db


def _submit(db: str, spec: Path, models: Path, *extra: object) -> tuple[int, dict | str]:
    result = run_cli("submit", spec, "--db", db, "--models", models, "--at", SUBMIT_AT, *extra)
    if result.code != 0:
        return result.code, result.err
    return 0, json.loads(result.out) if "--json" in extra else result.out


# --- 4. a job with no start says why; a job that can never fit is refused --------------------


def test_a_job_larger_than_what_real_time_leaves_says_so_in_submit_and_status(
    demo_db: str, tmp_path: Path, models_dir: Path
) -> None:
    big = _spec(tmp_path, "big", id="big", kind="training", priority=50, gpus=16, hours=150)
    code, answer = _submit(demo_db, big, models_dir, "--json")
    assert code == 0, answer
    assert isinstance(answer, dict) and answer["planned_start"] is None
    reason = re.fullmatch(r"needs 16 GPUs; at most (\d+) are free at once in the next 24 h", answer["reason"])
    assert reason is not None, answer["reason"]
    assert 0 < int(reason.group(1)) < 16  # the demo's apps always hold some GPUs

    status = run_cli("status", "--db", demo_db, "--at", SUBMIT_AT, "--json")
    queue = json.loads(status.out)["queue"]
    assert [row["reason"] for row in queue if row["job"] == "big"] == [answer["reason"]]
    assert all(row["reason"] for row in queue)  # every queued job says why it starts when it does
    text = run_cli("status", "--db", demo_db, "--at", SUBMIT_AT).out
    assert answer["reason"] in text


def test_status_says_why_the_last_run_left_a_queued_job_out(demo_db: str) -> None:
    after = datetime(2026, 12, 2, 10, 40, tzinfo=UTC)
    store = open_store(demo_db)
    try:
        # As if the cluster had shrunk since the job came, and one submitted after the last run.
        store.add_job(
            Job("wide", JobKind.TRAINING, 50.0, {"kind": "training"}, after, estimate=JobEstimate(32, 2, 2))
        )
        store.add_job(
            Job("late", JobKind.TRAINING, 50.0, {"kind": "training"}, after, estimate=JobEstimate(1, 2, 2))
        )
    finally:
        store.close()
    queue = json.loads(run_cli("status", "--db", demo_db, "--at", after.isoformat(), "--json").out)["queue"]
    reasons = {row["job"]: row["reason"] for row in queue}
    assert reasons["wide"] == "needs 32 GPUs; the cluster has 16"
    assert reasons["late"] == "submitted after the last plan run"


def test_a_job_kept_off_its_gpus_only_by_a_down_window_says_gpus_down(
    tmp_path: Path, models_dir: Path
) -> None:
    db = _cluster_db(
        tmp_path,
        models_dir,
        {"gpus": 8, "down": [{"gpu": 3, "start": "2026-12-02T00:00", "end": "2026-12-05"}]},
    )
    whole = _spec(tmp_path, "whole", id="whole", kind="training", priority=50, gpus=8, hours=4)
    code, answer = _submit(db, whole, models_dir, "--json")
    assert code == 0 and isinstance(answer, dict)
    assert answer["planned_start"] is None
    assert answer["reason"] == "GPUs down: needs 8 GPUs; at most 7 are up and free at once in the next 24 h"
    half = _spec(tmp_path, "half", id="half", kind="training", priority=50, gpus=4, hours=4)
    code, answer = _submit(db, half, models_dir, "--json")
    assert code == 0 and isinstance(answer, dict)
    assert answer["planned_start"] is not None and not answer["reason"].startswith("GPUs down")


def test_a_job_behind_higher_priority_work_says_it_waits(tmp_path: Path, models_dir: Path) -> None:
    db = _cluster_db(tmp_path, models_dir, {"gpus": 8})
    first = _spec(tmp_path, "first", id="first", kind="training", priority=90, gpus=8, hours=30)
    assert _submit(db, first, models_dir, "--json")[0] == 0
    second = _spec(tmp_path, "second", id="second", kind="training", priority=10, gpus=8, hours=2)
    code, answer = _submit(db, second, models_dir, "--json")
    assert code == 0 and isinstance(answer, dict)
    assert (answer["planned_start"], answer["reason"]) == (None, "waits behind higher-priority work")
    code, text = _submit(
        db, _spec(tmp_path, "third", id="third", kind="training", gpus=8, hours=2), models_dir
    )
    assert code == 0 and "no start in the plan: waits behind higher-priority work" in str(text)


def test_a_job_no_block_of_working_gpus_can_ever_hold_is_refused(tmp_path: Path, models_dir: Path) -> None:
    # GPU 5 is down for good: no 8-GPU block is whole, and only 0-3 of the 4-GPU blocks.
    db = _cluster_db(tmp_path, models_dir, {"gpus": 8, "down": [{"gpu": 5, "start": "2026-12-01T00:00"}]})
    whole = _spec(tmp_path, "whole", id="whole", kind="training", priority=50, gpus=8, hours=4)
    code, err = _submit(db, whole, models_dir, "--json")
    assert code == 2
    assert (
        "`gpus` must be at most 4: the largest aligned block of GPUs that are not down for good; got 8."
        " GPU 5 is down with no end" in str(err)
    )
    store = open_store(db)
    try:
        assert store.job("whole") is None  # nothing stored
    finally:
        store.close()
    half = _spec(tmp_path, "half", id="half", kind="training", priority=50, gpus=4, hours=4)
    code, answer = _submit(db, half, models_dir, "--json")
    assert code == 0 and isinstance(answer, dict) and answer["first_gpu"] == 0


# --- 5-8. one job spec format; errors that name the right thing, before any work -------------


def test_forecast_job_takes_the_spec_submit_takes(tmp_path: Path, models_dir: Path) -> None:
    plain = run_cli("forecast", "job", EXAMPLE, "--models", models_dir, "--json")
    assert plain.code == 0, plain.err
    queued = _training_spec(tmp_path, "queued", id="my-sft", priority=60)
    result = run_cli("forecast", "job", queued, "--models", models_dir, "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == json.loads(plain.out)
    bad = _training_spec(tmp_path, "bad", id="no spaces allowed")
    result = run_cli("forecast", "job", bad, "--models", models_dir)
    assert result.code == 2 and "`id` must be 1-128 letters" in result.err


def test_gpus_without_hours_names_the_missing_hours(demo_db: str, tmp_path: Path, models_dir: Path) -> None:
    spec = _training_spec(tmp_path, "sized", gpus=16)
    code, err = _submit(demo_db, spec, models_dir)
    assert code == 2
    assert "`hours` must be a number of hours in (0, 8760] when `gpus` is given; got 'missing'" in str(err)


def test_a_duplicate_id_is_refused_before_any_forecast(
    demo_db: str, tmp_path: Path, models_dir: Path
) -> None:
    spec = _training_spec(tmp_path, "twice", id="twice")
    assert _submit(demo_db, spec, models_dir)[0] == 0
    # No models where the second submission looks: a forecast would fail on them first.
    code, err = _submit(demo_db, spec, tmp_path / "no-models")
    assert code == 2
    assert "`id` must be an id no other job has; got 'twice'" in str(err)


def test_done_ok_on_a_queued_job_answers_in_the_commands_own_words(demo_db: str) -> None:
    store = open_store(demo_db)
    try:
        queued = store.jobs([JobState.QUEUED])[0].id
    finally:
        store.close()
    result = run_cli("done", queued, "--db", demo_db, "--at", SUBMIT_AT, "--outcome", "ok")
    assert result.code == 2
    assert "`--outcome` must be 'failed' or 'cancelled' for a job that never started; got 'ok'." in result.err
    assert "completed" not in result.err
    assert run_cli("done", queued, "--db", demo_db, "--at", SUBMIT_AT, "--outcome", "cancelled").code == 0


# --- 9. Ctrl-C: one line, exit 130, nothing half-written -------------------------------------


def _interrupted(argv: list[str], cwd: Path, started_by: str) -> tuple[int, str]:
    """Run ``gpuplan argv``, press Ctrl-C (SIGINT to its process group) once ``started_by``
    shows on stderr, and return the exit code and stderr."""
    process = subprocess.Popen(
        [str(GPUPLAN), *argv],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stderr is not None
    seen = bytearray()
    ready = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        while chunk := process.stderr.read1(4096):
            seen.extend(chunk)
            if started_by.encode() in seen:
                ready.set()
        ready.set()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert ready.wait(timeout=120), seen.decode(errors="replace")
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join()
        process.stderr.close()
    return code, seen.decode(errors="replace")


def test_ctrl_c_during_train_prints_one_line_and_exits_130(tmp_path: Path) -> None:
    # No bar on a pipe (only on a terminal): -v logs the history read instead.
    code, err = _interrupted(["-v", "train", "--models", "models"], tmp_path, started_by="loaded")
    assert code == 130, err
    assert "Traceback" not in err
    lines = [line for line in re.split(r"[\r\n]", err) if line.strip()]
    assert lines[-1] == "gpuplan train: interrupted"
    assert not any("interrupted" in line for line in lines[:-1])
    assert not (tmp_path / "models").exists()  # nothing half-written


# --- 10. a bad config touches no database ----------------------------------------------------


def test_a_config_whose_traffic_is_missing_creates_no_database(tmp_path: Path, models_dir: Path) -> None:
    app = {"id": "chat", "priority": 80, "swap_cap": 2, "peak_gpus": 4, "traffic": "missing.csv"}
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump({"cluster": {"gpus": 8}, "apps": [app]}))
    db = tmp_path / "bad.db"
    result = run_cli(
        "daemon", "--once", "--db", f"sqlite:///{db}", "--config", config, "--models", models_dir
    )
    assert result.code == 2
    assert "`apps[chat].traffic` must be a readable file" in result.err
    assert not db.exists()


def test_a_config_with_peak_gpus_starts_again_on_its_own_database(tmp_path: Path, models_dir: Path) -> None:
    traffic = ROOT / "training_data" / "traffic" / "alibaba_genai_lora_hourly.csv"
    app = {"id": "chat", "priority": 80, "swap_cap": 2, "peak_gpus": 4, "traffic": str(traffic)}
    config = tmp_path / "good.yaml"
    config.write_text(yaml.safe_dump({"cluster": {"gpus": 8}, "apps": [app]}))
    db = f"sqlite:///{tmp_path / 'good.db'}"
    for at in (T0, T0 + timedelta(hours=1)):
        result = run_cli(
            "daemon", "--once", "--db", db, "--config", config, "--models", models_dir, "--at", at
        )
        assert result.code == 0, result.err


def test_peak_gpus_without_traffic_is_refused_when_the_config_is_read(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"apps": [{"id": "chat", "peak_gpus": 4}]}))
    db = tmp_path / "c.db"
    result = run_cli("daemon", "--once", "--db", f"sqlite:///{db}", "--config", config)
    assert result.code == 2
    assert "`apps[0].requests_per_gpu_hour` must be a number > 0 (or peak_gpus with traffic)" in result.err
    assert not db.exists()


# --- 11. a closed stdout is a quiet exit -----------------------------------------------------


def test_a_reader_that_closes_stdout_gets_a_quiet_exit(tmp_path: Path) -> None:
    scenario = ROOT / "benchmarks" / "1-mixed-control.json"
    process = subprocess.Popen(
        [str(GPUPLAN), "plan", str(scenario), "--policy", "fifo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # `| head -0`: the reader is gone before the answer comes
    with process.stderr:
        err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 0, err
    assert err == ""


# --- 12. files others can read ---------------------------------------------------------------


@pytest.fixture
def umask_027() -> Iterator[None]:
    previous = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("umask_027")
def test_exported_files_and_pngs_take_the_umasks_mode(demo_db: str, tmp_path: Path) -> None:
    out = tmp_path / "export"
    assert run_cli("export", "latest", "--db", demo_db, "--out", out).code == 0
    grid = tmp_path / "grid.png"
    scenario = ROOT / "benchmarks" / "1-mixed-control.json"
    assert (
        run_cli("plan", scenario, "--policy", "fifo", "--out", tmp_path / "p.json", "--png", grid).code == 0
    )
    utilization = tmp_path / "utilization.png"
    assert run_cli("report", "utilization", "--db", demo_db, "--png", utilization).code == 0
    written = [*sorted(out.iterdir()), tmp_path / "p.json", grid, utilization]
    assert {path.name: oct(path.stat().st_mode & 0o777) for path in written} == {
        path.name: "0o640" for path in written
    }


# --- 13-14. status, forecast realtime, the queue gauge --------------------------------------


def test_status_shows_real_time_gpus_a_sorted_queue_and_a_rounded_objective(demo_db: str) -> None:
    result = run_cli("status", "--db", demo_db, "--at", SUBMIT_AT, "--json")
    assert result.code == 0, result.err
    now = json.loads(result.out)
    apps = {row["job"]: row for row in now["running"] if row["kind"] == "realtime"}
    assert set(apps) == {"lora-serving", "philly-inference"}
    assert all(row["gpus"] and row["since"] == "2026-12-02T10:00:00+00:00" for row in apps.values())
    held = [gpu for row in now["running"] for gpu in row["gpus"]]
    assert len(held) == len(set(held))  # one job per GPU
    starts = [row["planned_start"] for row in now["queue"]]
    planned = [s for s in starts if s is not None]
    assert planned == sorted(planned, key=datetime.fromisoformat)
    assert starts == planned + [None] * (len(starts) - len(planned))
    objective = now["last_run"]["objective"]
    assert objective == round(objective, 3)
    text = run_cli("status", "--db", demo_db, "--at", SUBMIT_AT).out
    assert "lora-serving" in text.split("queue:")[0]
    assert re.search(r"objective=\d+(\.\d{1,3})? ", text)


def test_the_queue_length_counts_the_queue_after_the_commit(tmp_path: Path, models_dir: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'q.db'}")
    try:
        config = demo_config(models_dir)
        ensure_service(store, config, T0)
        before = len(store.jobs([JobState.QUEUED]))
        report = plan_cycle(store, T0, config)
        after = len(store.jobs([JobState.QUEUED]))
    finally:
        store.close()
    assert report.committed and report.jobs_committed > 0
    assert after < before  # the commit started queued jobs
    assert report.queue_length == after


# --- 15. wording -----------------------------------------------------------------------------


def test_train_db_on_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    result = run_cli("train", "--db", f"sqlite:///{missing}", "--models", tmp_path / "m")
    assert result.code == 2
    assert "`--db` must be the URL of an existing database" in result.err
    assert not missing.exists()


def test_plot_titles_count_days_and_hours_in_the_right_number(
    demo_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    titles: list[str] = []
    save = Figure.savefig

    def savefig(self: Figure, *args: object, **kwargs: object) -> None:
        titles.extend(ax.get_title() for ax in self.axes)
        save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "id,submit_hour,kind,priority,gpus,actual_hours,forecast_hours\nt1,0,training,60,4,5.5,5\n"
    )
    argv = ("simulate", "--days", 1, "--gpus", 16, "--policy", "fifo", "--workload", jobs)
    result = run_cli(*argv, "--png", tmp_path / "sim")
    assert result.code == 0, result.err
    assert any(title.startswith("utilization over 1 day (") for title in titles), titles
    assert not any("week" in title for title in titles)
    titles.clear()
    result = run_cli("report", "coverage-risk", "--db", demo_db, "--png", tmp_path / "c.png")
    assert result.code == 0, result.err
    assert titles and not any(re.search(r"\b1 short hours\b", title) for title in titles), titles
    assert all(re.search(r"\d+ short hours?\b", title) for title in titles if "short" in title)


def test_plan_wall_clock_in_a_config_is_a_boolean(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"plan_wall_clock": "no"}))
    result = run_cli("daemon", "--once", "--db", f"sqlite:///{tmp_path / 'c.db'}", "--config", config)
    assert result.code == 2
    assert "`plan_wall_clock` must be true or false; got 'no'." in result.err


def test_report_commits_counts_one_committed_hour_in_the_singular(demo_db: str) -> None:
    result = run_cli("report", "commits", "--db", demo_db)
    assert result.code == 0, result.err
    assert result.out.splitlines()[0].startswith("1 committed hour from 2026-12-02 10:00 ")
