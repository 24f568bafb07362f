"""The job history: the generator follows the published formulas; the loader rejects
broken files naming lines and columns."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from contract.errors import InputError
from features import job_costs
from features.job_features import TRAINING_SCHEMA
from tests.features.test_job_features import SPEC_7B_LORA
from training_data.history import (
    BUNDLED_HISTORY,
    HISTORY_COLUMNS,
    completed_jobs,
    generate_history,
    load_history,
    write_history,
)


@pytest.fixture(scope="module")
def small_history() -> pd.DataFrame:
    return generate_history(seed=11, training_jobs=400, quantization_jobs=80)


@pytest.fixture
def history_csv(tmp_path: Path, small_history: pd.DataFrame) -> Path:
    return write_history(small_history, tmp_path / "history.csv")


def _spec(**changes: object) -> pd.DataFrame:
    return TRAINING_SCHEMA.validate_record({**SPEC_7B_LORA, **changes}, source="test")


def _quant(**changes: object) -> pd.DataFrame:
    spec = {
        "params_billion": 7.0,
        "algorithm": "gptq",
        "calibration_samples": 128.0,
        "calibration_seq_len_tokens": 2048.0,
        "gpu_type": "a100-80gb",
    }
    return pd.DataFrame([{**spec, **changes}])


# --- the published formulas ---------------------------------------------------------


def test_full_fine_tuning_costs_6n_per_token_and_lora_4n() -> None:
    params = 7e9
    full = _spec(variant="full_sft", lora_rank=0, gradient_checkpointing=False, mean_sample_tokens=1)
    lora = _spec(gradient_checkpointing=False, mean_sample_tokens=1)
    per_token_full = job_costs.update_flops(full)[0] / 100e6 / 2  # 100M tokens, 2 epochs
    per_token_lora = job_costs.update_flops(lora)[0] / 100e6 / 2
    # Packed sequences of 1 token leave only the 2N weight term (attention is negligible).
    assert per_token_full == pytest.approx(6 * params, rel=1e-3)
    assert per_token_lora == pytest.approx(4 * params, rel=1e-3)


def test_dpo_costs_a_third_more_than_sft_per_token() -> None:
    sft = _spec(variant="full_sft", lora_rank=0, gradient_checkpointing=False)
    dpo = _spec(variant="full_dpo", lora_rank=0, gradient_checkpointing=False)
    ratio = job_costs.update_flops(dpo)[0] / job_costs.update_flops(sft)[0]
    assert ratio == pytest.approx(4 / 3)


def test_full_fine_tuning_with_adam_holds_16_bytes_per_parameter() -> None:
    # A 7B model with no activations to speak of, on one GPU with no sharding.
    spec = _spec(
        variant="full_sft",
        lora_rank=0,
        micro_batch_size=1,
        seq_len_tokens=64,
        mean_sample_tokens=64,
        gpu_memory_gb=512,
    )
    assert job_costs.memory_per_gpu_gb(spec, np.array([1.0]))[0] == pytest.approx(112, rel=0.01)


def test_qlora_base_holds_about_055_bytes_per_parameter() -> None:
    spec = _spec(base_4bit=True, lora_rank=8, micro_batch_size=1, seq_len_tokens=64, mean_sample_tokens=64)
    assert job_costs.memory_per_gpu_gb(spec, np.array([1.0]))[0] == pytest.approx(3.85, rel=0.05)


def test_zero3_divides_all_states_by_the_gpu_count() -> None:
    spec = _spec(variant="full_sft", lora_rank=0, sharding="zero3", micro_batch_size=1)
    one = job_costs.memory_per_gpu_gb(spec, np.array([1.0]))[0]
    eight = job_costs.memory_per_gpu_gb(spec, np.array([8.0]))[0]
    activations = job_costs.activation_bytes(spec)[0] / 1e9
    assert eight - activations == pytest.approx((one - activations) / 8)


def test_gptq_on_175b_takes_about_4_gpu_hours_on_one_a100() -> None:
    gpu_hours = job_costs.quantization_gpu_hours(_quant(params_billion=175.0))[0]
    # 4 GPU-hours of quantization plus loading and saving 175B parameters.
    assert 4.0 <= gpu_hours <= 4.5


def test_awq_takes_minutes_at_7b_and_about_an_hour_at_70b() -> None:
    awq = {"algorithm": "awq", "calibration_seq_len_tokens": 512.0}
    assert 10 / 60 <= job_costs.quantization_gpu_hours(_quant(**awq))[0] <= 15 / 60
    assert 0.8 <= job_costs.quantization_gpu_hours(_quant(params_billion=70.0, **awq))[0] <= 1.2


def test_bitsandbytes_has_no_offline_pass() -> None:
    bnb = _quant(algorithm="bitsandbytes", calibration_samples=0.0, calibration_seq_len_tokens=0.0)
    assert job_costs.quantization_gpu_hours(bnb)[0] < 0.15


# --- the generator ------------------------------------------------------------------


def test_generator_is_deterministic_per_seed() -> None:
    first = generate_history(seed=5, training_jobs=200, quantization_jobs=20)
    again = generate_history(seed=5, training_jobs=200, quantization_jobs=20)
    other = generate_history(seed=6, training_jobs=200, quantization_jobs=20)
    pd.testing.assert_frame_equal(first, again)
    assert not first["end_time"].equals(other["end_time"])


def test_generated_history_has_the_documented_columns_and_counts(
    small_history: pd.DataFrame,
) -> None:
    assert tuple(small_history.columns) == HISTORY_COLUMNS
    assert (small_history["kind"] == "training").sum() == 400
    assert (small_history["kind"] == "quantization").sum() == 80
    gpus = small_history["gpus"].to_numpy()
    assert np.all(gpus == 2 ** np.round(np.log2(gpus))), "GPU counts are powers of two"


def test_round_trip_through_csv(history_csv: Path, small_history: pd.DataFrame) -> None:
    loaded = load_history(history_csv)
    assert len(loaded) == len(small_history)
    jobs = completed_jobs(loaded, "training")
    assert (jobs["duration_hours"] > 0).all()
    assert set(jobs.columns) >= {*TRAINING_SCHEMA.names, "gpus", "duration_hours"}


def test_bundled_history_is_committed_small_and_valid() -> None:
    assert BUNDLED_HISTORY.is_file()
    assert BUNDLED_HISTORY.stat().st_size < 3_000_000
    history = load_history(BUNDLED_HISTORY)
    assert (history["kind"] == "training").sum() == 20_000
    assert (history["kind"] == "quantization").sum() == 2_000


# --- the loader's errors ------------------------------------------------------------


def _broken(path: Path, edit: dict[tuple[int, str], object]) -> Path:
    frame = pd.read_csv(path)
    for (row, column), value in edit.items():
        frame[column] = frame[column].astype(object)
        frame.loc[row, column] = value
    out = path.with_name("broken.csv")
    frame.to_csv(out, index=False)
    return out


def test_end_before_start_names_the_line(history_csv: Path) -> None:
    frame = pd.read_csv(history_csv)
    broken = _broken(history_csv, {(3, "end_time"): frame.loc[3, "submit_time"]})
    message = (
        "`end_time` must be at or after start_time (a negative duration is impossible); "
        f"got ['{frame.loc[3, 'submit_time']}']. Broken at line 5."
    )
    with pytest.raises(InputError, match=re.escape(message)):
        load_history(broken)


def test_unknown_category_names_lines_and_column(history_csv: Path) -> None:
    frame = pd.read_csv(history_csv)
    training_rows = frame.index[frame["kind"] == "training"][:2]
    broken = _broken(history_csv, {(int(row), "optimizer"): "lion" for row in training_rows})
    lines = ", ".join(f"line {row + 2}" for row in training_rows)
    message = (
        "(training jobs): `optimizer` must be one of ['adamw', 'adamw_8bit', 'adafactor']; "
        f"got ['lion', 'lion']. Broken at {lines}."
    )
    with pytest.raises(InputError, match=re.escape(message)):
        load_history(broken)


def test_missing_columns_are_listed(history_csv: Path) -> None:
    frame = pd.read_csv(history_csv).drop(columns=["gpus"])
    broken = history_csv.with_name("no_gpus.csv")
    frame.to_csv(broken, index=False)
    with pytest.raises(
        InputError,
        match=re.escape("no_gpus.csv: `gpus` must be in the header (job-history columns); got 'missing'."),
    ):
        load_history(broken)


def test_negative_value_in_a_feature(history_csv: Path) -> None:
    frame = pd.read_csv(history_csv)
    row = int(frame.index[frame["kind"] == "training"][0])
    broken = _broken(history_csv, {(row, "dataset_tokens_million"): -5})
    with pytest.raises(InputError, match=re.escape(f"got [-5.0]. Broken at line {row + 2}.")):
        load_history(broken)


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=re.escape("`--history` must be a readable file; got")):
        load_history(tmp_path / "nope.csv")
