"""Shared fixtures of the service tests: trained models (once per session), a CLI runner."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import pytest

from contract.records import Assignment, Commit, RunMode
from gpuplan.app.core.bridge import run_record
from gpuplan.app.core.config import ServiceConfig, demo_config
from gpuplan.app.cycle.retrain import retrain
from gpuplan.cli import main
from scheduler.lns import MIN_BUDGET_MS
from storage.store import Store
from training_data.history import generate_history, validate_history


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def run_cli(*argv: object) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(arg) for arg in argv])
    return Result(code, out.getvalue(), err.getvalue())


def quick_config(models: Path) -> ServiceConfig:
    """The demo service on the smallest work-only budget that still runs the CP-SAT window
    search: these tests compare plans made on one budget, the same on a loaded machine, and
    never judge a plan's quality."""
    return replace(demo_config(models_dir=models), plan_budget_ms=MIN_BUDGET_MS, plan_wall_clock=False)


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service writes var/ (commits file, default database) under the working directory."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Job estimators fitted on a small generated history (the real fit, only smaller)."""
    directory = tmp_path_factory.mktemp("models")
    history = validate_history(
        generate_history(seed=5, training_jobs=1_200, quantization_jobs=240), source="test"
    )
    retrain(history, source="test", models_dir=directory, traffic_paths=None)
    return directory


def commit_by_hand(
    store: Store, hours: Sequence[datetime], assignments: tuple[Assignment, ...], gpus: int
) -> None:
    """Commit each of ``hours`` with ``assignments``, an empty plan run of ``gpus`` GPUs behind each."""
    for hour in hours:
        run = run_record(
            {"name": "x", "gpus": gpus, "jobs": []},
            start=hour,
            created_at=hour,
            mode=RunMode.PLAN,
            policy="fast",
            grid=[[None] * 24 for _ in range(gpus)],
            metrics={},
            latency_ms=1.0,
        )
        store.record_run(run, Commit(hour, None, assignments))
