"""The feature schemas of batch jobs: 22 inputs for training jobs, 5 for quantization jobs.

Each feature is defined once (name, type, unit, allowed range or categories) and the
schemas only list them, so the forecast spec, the history file, the CLI's ``--schema``
output and the estimators all read the same definitions. Validation collects every
broken value before raising, so one error names all the rows and columns to fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd

from contract.errors import InputError
from contract.scenario import JobKind
from features.gpu_models import GPU_SPECS

# How many offending rows an error message lists before it says "+N more".
_MAX_ROWS_SHOWN = 8


class FeatureType(StrEnum):
    NUMBER = "number"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    CATEGORY = "category"


class Strategy(StrEnum):
    """Which weights a training job updates."""

    FULL = "full"
    LORA = "lora"


class Technique(StrEnum):
    """The training objective; the RL techniques generate rollouts before each update."""

    SFT = "sft"
    DPO = "dpo"
    RLHF = "rlhf"  # PPO with a reward model and a critic
    RLVR = "rlvr"  # GRPO-style: verifiable rewards, no critic
    CPT = "cpt"  # continued pre-training


VARIANTS: tuple[str, ...] = tuple(f"{s.value}_{t.value}" for s in Strategy for t in Technique)


def split_variant(variant: str) -> tuple[Strategy, Technique]:
    strategy, technique = variant.split("_", 1)
    return Strategy(strategy), Technique(technique)


# GPU types the cluster knows, with the memory each has (the datasheet: features/gpu_models.py).
GPU_MEMORY_GB: dict[str, float] = {name: spec.memory_gb for name, spec in GPU_SPECS.items()}


class QuantAlgorithm(StrEnum):
    BITSANDBYTES = "bitsandbytes"
    AWQ = "awq"
    GPTQ = "gptq"


@dataclass(frozen=True, slots=True)
class Feature:
    """One model input: what it means, its unit and the values it may take."""

    name: str
    type: FeatureType
    unit: str
    description: str
    min: float | None = None
    max: float | None = None
    categories: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "type": self.type.value,
            "unit": self.unit,
            "min": self.min,
            "max": self.max,
            "categories": None if self.categories is None else list(self.categories),
        }

    @property
    def expected(self) -> str:
        """The allowed values in words, for error messages."""
        if self.type is FeatureType.CATEGORY:
            return f"one of {list(self.categories or ())}"
        if self.type is FeatureType.BOOLEAN:
            return "true or false"
        kind = "an integer" if self.type is FeatureType.INTEGER else "a number"
        return f"{kind} in [{self.min:g}, {self.max:g}] ({self.unit})"

    def coerce_column(self, column: pd.Series) -> tuple[pd.Series, pd.Series]:
        """The column in this feature's dtype, and a mask of the rows that break the rule."""
        if self.type is FeatureType.CATEGORY:
            text = column.astype("string").str.strip().str.lower()
            bad = ~text.isin(list(self.categories or ())).fillna(False).astype(bool)
            return text.astype(object), bad
        if self.type is FeatureType.BOOLEAN:
            text = column.astype("string").str.strip().str.lower()
            mapped = text.map(_BOOLEAN_WORDS)
            bad = mapped.isna()
            return mapped.where(~bad, other=False).astype(bool), bad
        numbers = pd.to_numeric(column, errors="coerce").astype(float)
        values = numbers.to_numpy()
        broken = ~np.isfinite(values)
        if self.min is not None:
            broken |= values < self.min
        if self.max is not None:
            broken |= values > self.max
        if self.type is FeatureType.INTEGER:
            broken |= np.isfinite(values) & (values != np.round(values))
        return numbers, pd.Series(broken, index=column.index)


_BOOLEAN_WORDS = {
    "true": True,
    "false": False,
    "1": True,
    "0": False,
    "1.0": True,
    "0.0": False,
    "yes": True,
    "no": False,
}


def _number(name: str, unit: str, low: float, high: float, description: str) -> Feature:
    return Feature(name, FeatureType.NUMBER, unit, description, low, high)


