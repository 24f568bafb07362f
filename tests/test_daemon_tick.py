"""One daemon tick with an injected clock writes a legal, stamped plan."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from daemon import run_once
from scheduler.check import check_plan
from scheduler.scenario_io import load_scenario

SCENARIO = Path(__file__).parent.parent / "benchmarks" / "1-mixed-control.json"


def test_tick_writes_a_legal_plan_stamped_with_the_injected_clock(tmp_path: Path) -> None:
    now = datetime(2026, 11, 29, 13, 30, tzinfo=UTC)
    path = run_once(SCENARIO, tmp_path, now)
    assert path.name == "plan-20261129T133000.json"
    payload = json.loads(path.read_text())
    assert payload["planned_at"] == "2026-11-29T13:30:00+00:00"
    assert check_plan(load_scenario(SCENARIO), payload["grid"]) == []
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
