"""gpuplan bench on the shipped scenarios: the comparison it prints, and the goals it reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.cli import main

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def test_seven_scenarios_fast_beats_fifo_and_priority_backfill(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--scenarios", str(BENCHMARKS), "--no-full", "--runs", "1", "--json"]) == 0
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
        assert p["fast"]["objective"] >= p["priority-backfill"]["objective"] - 1e-6, r["scenario"]
        assert p["fast"]["rt_coverage"] >= 0.99, r["scenario"]


def test_scale_sweep_prints_one_row_per_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--scale", "--sizes", "8,32", "--runs", "1", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [row["gpus"] for row in payload["rows"]] == [8, 32]
    assert payload["peak_rss_mb"] > 0


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
    assert row["full"] >= row["fast"] - 1e-6  # the full mode never scores below the fast mode
    assert row["bound"] is None or row["bound"] >= row["full"] - 1e-6
