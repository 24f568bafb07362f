"""What issue 13 asked for besides refusals: warnings, declared formats, whole-set writes."""

from __future__ import annotations

import json
import logging
import pickle
import re
from pathlib import Path

import pytest

from contract.errors import InputError
from contract.files import check_writable, read_document, replace_files, write_json_atomic
from gpuplan.cli import main
from tests.strategies import small_doc

TRAFFIC = Path(__file__).resolve().parents[2] / "training_data" / "traffic"


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- validate: stored metrics that disagree -------------------------------------------------


def test_validate_warns_when_stored_metrics_disagree_but_stays_legal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(small_doc()))
    plan = tmp_path / "p.json"
    assert _run(capsys, "plan", scenario, "--policy", "fifo", "--out", plan)[0] == 0
    assert _run(capsys, "validate", scenario, plan)[1].count("warning") == 0

    document = json.loads(plan.read_text())
    true_objective = document["metrics"]["objective"]
    document["metrics"]["objective"] = 6383
    document["metrics"]["makespan"] = 3  # another tool's metric: not compared
    plan.write_text(json.dumps(document))
    code, out, _ = _run(capsys, "validate", scenario, plan)
    assert code == 0
    assert out.splitlines()[0].startswith("legal:")
    assert out.splitlines()[1:] == [
        f"warning: stored metric objective is 6383; the grid gives {true_objective:g}"
    ]


# --- the demo has its own name ---------------------------------------------------------------


def test_demo_scenario_is_not_named_like_the_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import resources

    from contract.scenario_io import load_scenario

    with resources.as_file(resources.files("gpuplan") / "scenarios" / "demo-mixed.json") as path:
        assert load_scenario(path).name == "demo-mixed"
    benchmark = Path(__file__).resolve().parents[2] / "benchmarks" / "1-mixed-control.json"
    assert load_scenario(benchmark).name == "mixed-control"


# --- traffic: declared layouts, --column -----------------------------------------------------


def test_a_count_column_with_another_name_is_read_with_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundled = (TRAFFIC / "philly_active_nodes_hourly.csv").read_text().splitlines()
    philly = tmp_path / "philly.csv"  # the shared file's own layout: hour,active,total
    philly.write_text("\n".join(["hour,active,total", *(f"{line},999" for line in bundled[1:])]) + "\n")
    argv = ["forecast", "realtime", "--at", "2017-12-01", "--hours", "3", "--json"]
    code, _, err = _run(capsys, *argv, "--traffic", philly)
    assert code == 2 and "`header` must be `hour,requests`" in err
    code, out, _ = _run(capsys, *argv, "--traffic", philly, "--column", "active")
    assert code == 0
    assert out == _run(capsys, *argv, "--traffic", TRAFFIC / "philly_active_nodes_hourly.csv")[1]


def test_crlf_and_bom_traffic_reads_like_the_plain_file(tmp_path: Path) -> None:
    from features.traffic import load_traffic

    plain = TRAFFIC / "alibaba_genai_lora_hourly.csv"
    windows = tmp_path / "lora.csv"
    windows.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))
    assert (load_traffic(windows).requests == load_traffic(plain).requests).all()


# --- forecast realtime: warnings where the answer is weak ------------------------------------


