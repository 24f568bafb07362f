"""QuantizationEstimator: tiers, per-cell OLS with a fallback, margins, whole GPU-hours."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from contract.errors import InputError, NotFittedError
from features.job_features import QUANTIZATION_SCHEMA
from forecasting.evaluation import quantization_metrics, time_split
from forecasting.persistence import load_model, save_model
from forecasting.quantization_estimator import QuantizationEstimator
from training_data.history import completed_jobs, generate_history

AWQ_70B: dict[str, object] = {
    "params_billion": 70,
    "algorithm": "awq",
    "calibration_samples": 128,
    "calibration_seq_len_tokens": 512,
    "gpu_type": "a100-80gb",
}


@pytest.fixture(scope="module")
def jobs() -> pd.DataFrame:
    history = generate_history(seed=13, training_jobs=0, quantization_jobs=1_500)
    return completed_jobs(history, "quantization")


@pytest.fixture(scope="module")
def fitted(jobs: pd.DataFrame) -> QuantizationEstimator:
    return QuantizationEstimator().fit(
        jobs[list(QUANTIZATION_SCHEMA.names)], jobs[["gpus", "duration_hours"]]
    )


def _xy(jobs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    return jobs[list(QUANTIZATION_SCHEMA.names)], jobs[["gpus", "duration_hours"]]


def test_init_only_stores_parameters() -> None:
    estimator = QuantizationEstimator(safety_margin=1.5)
    assert not [name for name in vars(estimator) if name.endswith("_")]
    assert clone(estimator).get_params()["safety_margin"] == 1.5


def test_predict_before_fit_raises_not_fitted() -> None:
    message = "This QuantizationEstimator instance is not fitted yet."
    with pytest.raises(NotFittedError, match=re.escape(message)):
        QuantizationEstimator().predict(pd.DataFrame([AWQ_70B]))


def test_tiers_follow_the_bounds() -> None:
    tiers = QuantizationEstimator().tier_of(np.array([7.0, 8.0, 13.0, 34.0, 72.0, 180.0]))
    assert tiers.tolist() == [0, 0, 1, 2, 3, 4]


def test_bad_tier_bounds_are_rejected(jobs: pd.DataFrame) -> None:
    message = "`tier_bounds_billion` must be increasing positive parameter counts; got [40.0, 8.0]."
    with pytest.raises(InputError, match=re.escape(message)):
        QuantizationEstimator(tier_bounds_billion=(40.0, 8.0)).fit(*_xy(jobs))


def test_one_model_per_algorithm_and_tier(fitted: QuantizationEstimator) -> None:
    algorithms = {algorithm for algorithm, _ in fitted.cells_}
    assert algorithms == {"awq", "gptq", "bitsandbytes"}
    assert {tier for _, tier in fitted.cells_} == {0, 1, 2, 3, 4}
    assert fitted.provenance_.rows > 1_000


def test_p90_is_whole_gpu_hours_above_the_median(fitted: QuantizationEstimator) -> None:
    predicted = fitted.predict(pd.DataFrame([AWQ_70B, {**AWQ_70B, "algorithm": "gptq"}]))
    p90 = predicted["gpu_hours_p90"].to_numpy()
    assert np.all(p90 == np.ceil(p90))
    assert np.all(p90 >= predicted["gpu_hours_p50"].to_numpy())
    assert np.all(predicted["hours_p90"] >= predicted["hours_p50"])


def test_awq_70b_median_is_about_an_hour(fitted: QuantizationEstimator) -> None:
    forecast = fitted.forecast_spec(AWQ_70B, source="q.yaml")
    assert forecast.gpu_hours is not None
    assert 0.7 <= forecast.gpu_hours.p50 <= 1.5
    assert forecast.gpus.p50 == 1
    assert set(forecast.to_json()) == {"gpus", "hours", "gpu_hours"}


def test_a_fixed_safety_margin_replaces_the_residual_one(jobs: pd.DataFrame) -> None:
    estimator = QuantizationEstimator(safety_margin=3.0).fit(*_xy(jobs))
    predicted = estimator.predict(pd.DataFrame([AWQ_70B]))
    expected = np.ceil(predicted.loc[0, "gpu_hours_p50"] * 3.0)
    assert predicted.loc[0, "gpu_hours_p90"] == expected


def test_sparse_tier_falls_back_to_the_algorithm_fit(jobs: pd.DataFrame) -> None:
    estimator = QuantizationEstimator(min_jobs_per_tier=200).fit(*_xy(jobs))
    assert ("bitsandbytes", 4) not in estimator.cells_
    assert estimator.cell("bitsandbytes", 4).pooled
    predicted = estimator.predict(pd.DataFrame([{**AWQ_70B, "algorithm": "bitsandbytes"}]))
    assert predicted.loc[0, "gpu_hours_p50"] > 0


def test_an_algorithm_missing_from_the_history_cannot_be_forecast(jobs: pd.DataFrame) -> None:
    without_gptq = jobs[jobs["algorithm"] != "gptq"]
    estimator = QuantizationEstimator().fit(*_xy(without_gptq))
    message = "`algorithm` must be one the history holds jobs of (awq, bitsandbytes); got 'gptq'."
    with pytest.raises(InputError, match=re.escape(message)):
        estimator.predict(pd.DataFrame([{**AWQ_70B, "algorithm": "gptq"}]))


def test_held_out_coverage_meets_the_goal(jobs: pd.DataFrame) -> None:
    earlier, later = time_split(jobs)
    metrics = quantization_metrics("q", QuantizationEstimator().fit(*_xy(earlier)), later)
    assert metrics.coverage >= 0.95


def test_save_and_load_round_trip(fitted: QuantizationEstimator, tmp_path: Path) -> None:
    path = save_model(fitted, tmp_path / "quantization_estimator.json")
    loaded = load_model(path, QuantizationEstimator)
    spec = pd.DataFrame([AWQ_70B])
    pd.testing.assert_frame_equal(loaded.predict(spec), fitted.predict(spec))