def _integer(name: str, unit: str, low: float, high: float, description: str) -> Feature:
    return Feature(name, FeatureType.INTEGER, unit, description, low, high)


def _boolean(name: str, description: str) -> Feature:
    return Feature(name, FeatureType.BOOLEAN, "flag", description)


def _category(name: str, categories: tuple[str, ...], description: str) -> Feature:
    return Feature(name, FeatureType.CATEGORY, "category", description, categories=categories)


# Shared by both schemas: defined once, listed twice.
PARAMS_BILLION = _number("params_billion", "billion parameters", 0.05, 2000.0, "parameters of the base model")
GPU_TYPE = _category("gpu_type", tuple(GPU_MEMORY_GB), "the GPU model the job runs on")

TRAINING_FEATURES: tuple[Feature, ...] = (
    _category("variant", VARIANTS, "strategy {full, lora} x technique {sft, dpo, rlhf, rlvr, cpt}"),
    PARAMS_BILLION,
    _integer("num_layers", "layers", 1, 256, "transformer layers of the base model"),
    _integer("hidden_size", "units", 128, 65536, "model width (d_model)"),
    _integer(
        "seq_len_tokens",
        "tokens",
        64,
        262144,
        "longest training sequence (for RL: prompt plus generated response)",
    ),
    _integer(
        "mean_sample_tokens",
        "tokens",
        1,
        262144,
        "mean length of one dataset sample (for RL: of one prompt)",
    ),
    _number(
        "dataset_tokens_million",
        "million tokens",
        0.001,
        1.0e6,
        "tokens in one pass over the dataset (for DPO chosen plus rejected; for RL the prompts)",
    ),
    _number("epochs", "passes", 0.01, 100.0, "passes over the dataset"),
    _integer("global_batch_size", "sequences", 1, 65536, "sequences per optimizer step"),
    _integer("micro_batch_size", "sequences", 1, 1024, "sequences per GPU per forward pass"),
    _integer("lora_rank", "rank", 0, 4096, "LoRA adapter rank (0 for full fine-tuning)"),
    _boolean("base_4bit", "the frozen base is loaded in 4 bits (QLoRA)"),
    _category("precision", ("bf16", "fp16", "fp8", "fp32"), "compute precision"),
    GPU_TYPE,
    _number("gpu_memory_gb", "GB", 8.0, 512.0, "memory of one GPU"),
    _boolean("gradient_checkpointing", "activations are recomputed in the backward pass"),
    _category("optimizer", ("adamw", "adamw_8bit", "adafactor"), "optimizer"),
    _category(
        "sharding",
        ("none", "zero1", "zero2", "zero3"),
        "ZeRO stage (FSDP SHARD_GRAD_OP = zero2, FULL_SHARD = zero3; none = plain data parallel)",
    ),
    _integer("rollout_samples_per_prompt", "samples", 0, 1024, "responses per prompt (RL only, else 0)"),
    _integer("rollout_new_tokens", "tokens", 0, 131072, "generated tokens per response (RL only, else 0)"),
    _number(
        "reward_model_params_billion",
        "billion parameters",
        0.0,
        2000.0,
        "reward model, and critic of the same size, for RLHF (0 when none)",
    ),
    _boolean("sequence_packing", "samples are packed into full sequences (no padding)"),
)

QUANTIZATION_FEATURES: tuple[Feature, ...] = (
    PARAMS_BILLION,
    _category("algorithm", tuple(a.value for a in QuantAlgorithm), "post-training quantization method"),
    _integer("calibration_samples", "samples", 0, 100000, "calibration samples (0 for bitsandbytes)"),
    _integer(
        "calibration_seq_len_tokens",
        "tokens",
        0,
        131072,
        "tokens per calibration sample (0 for bitsandbytes)",
    ),
    GPU_TYPE,
)


@dataclass(frozen=True, slots=True)
class RowRule:
    """A rule across features of one row; ``broken`` returns the mask of rows that break it."""

    columns: tuple[str, ...]
    expected: str
    broken: Callable[[pd.DataFrame], pd.Series]


# variant -> (strategy, technique), looked up rather than split per row (hot in fitting).
_VARIANT_PARTS = {variant: variant.split("_", 1) for variant in VARIANTS}


