"""TrainingEstimator: the scikit-learn contract, P50 <= P90, the issue's sanity
properties, the margins and coverage of the P90 per size, LoRA against full
fine-tuning, and refusing specs that fit in no GPU memory, on a model fitted to a small
generated history."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sklearn.base import clone

from contract.errors import InputError, NotFittedError
from features import job_costs
from features.job_features import TRAINING_SCHEMA
from forecasting.evaluation import slice_metrics, time_split, training_metrics
from forecasting.persistence import load_model, save_model
from forecasting.training_estimator import (
    AnalyticBaseline,
    SizeOnlyBaseline,
    TrainingEstimator,
)
from tests.features.test_job_features import SPEC_7B_LORA
from training_data.history import MODEL_FAMILY, completed_jobs, generate_history

SPEC_13B_FULL: dict[str, object] = {
    **SPEC_7B_LORA,
    "variant": "full_sft",
    "params_billion": 13,
    "num_layers": 40,
    "hidden_size": 5120,
    "lora_rank": 0,
    "sharding": "zero3",
}


@pytest.fixture(scope="module")
def jobs() -> pd.DataFrame:
    history = generate_history(seed=7, training_jobs=2_000, quantization_jobs=0)
    history = history.astype({"gpus": int})
    history["kind"] = "training"
    # The generator's frame is already typed; completed_jobs adds the duration target.
    return completed_jobs(history, "training")


@pytest.fixture(scope="module")
def fitted(jobs: pd.DataFrame) -> TrainingEstimator:
    return TrainingEstimator().fit(
        jobs[list(TRAINING_SCHEMA.names)],
        jobs[["gpus", "duration_hours"]],
        submit_times=jobs["submit_time"],
    )


def _frame(*specs: dict[str, object]) -> pd.DataFrame:
    return pd.DataFrame(list(specs))


# --- the contract -------------------------------------------------------------------


def test_init_only_stores_parameters() -> None:
    estimator = TrainingEstimator(n_estimators=10, learning_rate=0.2)
    assert estimator.get_params()["n_estimators"] == 10
    assert not [name for name in vars(estimator) if name.endswith("_")]
    assert clone(estimator).get_params() == estimator.get_params()


def test_predict_before_fit_raises_not_fitted() -> None:
    message = "This TrainingEstimator instance is not fitted yet."
    with pytest.raises(NotFittedError, match=re.escape(message)) as caught:
        TrainingEstimator().predict(_frame(SPEC_7B_LORA))
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, AttributeError)


def test_fit_returns_self_and_sets_provenance(jobs: pd.DataFrame) -> None:
    estimator = TrainingEstimator(n_estimators=5, calibration_fraction=0.0)
    x, y = jobs[list(TRAINING_SCHEMA.names)], jobs[["gpus", "duration_hours"]]
    assert estimator.fit(x, y, submit_times=jobs["submit_time"]) is estimator
    assert estimator.provenance_.rows == len(jobs)
    assert estimator.provenance_.window_start == str(jobs["submit_time"].min())
    assert len(estimator.provenance_.data_sha256) == 64


def test_fit_rejects_impossible_durations(jobs: pd.DataFrame) -> None:
    y = jobs[["gpus", "duration_hours"]].copy()
    y.loc[3, "duration_hours"] = -1.0
    with pytest.raises(InputError, match=re.escape("`y.duration_hours` must be finite durations > 0 hours")):
        TrainingEstimator(n_estimators=5).fit(jobs[list(TRAINING_SCHEMA.names)], y)


def test_predict_validates_its_input(fitted: TrainingEstimator) -> None:
    with pytest.raises(InputError, match=re.escape("`precision` must be one of")):
        fitted.predict(_frame({**SPEC_7B_LORA, "precision": "int3"}))


def test_predictions_are_ordered_and_powers_of_two(fitted: TrainingEstimator, jobs: pd.DataFrame) -> None:
    predicted = fitted.predict(jobs[list(TRAINING_SCHEMA.names)].head(300))
    assert (predicted["hours_p90"] >= predicted["hours_p50"]).all()
    assert (predicted["gpus_p90"] >= predicted["gpus_p50"]).all()
    gpus = predicted["gpus_p50"].to_numpy()
    assert np.all(gpus == 2 ** np.round(np.log2(gpus)))


def test_save_and_load_round_trip(fitted: TrainingEstimator, tmp_path: Path) -> None:
    path = save_model(fitted, tmp_path / "training_estimator.json")
    loaded = load_model(path, TrainingEstimator)
    spec = _frame(SPEC_7B_LORA)
    pd.testing.assert_frame_equal(loaded.predict(spec), fitted.predict(spec))
    # Data only: a JSON document and the boosters in LightGBM's text format, no pickle.
    document = json.loads(path.read_text())
    assert document["format_version"] == 2 and document["type"] == "TrainingEstimator"
    boosters = sorted(p.name for p in tmp_path.glob("*.lgb.txt"))
    assert boosters == sorted(document["boosters"].values()) and len(boosters) == 4
    assert all((tmp_path / name).read_text().startswith("tree\n") for name in boosters)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, *boosters])


def test_forecast_spec_returns_a_job_forecast(fitted: TrainingEstimator) -> None:
    forecast = fitted.forecast_spec(SPEC_7B_LORA, source="job.yaml")
    payload = forecast.to_json()
    assert set(payload) == {"gpus", "hours"}
    assert payload["hours"]["p90"] >= payload["hours"]["p50"] > 0


# --- the sanity properties ----------------------------------------------------


def test_lora_needs_fewer_gpus_than_full_fine_tuning(fitted: TrainingEstimator) -> None:
    lora = {**SPEC_13B_FULL, "variant": "lora_sft", "lora_rank": 16}
    predicted = fitted.predict(_frame(SPEC_13B_FULL, lora))
    assert predicted.loc[1, "gpus_p50"] < predicted.loc[0, "gpus_p50"]
    assert predicted.loc[1, "gpus_p90"] <= predicted.loc[0, "gpus_p90"]


@settings(max_examples=20, deadline=None)
@given(
    reward_billion=st.sampled_from([0.5, 1.0, 3.0, 7.0]),
    prompt_tokens_million=st.floats(min_value=0.5, max_value=50.0),
    samples=st.sampled_from([1, 2, 4]),
)
def test_rlhf_takes_longer_than_sft(
    fitted: TrainingEstimator, reward_billion: float, prompt_tokens_million: float, samples: int
) -> None:
    rlhf = {
        **SPEC_7B_LORA,
        "variant": "lora_rlhf",
        "mean_sample_tokens": 500,
        "dataset_tokens_million": prompt_tokens_million,
        "rollout_samples_per_prompt": samples,
        "rollout_new_tokens": 512,
        "reward_model_params_billion": reward_billion,
        # Packed, so SFT pays no padding: the same tokens, with or without rollouts.
        "sequence_packing": True,
    }
    sft = {
        **rlhf,
        "variant": "lora_sft",
        "rollout_samples_per_prompt": 0,
        "rollout_new_tokens": 0,
        "reward_model_params_billion": 0,
    }
    predicted = fitted.predict(_frame(sft, rlhf))
    gpu_hours = predicted["gpus_p50"] * predicted["hours_p50"]
    assert gpu_hours[1] > gpu_hours[0]
    # A reward model and critic big enough to need more GPUs can shorten the wall
    # clock; on the same GPUs, RLHF is always the longer job.
    if predicted.loc[1, "gpus_p50"] == predicted.loc[0, "gpus_p50"]:
        assert predicted.loc[1, "hours_p50"] > predicted.loc[0, "hours_p50"]


@settings(max_examples=25, deadline=None)
@given(
    tokens=st.floats(min_value=0.5, max_value=5_000.0),
    factor=st.floats(min_value=1.0, max_value=20.0),
    variant=st.sampled_from(["lora_sft", "full_sft", "full_cpt", "lora_dpo"]),
    epochs=st.sampled_from([1, 2, 3]),
)
def test_more_tokens_never_take_less_time(
    fitted: TrainingEstimator, tokens: float, factor: float, variant: str, epochs: int
) -> None:
    base = {**SPEC_7B_LORA, "variant": variant, "epochs": epochs}
    if variant.startswith("full"):
        base = {**base, "lora_rank": 0}
    specs = [{**base, "dataset_tokens_million": t} for t in (tokens, tokens * factor)]
    predicted = fitted.predict(_frame(*specs))
    assert predicted.loc[1, "hours_p50"] >= predicted.loc[0, "hours_p50"]
    assert predicted.loc[1, "hours_p90"] >= predicted.loc[0, "hours_p90"]


@pytest.mark.parametrize("variant", ["lora_sft", "lora_cpt", "lora_dpo", "full_sft", "full_cpt", "full_dpo"])
def test_hours_never_fall_along_a_dense_grid_of_tokens(fitted: TrainingEstimator, variant: str) -> None:
    # 600 sizes from 0.5 M to 100 B tokens at each epoch count: the LoRA cap by full
    # fine-tuning once shrank a P50 by the P90's factor and broke the order here.
    base = {**SPEC_7B_LORA, "variant": variant, "lora_rank": 16 if variant.startswith("lora") else 0}
    tokens = np.geomspace(0.5, 100_000.0, 600)
    for epochs in (1, 2, 3):
        specs = [{**base, "epochs": epochs, "dataset_tokens_million": t} for t in tokens]
        predicted = fitted.predict(_frame(*specs))
        for column in ("hours_p50", "hours_p90"):
            steps = np.diff(predicted[column].to_numpy())
            assert (steps >= 0).all(), (epochs, column, tokens[int(np.argmin(steps))])


@settings(max_examples=25, deadline=None)
@given(
    variant=st.sampled_from(["lora_sft", "full_sft", "full_dpo", "lora_cpt"]),
    gpu=st.sampled_from(["a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l40s-48gb"]),
    sharding=st.sampled_from(["none", "zero1", "zero2", "zero3"]),
    checkpointing=st.booleans(),
)
def test_a_70b_model_never_gets_fewer_gpus_than_a_7b_one(
    fitted: TrainingEstimator, variant: str, gpu: str, sharding: str, checkpointing: bool
) -> None:
    memory = {"a100-40gb": 40, "a100-80gb": 80, "h100-80gb": 80, "h200-141gb": 141}
    base = {
        **SPEC_7B_LORA,
        "variant": variant,
        "lora_rank": 16 if variant.startswith("lora") else 0,
        "gpu_type": gpu,
        "gpu_memory_gb": memory.get(gpu, 48),
        "sharding": sharding,
        "gradient_checkpointing": checkpointing,
    }
    big = {**base, "params_billion": 70, "num_layers": 80, "hidden_size": 8192}
    frame = TRAINING_SCHEMA.validate_frame(_frame(base, big), source="specs")
    # Specs whose activations fit on no GPU are refused, not forecast (tested below).
    assume(job_costs.fits_in_memory(frame).all())
    predicted = fitted.predict(_frame(base, big))
    assert predicted.loc[1, "gpus_p50"] >= predicted.loc[0, "gpus_p50"]
    assert predicted.loc[1, "gpus_p90"] >= predicted.loc[0, "gpus_p90"]


# --- the P90: margins, coverage per size, physics ------------------------------------

#: (params, layers, width) of every base model the history draws from, 0.5B to 405B.
SIZES = [tuple(row) for row in MODEL_FAMILY.tolist()]
TECHNIQUES = ["sft", "dpo", "cpt", "rlhf", "rlvr"]


def _job(size: tuple[float, float, float], technique: str, strategy: str, tokens: float) -> dict[str, object]:
    params, layers, width = size
    spec: dict[str, object] = {
        **SPEC_7B_LORA,
        "variant": f"{strategy}_{technique}",
        "lora_rank": 16 if strategy == "lora" else 0,
        "params_billion": params,
        "num_layers": int(layers),
        "hidden_size": int(width),
        "dataset_tokens_million": tokens,
        "sharding": "zero3",
        "micro_batch_size": 1,
    }
    if technique in ("rlhf", "rlvr"):
        spec |= {"rollout_samples_per_prompt": 4, "rollout_new_tokens": 512, "mean_sample_tokens": 300}
        spec["reward_model_params_billion"] = max(0.5, params / 10) if technique == "rlhf" else 0
    return spec


@settings(max_examples=25, deadline=None)
@given(
    size=st.sampled_from(SIZES),
    technique=st.sampled_from(TECHNIQUES),
    strategy=st.sampled_from(["full", "lora"]),
    tokens=st.floats(min_value=0.01, max_value=5_000.0),
)
def test_p90_keeps_a_real_margin_over_p50_for_jobs_of_every_size(
    fitted: TrainingEstimator, size: tuple[float, float, float], technique: str, strategy: str, tokens: float
) -> None:
    predicted = fitted.predict(_frame(_job(size, technique, strategy, tokens)))
    ratio = float(predicted.loc[0, "hours_p90"] / predicted.loc[0, "hours_p50"])
    # At least the estimator's floor, and never the 20x-54x the first version gave a
    # 20-minute job or the 1.0x it gave a month-long one.
    assert fitted.min_p90_ratio - 1e-9 <= ratio <= 4.0


def test_every_size_gets_a_p90_margin_that_follows_the_job(fitted: TrainingEstimator) -> None:
    specs = [_job(size, "sft", "full", 100.0) for size in SIZES]
    predicted = fitted.predict(_frame(*specs))
    ratios = (predicted["hours_p90"] / predicted["hours_p50"]).to_numpy()
    assert (ratios >= 1.1 - 1e-9).all()
    # Short and long jobs get margins of the same order, not one for all in hours.
    assert ratios.max() / ratios.min() < 2.5


@settings(max_examples=30, deadline=None)
@given(
    size=st.sampled_from(SIZES),
    technique=st.sampled_from(TECHNIQUES),
    tokens=st.floats(min_value=0.01, max_value=5_000.0),
    adapter=st.tuples(st.sampled_from([8, 16, 64, 256]), st.booleans()),
)
def test_lora_never_takes_more_gpu_hours_than_full_fine_tuning(
    fitted: TrainingEstimator,
    size: tuple[float, float, float],
    technique: str,
    tokens: float,
    adapter: tuple[int, bool],
) -> None:
    rank, base_4bit = adapter
    full = _job(size, technique, "full", tokens)
    lora = {**_job(size, technique, "lora", tokens), "lora_rank": rank, "base_4bit": base_4bit}
    predicted = fitted.predict(_frame(full, lora))
    p50 = predicted["gpus_p50"] * predicted["hours_p50"]
    p90 = predicted["gpus_p90"] * predicted["hours_p90"]
    assert p50[1] <= p50[0] * (1 + 1e-9)
    assert p90[1] <= p90[0] * (1 + 1e-9)
    assert predicted.loc[1, "gpus_p50"] <= predicted.loc[0, "gpus_p50"]


def test_a_spec_that_fits_in_no_gpu_memory_is_refused(fitted: TrainingEstimator) -> None:
    # The example: a 7B full fine-tune, AdamW, no sharding, micro-batch 32 on
    # 80 GB GPUs once forecast 4,096 GPUs for 0.07 hours.
    spec = {
        **SPEC_7B_LORA,
        "variant": "full_sft",
        "lora_rank": 0,
        "micro_batch_size": 32,
        "gradient_checkpointing": False,
        "gpu_type": "h100-80gb",
    }
    message = (
        "job.yaml: `micro_batch_size` must be small enough for the job to fit in GPU memory "
        "(72.0 GB usable of 80 GB per GPU); got 32. With sharding none, each GPU holds 112.0 GB "
        "of weights, gradients, optimizer states and frozen models even on 4,096 GPUs, plus "
        "584.1 GB of activations for 32 sequences x 4,096 tokens without gradient checkpointing"
    )
    with pytest.raises(InputError, match=re.escape(message)) as caught:
        fitted.forecast_spec(spec, source="job.yaml")
    assert "Would fit: micro_batch_size: 2 with sharding: zero3 on 4 GPUs; or " in str(caught.value)
    # Each suggestion really fits: forecasting it succeeds.
    for fix in ({"micro_batch_size": 2, "sharding": "zero3"}, {"gradient_checkpointing": True}):
        assert fitted.forecast_spec({**spec, **fix}, source="job.yaml").gpus.p50 <= 8


def test_predict_refuses_a_frame_with_an_infeasible_row(fitted: TrainingEstimator) -> None:
    bad = {**SPEC_7B_LORA, "variant": "full_sft", "lora_rank": 0, "micro_batch_size": 64}
    with pytest.raises(InputError, match=re.escape("Broken at row 1. With sharding none")):
        fitted.predict(_frame(SPEC_7B_LORA, bad))


# --- accuracy against the baselines ---------------------------------------------------


def test_beats_the_size_only_baseline_on_later_jobs(jobs: pd.DataFrame) -> None:
    earlier, later = time_split(jobs)
    x, y = earlier[list(TRAINING_SCHEMA.names)], earlier[["gpus", "duration_hours"]]
    model = training_metrics("lgbm", TrainingEstimator().fit(x, y), later)
    size_only = training_metrics("size", SizeOnlyBaseline().fit(x, y), later)
    analytic = training_metrics("analytic", AnalyticBaseline().fit(x, y), later)
    assert model.log_mae_hours * 2 <= size_only.log_mae_hours
    assert model.log_mae_hours < analytic.log_mae_hours
    # The goal: below the analytic-FLOPs baseline at both quantiles.
    assert model.pinball_p50_log_hours < analytic.pinball_p50_log_hours
    assert model.pinball_p90_log_hours < analytic.pinball_p90_log_hours
    # 400 held-out jobs: allow sampling error around the 0.90 target.
    assert 0.84 <= model.p90_coverage <= 0.96
    assert model.gpu_accuracy >= 0.85


@pytest.mark.parametrize("train_share", [0.6, 0.8])
def test_p90_covers_every_quintile_of_held_out_jobs(jobs: pd.DataFrame, train_share: float) -> None:
    """Two time-ordered folds: fit on the first ``train_share`` of jobs, score the next
    20%. The first version covered its shortest fifth 1.00 and its longest 0.72."""
    ordered = jobs.sort_values("submit_time", kind="stable").reset_index(drop=True)
    cut, end = round(len(ordered) * train_share), round(len(ordered) * (train_share + 0.2))
    earlier, later = ordered.iloc[:cut], ordered.iloc[cut:end].reset_index(drop=True)
    x, y = earlier[list(TRAINING_SCHEMA.names)], earlier[["gpus", "duration_hours"]]
    model = TrainingEstimator().fit(x, y)
    slices = slice_metrics(model, AnalyticBaseline().fit(x, y), later)
    coverage = [row.p90_coverage for row in slices if row.target == "hours"]
    assert len(coverage) == 5
    # About 75 jobs per quintile: 0.90 +- 3 standard errors.
    assert all(0.78 <= value <= 0.99 for value in coverage), coverage
    ratios = [row.median_p90_over_p50 for row in slices if row.target == "hours"]
    assert max(ratios) / min(ratios) < 2.0, ratios