@pytest.mark.parametrize(
    ("at", "warning"),
    [
        ("2024-11-15 19:00", "only 3 hours of history before 2024-11-15T19"),
        ("2025-01-15 00:00", "hours after the history ends (2024-12-08T17), more than a week"),
    ],
)
def test_forecast_realtime_warns_on_thin_or_stale_history(
    at: str, warning: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with caplog.at_level(logging.WARNING):
        code, _, _ = _run(
            capsys, "forecast", "realtime", "--traffic", TRAFFIC / "alibaba_genai_lora_hourly.csv", "--at", at
        )
    assert code == 0
    assert warning in caplog.text


def test_forecast_realtime_gives_no_warning_inside_the_history(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with caplog.at_level(logging.WARNING, logger="gpuplan"):
        _run(
            capsys,
            "forecast",
            "realtime",
            "--traffic",
            TRAFFIC / "alibaba_genai_lora_hourly.csv",
            "--at",
            "2024-12-01",
        )
    assert "history" not in caplog.text


# --- backtest on all-zero traffic ------------------------------------------------------------


def test_backtest_on_all_zero_traffic_answers_with_valid_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    zero = tmp_path / "zero.csv"
    zero.write_text(
        "hour,requests\n" + "".join(f"2024-01-{1 + h // 24:02d} {h % 24:02d}:00,0\n" for h in range(22 * 24))
    )
    code, out, _ = _run(capsys, "backtest", "--traffic", zero, "--json")
    assert code == 0
    (report,) = json.loads(out)  # strict JSON: no NaN
    profile = report["forecasters"][0]["accuracy"]
    assert profile["mae"] == 0.0 and profile["relative_mae"] is None and profile["mase"] is None
    assert all(row["demand_served"] == 1.0 for row in report["profile_tradeoff"])


# --- the file helpers themselves ------------------------------------------------------------


def test_replace_files_writes_every_file_or_none(tmp_path: Path) -> None:
    models = tmp_path / "models"
    written = replace_files(models, {"a.pkl": b"1", "a.json": b"{}"}, "--models")
    assert sorted(p.name for p in models.iterdir()) == ["a.json", "a.pkl"] == sorted(p.name for p in written)
    (models / "b.pkl").mkdir()  # a name that cannot be replaced: nothing is written at all
    with pytest.raises(InputError, match=re.escape("`--models` must be a regular file or a new name")):
        replace_files(models, {"a.pkl": b"2", "b.pkl": b"2"}, "--models")
    assert (models / "a.pkl").read_bytes() == b"1"
    assert sorted(p.name for p in models.iterdir()) == ["a.json", "a.pkl", "b.pkl"]


def test_atomic_json_write_replaces_a_regular_file_only(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]
    with pytest.raises(InputError, match="must be a file name ending in one of"):
        check_writable(tmp_path / "g.txt", "--png", suffixes={".png": "PNG"})


def test_documents_decode_bom_and_crlf_and_keep_dates_as_text(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_bytes(b"\xef\xbb\xbfname: x\r\nwhen: 2024-01-01\r\n")
    assert read_document(spec, "SPEC") == {"name": "x", "when": "2024-01-01"}


def test_a_model_file_holding_something_else_is_an_input_error(tmp_path: Path) -> None:
    from forecasting.persistence import load_model
    from forecasting.training_estimator import TrainingEstimator

    path = tmp_path / "training_estimator.json"
    path.write_bytes(pickle.dumps(TrainingEstimator()))  # a pickle under the model's name
    with pytest.raises(InputError, match=re.escape("It is a pickle, which gpuplan never loads")):
        load_model(path, TrainingEstimator)


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ({"model": "TrainingEstimator", "rows": 10}, "It has no format version"),  # the old sidecar
        ({"format_version": 1, "type": "TrainingEstimator"}, "It has format version 1"),
        ({"format_version": 2, "type": "TrainingEstimator", "params": {}}, "It does not load"),
    ],
)
def test_a_stale_or_damaged_model_document_says_to_retrain(
    tmp_path: Path, document: dict[str, object], why: str
) -> None:
    from forecasting.persistence import load_model
    from forecasting.training_estimator import TrainingEstimator

    path = tmp_path / "training_estimator.json"
    path.write_text(json.dumps(document))
    with pytest.raises(InputError, match=re.escape(why) + ".*retrain with `gpuplan train`"):
        load_model(path, TrainingEstimator)


# --- train: a history of one kind, with the other kind's columns absent ----------------------


def test_a_training_only_history_without_quantization_columns_trains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from features.job_features import QUANTIZATION_SCHEMA, TRAINING_SCHEMA
    from training_data.history import generate_history, write_history

    history = generate_history(seed=3, training_jobs=80, quantization_jobs=0)
    only_training = [
        c for c in history.columns if c not in set(QUANTIZATION_SCHEMA.names) - set(TRAINING_SCHEMA.names)
    ]
    path = write_history(history[only_training], tmp_path / "h.csv")
    assert "algorithm" not in path.read_text().splitlines()[0]
    models = tmp_path / "models"
    code, out, err = _run(
        capsys,
        "train",
        "--history",
        path,
        "--models",
        models,
        "--traffic",
        TRAFFIC / "servegen_m-mid_hourly.csv",
    )
    assert code == 0, err
    assert "no quantization model written" in out
    assert sorted(p.name for p in models.iterdir()) == [
        "realtime_servegen_m-mid_hourly.json",
        "training_estimator.gpus_p50.lgb.txt",
        "training_estimator.gpus_p90.lgb.txt",
        "training_estimator.hours_margin_p90.lgb.txt",
        "training_estimator.hours_p50.lgb.txt",
        "training_estimator.json",
    ]