def technique_of(frame: pd.DataFrame) -> pd.Series:
    """The technique part of each row's ``variant``."""
    return frame["variant"].astype(str).map({v: parts[1] for v, parts in _VARIANT_PARTS.items()})


def is_lora(frame: pd.DataFrame) -> pd.Series:
    """Whether each row's ``variant`` trains LoRA adapters."""
    lora = {v: parts[0] == Strategy.LORA.value for v, parts in _VARIANT_PARTS.items()}
    return frame["variant"].astype(str).map(lora).fillna(False).astype(bool)


def _is_rl(frame: pd.DataFrame) -> pd.Series:
    return technique_of(frame).isin([Technique.RLHF.value, Technique.RLVR.value])


TRAINING_RULES: tuple[RowRule, ...] = (
    RowRule(
        ("variant", "lora_rank"),
        "lora_rank > 0 for lora_* variants and 0 for full_* variants",
        lambda f: is_lora(f) != (f["lora_rank"] > 0),
    ),
    RowRule(
        ("variant", "base_4bit"),
        "base_4bit false for full_* variants (a 4-bit base cannot be trained)",
        lambda f: ~is_lora(f) & f["base_4bit"].astype(bool),
    ),
    RowRule(
        ("variant", "rollout_samples_per_prompt", "rollout_new_tokens"),
        "rollout_samples_per_prompt and rollout_new_tokens > 0 for rlhf/rlvr and 0 otherwise",
        lambda f: (
            (_is_rl(f) != (f["rollout_samples_per_prompt"] > 0))
            | (_is_rl(f) != (f["rollout_new_tokens"] > 0))
        ),
    ),
    RowRule(
        ("variant", "reward_model_params_billion"),
        "reward_model_params_billion > 0 for rlhf (PPO needs a reward model) and 0 for "
        "sft, dpo and cpt (rlvr may use one or a verifier)",
        lambda f: (
            ((technique_of(f) == Technique.RLHF.value) & (f["reward_model_params_billion"] <= 0))
            | (~_is_rl(f) & (f["reward_model_params_billion"] > 0))
        ),
    ),
    RowRule(
        ("mean_sample_tokens", "seq_len_tokens"),
        "mean_sample_tokens <= seq_len_tokens",
        lambda f: f["mean_sample_tokens"] > f["seq_len_tokens"],
    ),
    RowRule(
        ("rollout_new_tokens", "seq_len_tokens"),
        "rollout_new_tokens < seq_len_tokens (the sequence holds prompt and response)",
        lambda f: _is_rl(f) & (f["rollout_new_tokens"] >= f["seq_len_tokens"]),
    ),
    RowRule(
        ("micro_batch_size", "global_batch_size"),
        "micro_batch_size <= global_batch_size",
        lambda f: f["micro_batch_size"] > f["global_batch_size"],
    ),
)

_LAYER_WISE = (QuantAlgorithm.AWQ.value, QuantAlgorithm.GPTQ.value)

