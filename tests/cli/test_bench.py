"""gpuplan bench on the shipped scenarios: the comparison it prints, and the goals it reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.cli import main

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


@pytest.mark.parametrize("hot_budget_ms", ["2", "1"])
def test_seven_scenarios_fast_beats_fifo_and_never_scores_below_a_baseline(
    hot_budget_ms: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "--scenarios", str(BENCHMARKS), "--no-full", "--runs", "1", "--cycle-budget-ms", "200"]
    args.append("--work-only")  # the plans compared must not depend on the machine's load
    assert main([*args, "--hot-budget-ms", hot_budget_ms, "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["scenario"] for r in results] == [
        "mixed-control",
        "realtime-contention",
        "training-heavy",
        "large-mixed",
        "oversubscribed",
        "scale-test",
        "uniform-priority",
    ]
    for r in results:
        p = r["policies"]
        assert p["fast"]["value"] > p["fifo"]["value"], r["scenario"]
        for baseline in ("fifo", "fifo-backfill", "priority-backfill"):
            assert p["fast"]["objective"] >= p[baseline]["objective"] - 1e-6, (r["scenario"], baseline)
        assert p["fast"]["rt_coverage"] >= p["fifo"]["rt_coverage"], r["scenario"]


def test_a_scenario_of_pools_is_benched_against_fastest_free_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.pools import document

    (tmp_path / "pools.json").write_text(json.dumps(document(1)), encoding="utf-8")
    args = ["bench", "--scenarios", str(tmp_path), "--no-full", "--runs", "1", "--work-only"]
    assert main([*args, "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    p = result["policies"]
    assert list(p) == ["fifo", "fifo-backfill", "priority-backfill", "fastest-free", "fast", "cycle"]
    assert p["fast"]["objective"] >= p["fastest-free"]["objective"]
    assert main(args) == 0
    assert "FF obj" in capsys.readouterr().out
    # the seven one-pool scenarios keep their columns: no fastest-free there
    assert main(["bench", "--scenarios", str(BENCHMARKS), "--no-full", "--runs", "1", "--work-only"]) == 0
    assert "FF obj" not in capsys.readouterr().out


def test_scale_sweep_prints_both_operating_points_per_size(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "--scale", "--sizes", "8,32", "--runs", "1", "--cycle-budget-ms", "250", "--json"]
    assert main([*args, "--long-cycle-ms", "400", "--bound-limit", "2"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [row["gpus"] for row in payload["rows"]] == [8, 32]
    for row in payload["rows"]:
        assert row["fast_objective"] >= row["first_pass_objective"] - 1e-6
        assert row["cycle_objective"] >= row["first_pass_objective"] - 1e-6
        assert row["long_cycle_objective"] >= row["first_pass_objective"] - 1e-6
        assert row["bound"] is None or row["bound"] >= row["long_cycle_objective"] - 1e-6
        assert row["relaxed_bound"] >= row["long_cycle_objective"] - 1e-6
    assert payload["peak_rss_mb"] > 0
    # The table names the relaxed bound and the best plan's gap to it.
    assert main([*args[:-1], "--long-cycle-ms", "400"]) == 0
    table = capsys.readouterr().out
    assert "relaxed bound" in table and "best's gap to it" in table and "%" in table


def test_bad_sizes_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--scale", "--sizes", "8,lots"]) == 2
    assert "`--sizes` must be comma-separated integers; got '8,lots'." in capsys.readouterr().err


def test_sample_compares_fast_with_full_on_fresh_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "bench",
        "--sample",
        "1",
        "--shapes",
        "oversubscribed",
        "--time-limit",
        "2",
        "--runs",
        "10",
        "--json",
    ]
    assert main(args) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["shape"] == "oversubscribed"
    assert row["fast_ge_pb"] and row["cycle_ge_pb"]  # neither operating point below priority-backfill
    assert row["fast_ratio"] == pytest.approx(row["fast"] / row["full"])
    assert row["cycle_ratio"] == pytest.approx(row["cycle"] / row["full"])
    assert row["bound"] is None or row["bound"] >= row["full"] - 1e-6


def test_sample_draws_the_rolling_replans(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "--sample", "1", "--shapes", "rolling-mixed", "--time-limit", "1", "--runs", "2"]
    assert main([*args, "--cycle-budget-ms", "250", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["shape"] == "rolling-mixed" and row["cycle_ge_pb"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sample", "0"], "`--sample` must be an integer in [1, 1,000]; got 0."),
        (["--time-limit", "-1"], "`--time-limit` must be a number of seconds > 0 and <= 3,600; got -1.0."),
        (["--cycle-budget-ms", "nan"], "`--cycle-budget-ms` must be a number of milliseconds > 0"),
        (["--scale", "--sizes", "0"], "`--sizes` must be cluster sizes from 1 to 4096; got 0."),
    ],
)
def test_bench_rejects_options_out_of_range(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", *args]) == 2
    assert message in capsys.readouterr().err


def test_the_seven_match_the_published_fifo_utilization_within_two_points() -> None:
    from contract.scenario_io import load_scenario
    from gpuplan.app.lab.bench import PUBLISHED, scenario_files
    from scheduler.policies import PolicyName, plan

    for path in scenario_files(BENCHMARKS):
        instance = load_scenario(path)
        fifo = plan(instance, PolicyName.FIFO).metrics.utilization
        assert abs(fifo - PUBLISHED[instance.name].fifo_utilization) <= 0.02, instance.name
