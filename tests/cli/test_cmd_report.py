"""``gpuplan report ...`` on a real SQLite store: runs written with ``record_run``, the CLI run in-process."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contract.records import App, AppForecast, Cluster, DownWindowRecord, Job, PlanRun, RunMode, TrafficHour
from contract.scenario_io import parse_scenario
from gpuplan.app.core.bridge import column_commit
from gpuplan.app.views.reports import idle_windows, run_instance
from scheduler.model import SolveOptions
from scheduler.policies import PolicyName, plan
from storage.factory import open_store
from tests.service_fixtures import run_cli

START = datetime(2026, 3, 1, 13, tzinfo=UTC)
HOUR = timedelta(hours=1)
CHAT_DEMAND = [4, 4, 4, 3, 2, 2]  # from 2 running GPUs at one swap a step, 4 is out of reach at step 0
DOC: dict[str, Any] = {
    "name": "cli",
    "gpus": 8,
    "horizon": 6,
    "jobs": [
        {"id": "train", "kind": "training", "priority": 60, "gpus": 4, "duration": 3},
        {"id": "quant", "kind": "quantization", "priority": 40, "gpus": 1, "duration": 2},
        {"id": "chat", "kind": "realtime", "priority": 80, "swap_cap": 1, "demand": CHAT_DEMAND},
    ],
    "running": [{"id": "chat", "gpus": [6, 7]}],
    "down": [{"gpu": 5, "start": 4, "end": 6}],
}
CHAT = App("chat", priority=80, swap_cap=1, requests_per_gpu_hour=100.0)


def planned_run(start: datetime) -> PlanRun:
    """The fast mode's plan of DOC, stored as the daemon stores a run starting at ``start``."""
    # A work-only budget: the same plan however busy the machine (tests compare against it).
    result = plan(parse_scenario(DOC), PolicyName.FAST, SolveOptions(wall_clock=False))
    forecasts = tuple(
        AppForecast("chat", start + t * HOUR, p50=70.0 * gpus, p90=100.0 * gpus - 10, gpus=gpus)
        for t, gpus in enumerate(CHAT_DEMAND)
    )
    return PlanRun(
        start=start,
        created_at=start,
        mode=RunMode.PLAN,
        policy="fast",
        inputs_hash="cli",
        objective=result.metrics.objective,
        bound=None,
        latency_ms=result.solve_ms,
        status=result.status,
        scenario=DOC,
        grid=[list(row) for row in result.grid],
        metrics=dict(result.metrics.as_dict()),
        forecasts=forecasts,
    )


@pytest.fixture
def db(tmp_path: Path) -> str:
    """Three hourly runs, each committing its hour; chat's traffic for the two past hours."""
    url = f"sqlite:///{tmp_path}/t.db"
    store = open_store(url)
    try:
        store.save_cluster(Cluster(gpus=8, down=(DownWindowRecord(gpu=5, start=START + 4 * HOUR),)))
        store.save_app(CHAT)
        for job_id, kind in (("train", "training"), ("quant", "quantization")):
            store.add_job(Job(job_id, kind, 50.0, {}, START - 3 * HOUR))
        for hour in (START - 2 * HOUR, START - HOUR, START):
            run = planned_run(hour)
            store.record_run(run, column_commit(run.grid, hour))
        store.add_traffic(
            [TrafficHour("chat", START - 2 * HOUR, 150.0), TrafficHour("chat", START - HOUR, 350.0)]
        )
    finally:
        store.close()
    return url


def stored_grid() -> list[list[str | None]]:
    return planned_run(START).grid


def test_idle_windows_json_are_the_stored_plans_windows(db: str) -> None:
    result = run_cli("report", "idle-windows", "--db", db, "--json")
    assert result.code == 0, result.err
    rows = json.loads(result.out)
    run = planned_run(START)
    # its first hour is committed: nothing there is bookable
    expected = idle_windows(run_instance(run), run.grid, START, open_from=1).rows
    assert expected and all(w.start > START for w in expected)
    assert [(r["start"], r["end"], r["first_gpu"], r["gpus"]) for r in rows] == [
        (w.start.isoformat(), w.end.isoformat(), w.first_gpu, w.gpus) for w in expected
    ]
    assert set(rows[0]) == {"start", "end", "first_gpu", "gpus", "hours", "gpu_hours", "reaches_horizon"}
    grid, instance = stored_grid(), run_instance(run)
    needs = {job.id: job.demand for job in instance.realtime_jobs}
    for r in rows:
        s = (datetime.fromisoformat(r["start"]) - START) // HOUR
        e = (datetime.fromisoformat(r["end"]) - START) // HOUR
        assert r["first_gpu"] % r["gpus"] == 0
        for g in range(r["first_gpu"], r["first_gpu"] + r["gpus"]):
            for t in range(s, e):  # planned for nothing, or held by an app above its need
                app = grid[g][t]
                assert app is None or sum(row[t] == app for row in grid) > needs[app][t], (g, t, app)
        assert not (r["first_gpu"] <= 5 < r["first_gpu"] + r["gpus"] and e > 4)  # GPU 5 is down from step 4
    assert result.err.startswith("free: ")  # the footer stays off stdout in --json