QUANTIZATION_RULES: tuple[RowRule, ...] = (
    RowRule(
        ("algorithm", "calibration_samples", "calibration_seq_len_tokens"),
        "calibration_samples and calibration_seq_len_tokens > 0 for awq and gptq",
        lambda f: (
            f["algorithm"].isin(_LAYER_WISE)
            & ((f["calibration_samples"] <= 0) | (f["calibration_seq_len_tokens"] <= 0))
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class FeatureSchema:
    kind: JobKind
    features: tuple[Feature, ...]
    rules: tuple[RowRule, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(feature.name for feature in self.features)

    def to_json(self) -> list[dict[str, object]]:
        return [feature.to_json() for feature in self.features]

    def validate_frame(
        self, frame: pd.DataFrame, *, source: str, row_labels: pd.Series | None = None
    ) -> pd.DataFrame:
        """The schema's columns of ``frame`` in their dtypes; raise InputError naming bad rows.

        ``row_labels`` says how to name a row in messages (default: ``row <index>``);
        the history loader passes file line numbers.
        """
        missing = [name for name in self.names if name not in frame.columns]
        if missing:
            raise InputError(
                "columns",
                f"to include every {self.kind} feature",
                sorted(frame.columns.astype(str)),
                source=source,
                hint=f"Missing: {', '.join(missing)}. "
                f"`gpuplan forecast job --schema --kind {self.kind}` lists them.",
            )
        labels = (
            row_labels
            if row_labels is not None
            else pd.Series([f"row {i}" for i in frame.index], index=frame.index)
        )
        problems: list[_Problem] = []
        clean: dict[str, pd.Series] = {}
        for feature in self.features:
            values, bad = feature.coerce_column(frame[feature.name])
            clean[feature.name] = values
            if bad.any():
                bad_values = [_plain(v) for v in frame.loc[bad, feature.name].head(3)]
                problems.append(
                    _Problem(feature.name, feature.expected, bad_values, tuple(labels[bad].astype(str)))
                )
        result = pd.DataFrame(clean, index=frame.index)
        if not problems:
            # Cross-feature rules only make sense once every single value is valid.
            for rule in self.rules:
                bad = rule.broken(result).fillna(False).astype(bool)
                if bad.any():
                    first = result.loc[bad, list(rule.columns)].head(1)
                    first_values = {str(k): _plain(v) for k, v in first.iloc[0].items()}
                    problems.append(
                        _Problem(
                            ", ".join(rule.columns),
                            rule.expected,
                            first_values,
                            tuple(labels[bad].astype(str)),
                        )
                    )
        if problems:
            raise problems[0].error(source, problems[1:])
        return result

    def validate_record(self, record: Mapping[str, object], *, source: str) -> pd.DataFrame:
        """One job spec (feature name -> value) as a validated one-row frame."""
        unknown = sorted(set(record) - set(self.names))
        if unknown:
            raise InputError(
                unknown[0],
                f"a {self.kind} feature",
                record[unknown[0]],
                source=source,
                hint=f"Unknown keys: {', '.join(unknown)}. "
                f"`gpuplan forecast job --schema --kind {self.kind}` lists the features.",
            )
        frame = pd.DataFrame([{name: record.get(name) for name in self.names}])
        absent = [name for name in self.names if record.get(name) is None]
        if absent:
            feature = self.features[self.names.index(absent[0])]
            raise InputError(
                absent[0],
                feature.expected,
                None,
                source=source,
                hint=f"The spec lacks: {', '.join(absent)}.",
            )
        return self.validate_frame(
            frame, source=source, row_labels=pd.Series(["the spec"], index=frame.index)
        )


def describe_rows(rows: Sequence[str]) -> str:
    """The first few row labels, and how many more, for an error message."""
    shown = ", ".join(rows[:_MAX_ROWS_SHOWN])
    extra = len(rows) - _MAX_ROWS_SHOWN
    return f"{shown} (+{extra} more)" if extra > 0 else shown


@dataclass(frozen=True, slots=True)
class _Problem:
    """One broken column or rule: what it expects, a few bad values, the rows that break it."""

    field: str
    expected: str
    got: object
    rows: tuple[str, ...]

    def where(self) -> str:
        return describe_rows(self.rows)

    def error(self, source: str, others: list[_Problem]) -> InputError:
        hint = f"Broken at {self.where()}."
        if others:
            hint += " Also broken: " + "; ".join(f"`{p.field}` at {p.where()}" for p in others)
            hint += "."
        return InputError(self.field, self.expected, self.got, source=source, hint=hint)


def _plain(value: object) -> object:
    """Numpy scalars and NaN as plain Python, so messages read like the file."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


TRAINING_SCHEMA = FeatureSchema(JobKind.TRAINING, TRAINING_FEATURES, TRAINING_RULES)
QUANTIZATION_SCHEMA = FeatureSchema(JobKind.QUANTIZATION, QUANTIZATION_FEATURES, QUANTIZATION_RULES)

SCHEMAS: dict[JobKind, FeatureSchema] = {
    JobKind.TRAINING: TRAINING_SCHEMA,
    JobKind.QUANTIZATION: QUANTIZATION_SCHEMA,
}
