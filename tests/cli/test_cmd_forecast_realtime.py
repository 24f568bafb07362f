"""`gpuplan forecast realtime` on the real LoRA series."""

from __future__ import annotations

import argparse
import itertools
import json
import re
from pathlib import Path

import pytest

from contract.errors import InputError
from gpuplan import cmd_forecast_realtime

LORA = Path(__file__).resolve().parents[2] / "training_data" / "traffic" / "alibaba_genai_lora_hourly.csv"


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cmd_forecast_realtime.add_arguments(parser)
    return cmd_forecast_realtime.run(parser.parse_args(list(argv)))


def test_json_lists_one_row_per_hour(capsys: pytest.CaptureFixture[str]) -> None:
    code = _run(
        "--traffic",
        str(LORA),
        "--at",
        "2024-12-02 00:00",
        "--hours",
        "6",
        "--requests-per-gpu-hour",
        "40",
        "--swap-cap",
        "1",
        "--json",
    )
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["hour"] for row in rows][:2] == ["2024-12-02T00:00:00+00:00", "2024-12-02T01:00:00+00:00"]
    assert len(rows) == 6
    gpus = [row["gpus"] for row in rows]
    assert all(abs(a - b) <= 1 for a, b in itertools.pairwise(gpus))
    assert all(row["p90"] >= row["p50"] >= 0 for row in rows)
    assert all(row["gpus"] * 40 >= row["p90"] for row in rows)


def test_history_strictly_before_at_is_used(capsys: pytest.CaptureFixture[str]) -> None:
    _run("--traffic", str(LORA), "--at", "2024-12-02 00:00", "--json")
    first = capsys.readouterr().out
    _run("--traffic", str(LORA), "--at", "2024-12-02 00:30", "--json")
    assert capsys.readouterr().out == first  # 00:30 floors to the same hour


def test_bad_at_is_an_input_error() -> None:
    with pytest.raises(InputError, match=re.escape("`--at` must be a time such as 2024-12-01")):
        _run("--traffic", str(LORA), "--at", "soon")
    message = "`--at` must be a time after the first hour of the traffic file"
    with pytest.raises(InputError, match=re.escape(message)):
        _run("--traffic", str(LORA), "--at", "2020-01-01")


def test_gpus_are_planned_across_the_end_of_the_window(capsys: pytest.CaptureFixture[str]) -> None:
    # A quiet morning window just before LoRA's evening rise: the plan must already
    # climb inside the window, as the backtest's next-day lookahead does.
    common = ["--traffic", str(LORA), "--at", "2024-12-02 10:00", "--requests-per-gpu-hour", "20"]
    _run(*common, "--hours", "6", "--swap-cap", "1", "--json")
    window = json.loads(capsys.readouterr().out)
    _run(*common, "--hours", "30", "--swap-cap", "1", "--json")
    longer = json.loads(capsys.readouterr().out)
    assert [row["p90"] for row in window] == [row["p90"] for row in longer[:6]]
    gpus = [row["gpus"] for row in window]
    # The next window needs more than the last hour of this one plus the cap allows.
    assert max(row["gpus"] for row in longer[6:12]) > gpus[-1]
    assert gpus[-1] >= max(row["gpus"] for row in longer[6:12]) - 6
    assert gpus[-1] > min(gpus)  # it climbs inside the window
