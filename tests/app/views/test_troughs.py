"""Issue 52, item 2: what the idle-windows report says is bookable against what a submit of
exactly that job is planned at: on a plan with an empty queue, where an app holds its daily
peak through a trough (GPUs above its need, which are bookable), and on a cluster with a queue."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.app.views.reports import run_instance
from storage.factory import open_store
from tests.service_fixtures import _in_tmp_path, models_dir, run_cli

__all__ = ["_in_tmp_path", "models_dir"]

ROOT = Path(__file__).resolve().parents[3]
AT = "2026-12-07T10:05"


def _cluster(tmp_path: Path, models_dir: Path) -> tuple[Path, str]:
    """The example cluster on 16 GPUs, planned once at :data:`AT` (the 10:00 hour committed)."""
    config: dict[str, Any] = yaml.safe_load((ROOT / "training_data" / "example_cluster.yaml").read_text())
    config["cluster"]["gpus"] = 16
    config["plan_wall_clock"] = False  # plans compared here repeat
    for app in config["apps"]:
        app["traffic"] = str(ROOT / "training_data" / app["traffic"])
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    daemon = run_cli("daemon", "--once", "--db", db, "--config", path, "--models", models_dir, "--at", AT)
    assert daemon.code == 0, daemon.err
    return path, db


def _submit(tmp_path: Path, path: Path, db: str, models_dir: Path, job: dict[str, Any]) -> str:
    """The planned start a submit of ``job`` answers."""
    spec = tmp_path / f"{job['id']}.yaml"
    spec.write_text(yaml.safe_dump({"kind": "batch_inference", **job}))
    answer = run_cli("submit", spec, "--db", db, "--config", path, "--models", models_dir, "--at", AT)
    assert answer.code == 0, answer.err
    planned = re.search(r"planned at (\S+) on", answer.out)
    assert planned is not None, answer.out
    return planned.group(1)


def _earliest_bookable(db: str, gpus: int, hours: int) -> str | None:
    rows = json.loads(
        run_cli("report", "idle-windows", "--db", db, "--gpus", gpus, "--hours", hours, "--json").out
    )
    return rows[0]["start"] if rows else None


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_the_earliest_bookable_start_is_where_a_submit_of_that_job_is_planned(
    tmp_path: Path, models_dir: Path, gpus: int
) -> None:
    path, db = _cluster(tmp_path, models_dir)
    # The app in a trough: the plan holds chat's peak through hours that need far less.
    run = open_store(db).runs(limit=1)[0]
    instance = run_instance(run)
    chat = next(job for job in instance.realtime_jobs if job.id == "chat")
    held = [sum(1 for row in run.grid if row[t] == "chat") for t in range(instance.horizon_steps)]
    assert held[1] > chat.demand[1] + chat.swap_cap, (held, chat.demand)
    booked = _earliest_bookable(db, gpus, 6)
    planned = _submit(
        tmp_path, path, db, models_dir, {"id": "probe", "priority": 50, "gpus": gpus, "hours": 6}
    )
    assert booked == planned
    assert booked is not None and booked > AT  # never the committed hour


def test_a_committed_hour_is_not_bookable(tmp_path: Path, models_dir: Path) -> None:
    _, db = _cluster(tmp_path, models_dir)
    windows = json.loads(run_cli("report", "idle-windows", "--db", db, "--json").out)
    assert windows and all(row["start"] >= "2026-12-07T11:00:00+00:00" for row in windows)


@pytest.mark.parametrize("gpus", [2, 8])
def test_on_a_cluster_with_a_queue_the_report_agrees_with_a_submit(
    tmp_path: Path, models_dir: Path, gpus: int
) -> None:
    path, db = _cluster(tmp_path, models_dir)
    for i, (size, hours) in enumerate([(4, 3), (8, 2), (2, 8)]):
        _submit(
            tmp_path,
            path,
            db,
            models_dir,
            {"id": f"queued-{i}", "priority": 60, "gpus": size, "hours": hours},
        )
    booked = _earliest_bookable(db, gpus, 6)
    planned = _submit(
        tmp_path, path, db, models_dir, {"id": "probe", "priority": 50, "gpus": gpus, "hours": 6}
    )
    assert booked == planned