def test_idle_windows_table_has_a_heading_and_a_footer(db: str) -> None:
    result = run_cli("report", "idle-windows", "--db", db, "--run", "3", "--min-gpus", "2")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == (
        "run 3 (plan, fast): 8 GPUs x 6 steps of 60 min from 2026-03-01 13:00 UTC: "
        "idle windows of >= 2 GPUs for >= 1 h"
    )
    assert lines[1].split() == ["start", "end", "first_gpu", "gpus", "hours", "gpu_hours", "reaches_horizon"]
    assert re.fullmatch(
        r"free: [\d.]+ GPU-hours; in no aligned block of >= 2 GPUs for >= 1 h: [\d.]+ GPU-hours", lines[-1]
    )


def test_bookable_starts_csv_lists_the_earliest_start_first(db: str) -> None:
    result = run_cli("report", "idle-windows", "--db", db, "--gpus", "2", "--hours", "2", "--csv")
    assert result.code == 0, result.err
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert list(rows[0]) == ["start", "end", "first_gpu", "gpus", "unplanned_hours"]
    grid = stored_grid()

    def fits(first: int, s: int) -> bool:
        return all(
            grid[g][t] is None and not (g == 5 and t >= 4)
            for g in range(first, first + 2)
            for t in range(s, min(s + 2, 6))
        )

    earliest = min(s for s in range(6) for first in range(0, 8, 2) if fits(first, s))
    assert datetime.fromisoformat(rows[0]["start"]) == START + earliest * HOUR
    for row in rows:
        s = (datetime.fromisoformat(row["start"]) - START) // HOUR
        first = int(row["first_gpu"])
        assert fits(first, s) and not any(fits(first, earlier) for earlier in range(s))


def test_coverage_risk_shows_the_swap_capped_hour_and_the_realised_past(db: str) -> None:
    result = run_cli("report", "coverage-risk", "--db", db, "--json")
    assert result.code == 0, result.err
    rows = json.loads(result.out)
    assert set(rows[0]) == {"hour", "app", "planned_gpus", "needed_gpus", "shortfall_gpus", "reason", "basis"}
    past = [r for r in rows if r["basis"] == "actual"]
    ahead = [r for r in rows if r["basis"] == "forecast"]
    held_past = sum(1 for row in stored_grid() if row[0] == "chat")  # column 0 is what each hour committed
    assert past == [
        {
            "hour": (START - HOUR).isoformat(),
            "app": "chat",
            "planned_gpus": held_past,
            "needed_gpus": 4,
            "shortfall_gpus": 4 - held_past,
            "reason": "realised",
            "basis": "actual",
        }
    ]
    assert ahead[0] == {
        "hour": START.isoformat(),
        "app": "chat",
        "planned_gpus": 3,
        "needed_gpus": 4,
        "shortfall_gpus": 1,
        "reason": "swap_cap",
        "basis": "forecast",
    }
    grid = stored_grid()
    for r in ahead:
        t = (datetime.fromisoformat(r["hour"]) - START) // HOUR
        assert r["planned_gpus"] == sum(1 for row in grid if row[t] == "chat")
        assert r["needed_gpus"] == CHAT_DEMAND[t]  # the stored forecast's GPUs
        assert r["shortfall_gpus"] == r["needed_gpus"] - r["planned_gpus"] > 0
    served = min(held_past, 2) + min(held_past, 4)
    assert f"chat served {served / 6:.1%} of 6 GPU-hours of demand over 2 committed hours" in result.err


