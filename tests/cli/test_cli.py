"""The command line: plan and validate per the contract, bad input exits 2 and writes nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli import main
from tests.strategies import small_doc


def write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


@pytest.mark.parametrize("policy", ["fast", "fifo", "fifo-backfill", "priority-backfill"])
def test_plan_then_validate_round_trip(
    tmp_path: Path, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = write(tmp_path / "s.json", small_doc())
    out = tmp_path / "plan.json"
    assert main(["plan", str(scenario), "--policy", policy, "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert set(payload) == {"scenario", "policy", "grid", "metrics", "solve_ms", "status", "bound"}
    assert payload["policy"] == policy and len(payload["grid"]) == 8 and len(payload["grid"][0]) == 4
    assert set(payload["metrics"]) == {
        "utilization",
        "value",
        "penalty",
        "objective",
        "rt_coverage",
        "completed",
        "unscheduled",
        "rt_moves",
    }
    capsys.readouterr()
    assert main(["validate", str(scenario), str(out)]) == 0
    said = capsys.readouterr().out
    assert said.startswith("legal: utilization")
    assert said.rstrip().endswith(f"rt_moves {payload['metrics']['rt_moves']}")


def test_plan_to_stdout_and_yaml_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    scenario = write(tmp_path / "s.yaml", yaml.safe_dump(small_doc()))
    assert main(["plan", str(scenario)]) == 0
    assert json.loads(capsys.readouterr().out)["policy"] == "fast"


def test_validate_lists_violations_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = write(tmp_path / "s.json", small_doc())
    grid: list[list[str | None]] = [[None] * 4 for _ in range(8)]
    grid[1][0] = grid[1][1] = grid[2][0] = grid[2][1] = grid[3][0] = grid[3][1] = grid[4][0] = grid[4][1] = (
        "train"
    )
    plan = write(tmp_path / "p.json", {"grid": grid})
    assert main(["validate", str(scenario), str(plan)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "constraint 3 (contiguous power-of-two blocks): job train, GPU 1, step 0: GPUs [1, 2, 3, 4] are not an aligned block of 4",
        "constraint 3 (contiguous power-of-two blocks): job train, GPU 1, step 1: GPUs [1, 2, 3, 4] are not an aligned block of 4",
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "`scenario` must be valid JSON; got 's.json'. line 1, column 2"),
        (
            json.dumps(
                small_doc(
                    gpus=6,
                    jobs=[{"id": "x", "kind": "training", "priority": 1, "gpus": 6, "duration": 1}],
                )
            ),
            "`jobs[0].gpus` must be a power of two (1, 2, 4, 8, ...); got 6.",
        ),
        (json.dumps({"gpus": 2}), "`jobs` must be present; got 'missing'."),
    ],
)
def test_bad_scenario_exits_2_and_writes_nothing(
    tmp_path: Path, content: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = write(tmp_path / "s.json", content)
    out = tmp_path / "plan.json"
    assert main(["plan", str(scenario), "--out", str(out), "--png", str(tmp_path / "g.png")]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [scenario]


def test_malformed_plan_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = write(tmp_path / "s.json", small_doc())
    plan = write(tmp_path / "p.json", {"grid": "none"})
    assert main(["validate", str(scenario), str(plan)]) == 2
    assert re.search(re.escape("`grid` must be a list; got 'str'."), capsys.readouterr().err)


def test_unknown_policy_in_compare_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = write(tmp_path / "s.json", small_doc())
    assert main(["plan", str(scenario), "--compare", "fifo,best"]) == 2
    assert "`--compare` must be a comma-separated list of" in capsys.readouterr().err


def test_compare_prints_table_and_draws_stacked_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = write(tmp_path / "s.json", small_doc())
    png = tmp_path / "grids.png"
    assert main(["plan", str(scenario), "--compare", "fifo,priority-backfill,fast", "--png", str(png)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["policy", "util", "value"]
    assert [row.split()[0] for row in table[2:]] == ["fifo", "priority-backfill", "fast"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--budget-ms", "nan", "`--budget-ms` must be a number of milliseconds > 0 and <= 600,000; got nan."),
        ("--budget-ms", "0", "`--budget-ms` must be a number of milliseconds > 0 and <= 600,000; got 0.0."),
        ("--time-limit", "-1", "`--time-limit` must be a number of seconds > 0 and <= 3,600; got -1.0."),
        ("--time-limit", "inf", "`--time-limit` must be a number of seconds > 0 and <= 3,600; got inf."),
    ],
)
def test_plan_rejects_limits_out_of_range(
    tmp_path: Path, option: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = write(tmp_path / "s.json", small_doc())
    out = tmp_path / "plan.json"
    assert main(["plan", str(scenario), option, value, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_plan_cycle_budget_from_the_command_line(tmp_path: Path) -> None:
    scenario = write(tmp_path / "s.json", small_doc())
    out = tmp_path / "plan.json"
    assert main(["plan", str(scenario), "--budget-ms", "300", "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["policy"] == "fast" and payload["status"] in {"FEASIBLE", "OPTIMAL"}
