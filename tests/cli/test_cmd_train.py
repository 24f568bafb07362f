"""``gpuplan train`` and ``gpuplan forecast job`` end to end, error paths included."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.features.test_job_features import SPEC_7B_LORA
from tests.service_fixtures import Result, run_cli
from training_data.history import generate_history, write_history

# A two-week series keeps the real-time part of `train` quick.
SHORT_TRAFFIC = Path(__file__).parents[2] / "training_data" / "traffic" / "servegen_m-mid_hourly.csv"


@pytest.fixture(scope="module")
def history_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    history = generate_history(seed=21, training_jobs=1_500, quantization_jobs=300)
    return write_history(history, tmp_path_factory.mktemp("history") / "history.csv")


@pytest.fixture(scope="module")
def trained(history_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Result]:
    models = tmp_path_factory.mktemp("models")
    result = run_cli("train", "--history", history_csv, "--models", models, "--traffic", SHORT_TRAFFIC)
    return models, result


def _broken_history(source: Path, target: Path, row: int, column: str, value: object) -> Path:
    frame = pd.read_csv(source)
    frame[column] = frame[column].astype(object)
    frame.loc[row, column] = value
    frame.to_csv(target, index=False)
    return target


def _spec_file(tmp_path: Path, spec: dict[str, object], name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


# --- train --------------------------------------------------------------------------


def test_train_writes_every_model_and_prints_the_evaluation(
    trained: tuple[Path, Result],
) -> None:
    models, result = trained
    assert result.code == 0, result.err
    for name in ("training_estimator", "quantization_estimator", "realtime_servegen_m-mid_hourly"):
        document = json.loads((models / f"{name}.json").read_text())
        assert document["rows"] > 0 and document["format_version"] == 2
    assert not list(models.glob("*.pkl"))  # data, never code
    for text in (
        "log_mae_hours",
        "p90_coverage",
        "gpu_accuracy",
        "size-only baseline",
        "analytic-FLOPs baseline",
        "mean_over_provision_gpu_hours",
        "lower than the size-only baseline",
        "real-time profiles",
        "pinball loss on log hours at 0.5 / 0.9",
        "P90 hours per quintile of the predicted P50",
        "P90 GPUs per predicted P50 GPU count",
        "median_p90_over_p50",
        "analytic_p90_coverage",
    ):
        assert text in result.out
    quintiles = [line for line in result.out.splitlines() if line.startswith("hours   Q")]
    assert [line.split()[1] for line in quintiles] == ["Q1", "Q2", "Q3", "Q4", "Q5"]


def test_bad_history_exits_2_names_line_and_keeps_the_old_model(history_csv: Path, tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    old_model = models / "training_estimator.json"
    old_model.write_bytes(b"the model from last week")
    frame = pd.read_csv(history_csv)
    broken = _broken_history(history_csv, tmp_path / "bad.csv", 6, "end_time", frame.loc[6, "submit_time"])
    result = run_cli("train", "--history", broken, "--models", models)
    assert result.code == 2
    message = (
        f"gpuplan train: error: {broken}: `end_time` must be at or after start_time "
        "(a negative duration is impossible)"
    )
    assert message in result.err
    assert "Broken at line 8." in result.err
    assert old_model.read_bytes() == b"the model from last week"
    assert sorted(p.name for p in models.iterdir()) == ["training_estimator.json"]


def test_unknown_category_in_history_exits_2(history_csv: Path, tmp_path: Path) -> None:
    frame = pd.read_csv(history_csv)
    row = int(frame.index[frame["kind"] == "training"][0])
    broken = _broken_history(history_csv, tmp_path / "bad.csv", row, "gpu_type", "v100-16gb")
    result = run_cli("train", "--history", broken, "--models", tmp_path / "models")
    assert result.code == 2
    assert "`gpu_type` must be one of ['a100-40gb'" in result.err
    assert f"got ['v100-16gb']. Broken at line {row + 2}." in result.err
    assert not (tmp_path / "models").exists()


def test_missing_history_file_exits_2(tmp_path: Path) -> None:
    result = run_cli("train", "--history", tmp_path / "nope.csv", "--models", tmp_path)
    assert result.code == 2
    assert (
        "`--history` must be a readable file; got" in result.err
        and "No such file or directory." in result.err
    )


# --- forecast job -------------------------------------------------------------------


def test_forecast_job_json_has_p50_and_p90(trained: tuple[Path, Result], tmp_path: Path) -> None:
    models, _ = trained
    spec = _spec_file(tmp_path, {"kind": "training", **SPEC_7B_LORA})
    result = run_cli("forecast", "job", spec, "--json", "--models", models)
    assert result.code == 0, result.err
    payload = json.loads(result.out)
    assert set(payload) == {"gpus", "hours"}
    assert payload["gpus"]["p90"] >= payload["gpus"]["p50"] >= 1
    assert payload["hours"]["p90"] >= payload["hours"]["p50"] > 0


def test_forecast_quantization_job_adds_gpu_hours(trained: tuple[Path, Result], tmp_path: Path) -> None:
    models, _ = trained
    spec = {
        "kind": "quantization",
        "params_billion": 7,
        "algorithm": "gptq",
        "calibration_samples": 128,
        "calibration_seq_len_tokens": 2048,
        "gpu_type": "h100-80gb",
    }
    result = run_cli("forecast", "job", _spec_file(tmp_path, spec), "--json", "--models", models)
    assert result.code == 0, result.err
    payload = json.loads(result.out)
    assert set(payload) == {"gpus", "hours", "gpu_hours"}
    assert payload["gpu_hours"]["p90"] == int(payload["gpu_hours"]["p90"])


def test_forecast_job_text_output(trained: tuple[Path, Result], tmp_path: Path) -> None:
    models, _ = trained
    spec = _spec_file(tmp_path, {"kind": "training", **SPEC_7B_LORA})
    result = run_cli("forecast", "job", spec, "--models", models)
    assert result.code == 0
    assert "GPUs:  P50" in result.out
    assert "hours: P50" in result.out


def test_forecast_job_spec_breaking_the_schema_exits_2(trained: tuple[Path, Result], tmp_path: Path) -> None:
    models, _ = trained
    spec = _spec_file(tmp_path, {"kind": "training", **SPEC_7B_LORA, "epochs": 0})
    result = run_cli("forecast", "job", spec, "--models", models)
    assert result.code == 2
    expected = (
        f"gpuplan forecast: error: {spec}: `epochs` must be a number in [0.01, 100] (passes); "
        "got [0]. Broken at the spec."
    )
    assert expected in result.err


def test_forecast_job_that_fits_in_no_gpu_memory_exits_2(
    trained: tuple[Path, Result], tmp_path: Path
) -> None:
    models, _ = trained
    spec = {
        "kind": "training",
        **SPEC_7B_LORA,
        "variant": "full_sft",
        "lora_rank": 0,
        "micro_batch_size": 32,
        "gradient_checkpointing": False,
    }
    path = _spec_file(tmp_path, spec)
    result = run_cli("forecast", "job", path, "--json", "--models", models)
    assert result.code == 2
    assert result.out == ""
    expected = (
        f"gpuplan forecast: error: {path}: `micro_batch_size` must be small enough for the job to fit "
        "in GPU memory (72.0 GB usable of 80 GB per GPU); got 32. With sharding none,"
    )
    assert expected in result.err
    assert "Would fit: micro_batch_size: 2 with sharding: zero3 on 4 GPUs" in result.err


def test_forecast_job_without_kind_exits_2(trained: tuple[Path, Result], tmp_path: Path) -> None:
    models, _ = trained
    spec = _spec_file(tmp_path, dict(SPEC_7B_LORA))
    result = run_cli("forecast", "job", spec, "--models", models)
    assert result.code == 2
    assert "`kind` must be training or quantization; got None." in result.err


def test_forecast_job_without_models_says_to_train(tmp_path: Path) -> None:
    spec = _spec_file(tmp_path, {"kind": "training", **SPEC_7B_LORA})
    result = run_cli("forecast", "job", spec, "--models", tmp_path / "empty")
    assert result.code == 2
    assert re.search(r"Run `gpuplan train` first", result.err)


@pytest.mark.parametrize(("kind", "count"), [("training", 22), ("quantization", 5)])
def test_forecast_job_schema(kind: str, count: int) -> None:
    result = run_cli("forecast", "job", "--schema", "--kind", kind)
    assert result.code == 0
    entries = json.loads(result.out)
    assert len(entries) == count
    assert all(set(e) == {"name", "type", "unit", "min", "max", "categories"} for e in entries)


def test_forecast_job_schema_defaults_to_training() -> None:
    assert len(json.loads(run_cli("forecast", "job", "--schema").out)) == 22