def test_utilization_counts_each_committed_hour_by_kind(db: str) -> None:
    result = run_cli("report", "utilization", "--db", db, "--json")
    assert result.code == 0, result.err
    rows = json.loads(result.out)
    column = [row[0] for row in stored_grid()]
    assert [r["hour"] for r in rows] == [(START + k * HOUR).isoformat() for k in (-2, -1, 0)]
    for r in rows:
        assert r["training"] == column.count("train")
        assert r["quantization"] == column.count("quant")
        assert r["realtime"] == column.count("chat")
        assert r["other"] == 0 and r["down"] == 0
        assert r["idle"] == 8 - sum(cell is not None for cell in column)


def test_utilization_with_a_team_counts_only_its_jobs(db: str) -> None:
    # the jobs of this database were stored without a team: a team's hours hold nothing
    result = run_cli("report", "utilization", "--db", db, "--json", "--team", "ml")
    assert result.code == 0, result.err
    rows = json.loads(result.out)
    assert len(rows) == 3
    assert all(r["training"] == r["quantization"] == r["realtime"] == 0 and r["idle"] == 8 for r in rows)


def test_commits_json_is_one_row_per_hour_and_job(db: str) -> None:
    result = run_cli("report", "commits", "--db", db, "--json", "--since", (START - HOUR).isoformat())
    assert result.code == 0, result.err
    rows = json.loads(result.out)
    expected = column_commit(stored_grid(), START)
    # A commit's own rows: no amendment number, no time of their own.
    assert all(set(r) == {"hour", "job", "gpus", "amendment", "at"} for r in rows)
    assert all(r["amendment"] is None and r["at"] is None for r in rows)
    assert [(r["job"], r["gpus"]) for r in rows if r["hour"] == START.isoformat()] == [
        (a.job, list(a.gpus)) for a in sorted(expected.assignments, key=lambda a: a.job)
    ]
    assert {r["hour"] for r in rows} == {(START - HOUR).isoformat(), START.isoformat()}


@pytest.mark.parametrize(
    "report",
    [
        ["idle-windows"],
        ["idle-windows", "--gpus", "4", "--hours", "2"],
        ["coverage-risk", "--quantile", "0.95"],
        ["utilization"],
        ["commits"],
    ],
)
def test_every_report_draws_a_png(db: str, tmp_path: Path, report: list[str]) -> None:
    out = tmp_path / "figure.png"
    result = run_cli("report", *report, "--db", db, "--png", out)
    assert result.code == 0, result.err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["idle-windows", "--run", "99"], "`--run` must be the id of a stored run; got '99'."),
        (
            ["idle-windows", "--run", "last"],
            "`--run` must be a run id (a whole number) or `latest`; got 'last'.",
        ),
        (
            ["idle-windows", "--gpus", "3", "--hours", "2"],
            "`--gpus` must be a power of two (1, 2, 4, ...) up to the cluster's 8; got 3.",
        ),
        (["idle-windows", "--gpus", "2"], "`--hours` must be given with --gpus; got None."),
        (
            ["coverage-risk", "--quantile", "1.5"],
            "`--quantile` must be a number strictly between 0 and 1 (0.9 = P90); got 1.5.",
        ),
        (
            ["coverage-risk", "--since", "yesterday"],
            "`--since` must be an ISO 8601 time such as 2026-11-30T14:00; got 'yesterday'.",
        ),
        (["utilization", "--since", "2026-03-02T00:00"], "no committed hour since 2026-03-02T00:00:00+00:00"),
    ],
)
def test_bad_input_exits_2_with_a_message(db: str, argv: list[str], message: str) -> None:
    result = run_cli("report", *argv, "--db", db)
    assert result.code == 2 and result.out == ""
    assert message in result.err


def test_an_empty_database_and_a_missing_file_exit_2(tmp_path: Path) -> None:
    empty = f"sqlite:///{tmp_path}/empty.db"
    open_store(empty).close()
    result = run_cli("report", "idle-windows", "--db", empty)
    assert result.code == 2 and "`--run` must be a stored run (the database has none yet)" in result.err
    result = run_cli("report", "commits", "--db", empty)
    assert (
        result.code == 2
        and "`--db` must be a database with committed hours; got 'none committed'." in result.err
    )
    missing = tmp_path / "nowhere.db"
    result = run_cli("report", "utilization", "--db", f"sqlite:///{missing}")
    assert result.code == 2 and f"No file {missing}." in result.err
    assert not missing.exists()
