"""The job feature schemas: 22 training inputs defined once, validation that names rows."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from contract.errors import InputError
from features import job_costs
from features.job_features import (
    QUANTIZATION_SCHEMA,
    TRAINING_FEATURES,
    TRAINING_SCHEMA,
    VARIANTS,
    FeatureType,
    split_variant,
)
from training_data.history import generate_history

SPEC_7B_LORA: dict[str, object] = {
    "variant": "lora_sft",
    "params_billion": 7,
    "num_layers": 32,
    "hidden_size": 4096,
    "seq_len_tokens": 4096,
    "mean_sample_tokens": 1000,
    "dataset_tokens_million": 100,
    "epochs": 2,
    "global_batch_size": 128,
    "micro_batch_size": 2,
    "lora_rank": 16,
    "base_4bit": False,
    "precision": "bf16",
    "gpu_type": "a100-80gb",
    "gpu_memory_gb": 80,
    "gradient_checkpointing": True,
    "optimizer": "adamw",
    "sharding": "none",
    "rollout_samples_per_prompt": 0,
    "rollout_new_tokens": 0,
    "reward_model_params_billion": 0,
    "sequence_packing": True,
}


def test_training_schema_has_exactly_22_unique_inputs() -> None:
    names = [feature.name for feature in TRAINING_FEATURES]
    assert len(names) == 22
    assert len(set(names)) == 22


def test_variant_is_strategy_times_technique() -> None:
    assert len(VARIANTS) == 10
    assert {split_variant(v)[0].value for v in VARIANTS} == {"full", "lora"}
    assert {split_variant(v)[1].value for v in VARIANTS} == {"sft", "dpo", "rlhf", "rlvr", "cpt"}


def test_shared_features_are_one_definition() -> None:
    training = {f.name: f for f in TRAINING_SCHEMA.features}
    quantization = {f.name: f for f in QUANTIZATION_SCHEMA.features}
    assert training["params_billion"] is quantization["params_billion"]
    assert training["gpu_type"] is quantization["gpu_type"]


def test_schema_json_lists_name_type_unit_range_and_categories() -> None:
    entries = TRAINING_SCHEMA.to_json()
    assert len(entries) == 22
    assert all(set(e) == {"name", "type", "unit", "min", "max", "categories"} for e in entries)
    variant = next(e for e in entries if e["name"] == "variant")
    assert variant["type"] == "category"
    assert variant["categories"] == list(VARIANTS)
    numbers = [f for f in TRAINING_FEATURES if f.type in {FeatureType.NUMBER, FeatureType.INTEGER}]
    assert all(f.min is not None and f.max is not None for f in numbers)


def test_generated_history_passes_its_own_schema() -> None:
    history = generate_history(seed=3, training_jobs=300, quantization_jobs=60)
    training = history[history["kind"] == "training"]
    quantization = history[history["kind"] == "quantization"]
    TRAINING_SCHEMA.validate_frame(training[list(TRAINING_SCHEMA.names)], source="generated")
    QUANTIZATION_SCHEMA.validate_frame(quantization[list(QUANTIZATION_SCHEMA.names)], source="generated")


def test_a_valid_record_comes_back_typed() -> None:
    frame = TRAINING_SCHEMA.validate_record(SPEC_7B_LORA, source="job.yaml")
    assert frame.loc[0, "variant"] == "lora_sft"
    assert frame.loc[0, "params_billion"] == 7.0
    assert bool(frame.loc[0, "sequence_packing"]) is True


def test_unknown_category_names_column_row_and_choices() -> None:
    frame = pd.DataFrame([SPEC_7B_LORA, {**SPEC_7B_LORA, "gpu_type": "tpu-v5"}])
    message = (
        "jobs.csv: `gpu_type` must be one of ['a100-40gb', 'a100-80gb', 'h100-80gb', "
        "'h200-141gb', 'l40s-48gb']; got ['tpu-v5']. Broken at row 1."
    )
    with pytest.raises(InputError, match=re.escape(message)):
        TRAINING_SCHEMA.validate_frame(frame, source="jobs.csv")


def test_out_of_range_and_non_integer_values_are_reported_together() -> None:
    frame = pd.DataFrame(
        [
            {**SPEC_7B_LORA, "epochs": -1},
            SPEC_7B_LORA,
            {**SPEC_7B_LORA, "num_layers": 31.5},
        ]
    )
    message = (
        "`num_layers` must be an integer in [1, 256] (layers); got [31.5]. Broken at row 2. "
        "Also broken: `epochs` at row 0."
    )
    with pytest.raises(InputError, match=re.escape(message)):
        TRAINING_SCHEMA.validate_frame(frame, source="jobs.csv")


def test_missing_column_is_named() -> None:
    frame = pd.DataFrame([SPEC_7B_LORA]).drop(columns=["lora_rank", "epochs"])
    with pytest.raises(InputError, match=re.escape("Missing: epochs, lora_rank.")):
        TRAINING_SCHEMA.validate_frame(frame, source="jobs.csv")


def test_cross_feature_rule_lora_rank_on_full_fine_tuning() -> None:
    spec = {**SPEC_7B_LORA, "variant": "full_sft"}
    message = (
        "job.yaml: `variant, lora_rank` must be lora_rank > 0 for lora_* variants and 0 for "
        "full_* variants; got {'variant': 'full_sft', 'lora_rank': 16.0}."
    )
    with pytest.raises(InputError, match=re.escape(message)):
        TRAINING_SCHEMA.validate_record(spec, source="job.yaml")


def test_rl_variant_needs_rollouts() -> None:
    spec = {**SPEC_7B_LORA, "variant": "lora_rlvr"}
    with pytest.raises(InputError, match=re.escape("`variant, rollout_samples_per_prompt")):
        TRAINING_SCHEMA.validate_record(spec, source="job.yaml")


def test_record_with_unknown_key_suggests_the_schema_command() -> None:
    spec = {**SPEC_7B_LORA, "learning_rate": 2e-5}
    message = (
        "job.yaml: `learning_rate` must be a training feature; got 2e-05. Unknown keys: "
        "learning_rate. `gpuplan forecast job --schema --kind training` lists the features."
    )
    with pytest.raises(InputError, match=re.escape(message)):
        TRAINING_SCHEMA.validate_record(spec, source="job.yaml")


def test_record_missing_a_feature_names_it() -> None:
    spec = {k: v for k, v in SPEC_7B_LORA.items() if k != "optimizer"}
    with pytest.raises(InputError, match=re.escape("The spec lacks: optimizer.")):
        TRAINING_SCHEMA.validate_record(spec, source="job.yaml")


def test_boolean_accepts_yaml_and_csv_spellings() -> None:
    frame = pd.DataFrame([{**SPEC_7B_LORA, "base_4bit": word} for word in ("True", "false", 1, "no")])
    typed = TRAINING_SCHEMA.validate_frame(frame, source="jobs.csv")
    assert typed["base_4bit"].tolist() == [True, False, True, False]


def test_quantization_rule_calibration_for_layer_wise_algorithms() -> None:
    spec = {
        "params_billion": 7,
        "algorithm": "gptq",
        "calibration_samples": 0,
        "calibration_seq_len_tokens": 2048,
        "gpu_type": "a100-80gb",
    }
    with pytest.raises(InputError, match=re.escape("> 0 for awq and gptq")):
        QUANTIZATION_SCHEMA.validate_record(spec, source="q.yaml")


# --- memory: what cannot run is refused --------------------------------------------


def _training_frame(**changes: object) -> pd.DataFrame:
    return TRAINING_SCHEMA.validate_record({**SPEC_7B_LORA, **changes}, source="job.yaml")


@pytest.mark.parametrize(
    ("changes", "field", "fix"),
    [
        (
            {"variant": "full_sft", "lora_rank": 0, "micro_batch_size": 32, "gradient_checkpointing": False},
            (
                "`micro_batch_size` must be small enough for the job to fit in GPU memory (72.0 GB usable "
                "of 80 GB per GPU); got 32."
            ),
            (
                "Would fit: micro_batch_size: 2 with sharding: zero3 on 4 GPUs; or gradient_checkpointing: "
                "true with sharding: zero3 on 8 GPUs."
            ),
        ),
        (
            {"micro_batch_size": 1, "seq_len_tokens": 131072, "gradient_checkpointing": False},
            "`gradient_checkpointing` must be true for the job to fit in GPU memory",
            "Would fit: gradient_checkpointing: true on 1 GPUs",
        ),
        (
            {"params_billion": 405, "num_layers": 126, "hidden_size": 16384, "seq_len_tokens": 262144},
            "`seq_len_tokens` must be short enough for the job to fit in GPU memory",
            "the sequences must be shorter (seq_len_tokens) or split across GPUs (sequence parallelism).",
        ),
    ],
)
def test_a_job_that_fits_on_no_gpu_count_is_refused_with_what_would_fit(
    changes: dict[str, object], field: str, fix: str
) -> None:
    frame = _training_frame(**{"micro_batch_size": 1, **changes})
    assert not job_costs.fits_in_memory(frame)[0]
    with pytest.raises(InputError, match=re.escape(f"job.yaml: {field}")) as caught:
        job_costs.require_fits_in_memory(frame, source="job.yaml")
    assert fix in str(caught.value)


def test_every_job_the_history_generator_draws_fits() -> None:
    # The refusal and the history agree: nothing that "completed" would be refused.
    history = generate_history(seed=3, training_jobs=600, quantization_jobs=0)
    jobs = TRAINING_SCHEMA.validate_frame(history[list(TRAINING_SCHEMA.names)], source="history")
    assert job_costs.fits_in_memory(jobs).all()
    job_costs.require_fits_in_memory(jobs, source="history")
