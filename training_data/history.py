"""The job history the batch-job forecasters learn from: schema, generator, loader.

One table holds every finished batch job, training and quantization alike (the daemon
appends finished jobs in the same schema): the common columns of ``COMMON_COLUMNS``,
then the features of the job's kind (features/job_features.py); a row leaves the other
kind's features empty. ``load_history`` validates a user's file against this schema;
``generate_history`` draws the bundled history, whose costs follow the published
formulas of features/job_costs.py with the noise documented beside each draw.

Run ``python -m training_data.history`` to regenerate the bundled file.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from contract.errors import InputError
from contract.files import MAX_TABLE_BYTES, read_bytes, read_csv
from contract.scenario import JobKind
from features import job_costs
from features.job_features import (
    GPU_MEMORY_GB,
    QUANTIZATION_SCHEMA,
    SCHEMAS,
    TRAINING_SCHEMA,
    FeatureType,
    describe_rows,
)

logger = logging.getLogger(__name__)

BUNDLED_HISTORY = Path(__file__).with_name("job_history.csv.gz")
DEFAULT_SEED = 20240101
DEFAULT_TRAINING_JOBS = 20_000
DEFAULT_QUANTIZATION_JOBS = 2_000
HISTORY_START = pd.Timestamp("2024-01-01T00:00:00Z")
HISTORY_DAYS = 365
# A submitter splits anything longer than a month into several jobs.
MAX_JOB_HOURS = 720.0
# Activations may take at most half a GPU's usable memory; the rest holds the model.
ACTIVATION_SHARE = 0.5

OUTCOMES = ("completed", "failed", "cancelled")
KINDS: tuple[JobKind, ...] = JobKind.forecast()


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    unit: str
    description: str


COMMON_COLUMNS: tuple[Column, ...] = (
    Column("job_id", "text", "unique id"),
    Column("kind", "category", "training or quantization"),
    Column("submit_time", "ISO 8601 UTC", "when the job was submitted"),
    Column("start_time", "ISO 8601 UTC", "when it started (>= submit_time)"),
    Column("end_time", "ISO 8601 UTC", "when it ended (>= start_time)"),
    Column("gpus", "GPUs", "GPUs it held (integer >= 1)"),
    Column("outcome", "category", "completed, failed or cancelled; only completed jobs train"),
)
COMMON_NAMES = tuple(column.name for column in COMMON_COLUMNS)
FEATURE_NAMES = tuple(dict.fromkeys(TRAINING_SCHEMA.names + QUANTIZATION_SCHEMA.names))
HISTORY_COLUMNS = COMMON_NAMES + FEATURE_NAMES


# --- loading and validation ------------------------------------------------------


def read_history(path: Path) -> pd.DataFrame:
    """Read a history file (UTF-8 CSV, optionally gzipped, or Parquet) without validating it."""
    if path.suffix == ".parquet":
        read_bytes(path, "--history", max_bytes=MAX_TABLE_BYTES)  # exists, regular, bounded
        try:
            return pd.read_parquet(path)
        except ImportError as error:
            raise InputError(
                "--history",
                "a CSV file (Parquet needs pyarrow)",
                str(path),
                hint="Install pyarrow or convert the file to CSV.",
            ) from error
        except (ValueError, OSError) as error:
            raise InputError("--history", "a readable Parquet file", str(path), hint=f"{error}.") from None
    return read_csv(path, "--history", low_memory=False)


def _require_columns(raw: pd.DataFrame, names: Sequence[str], what: str, *, source: str) -> None:
    missing = [name for name in names if name not in raw.columns]
    if missing:
        raise InputError(
            ", ".join(missing),
            f"in the header ({what})",
            "missing",
            source=source,
            hint="training_data/README.md documents the schema.",
        )


def validate_history(raw: pd.DataFrame, *, source: str) -> pd.DataFrame:
    """The history with typed columns; InputError naming the lines and columns it breaks.

    Lines count as in the CSV file: the header is line 1, the first job line 2.
    """
    _require_columns(raw, COMMON_NAMES, "job-history columns", source=source)
    frame = raw.reset_index(drop=True)
    lines = pd.Series([f"line {i + 2}" for i in range(len(frame))], index=frame.index)
    common = _validate_common(frame, source=source, lines=lines)
    by_kind: list[pd.DataFrame] = []
    for kind in KINDS:
        rows = common["kind"] == kind
        if rows.any():
            _require_columns(
                raw, SCHEMAS[kind].names, f"{kind} features, as the file has {kind} jobs", source=source
            )
            by_kind.append(
                SCHEMAS[kind].validate_frame(
                    frame.loc[rows], source=f"{source} ({kind} jobs)", row_labels=lines[rows]
                )
            )
    # Rows of the two kinds stack; their shared features (params_billion, gpu_type) merge.
    features = pd.concat(by_kind).reindex(frame.index) if by_kind else pd.DataFrame()
    typed = pd.concat([common, features], axis=1)
    # Every column, even of a kind with no rows, so that a header-only history or one of
    # a single kind reads as "no jobs of that kind" downstream, not as a missing column.
    return typed.reindex(columns=list(HISTORY_COLUMNS))


def _validate_common(frame: pd.DataFrame, *, source: str, lines: pd.Series) -> pd.DataFrame:
    def fail(column: str, expected: str, bad: pd.Series) -> InputError:
        return InputError(
            column,
            expected,
            [None if pd.isna(v) else v for v in frame.loc[bad, column].head(3)],
            source=source,
            hint=f"Broken at {describe_rows(tuple(lines[bad]))}.",
        )

    kind = frame["kind"].astype("string").str.strip().str.lower()
    bad_kind = ~kind.isin([k.value for k in KINDS]).fillna(False).astype(bool)
    if bad_kind.any():
        raise fail("kind", f"one of {[k.value for k in KINDS]}", bad_kind)
    outcome = frame["outcome"].astype("string").str.strip().str.lower()
    bad_outcome = ~outcome.isin(list(OUTCOMES)).fillna(False).astype(bool)
    if bad_outcome.any():
        raise fail("outcome", f"one of {list(OUTCOMES)}", bad_outcome)
    times = {}
    for column in ("submit_time", "start_time", "end_time"):
        parsed = pd.to_datetime(frame[column], utc=True, errors="coerce", format="ISO8601")
        if parsed.isna().any():
            raise fail(column, "an ISO 8601 timestamp", parsed.isna())
        times[column] = parsed
    if (times["start_time"] < times["submit_time"]).any():
        raise fail("start_time", "at or after submit_time", times["start_time"] < times["submit_time"])
    if (times["end_time"] < times["start_time"]).any():
        raise fail(
            "end_time",
            "at or after start_time (a negative duration is impossible)",
            times["end_time"] < times["start_time"],
        )
    zero_length = (outcome == "completed").fillna(False).astype(bool) & (
        times["end_time"] == times["start_time"]
    )
    if zero_length.any():
        raise fail("end_time", "after start_time for a completed job (a run of zero length)", zero_length)
    gpus = pd.to_numeric(frame["gpus"], errors="coerce")
    bad_gpus = ~((gpus >= 1) & (gpus == np.round(gpus))).fillna(False).astype(bool)
    if bad_gpus.any():
        raise fail("gpus", "an integer >= 1", bad_gpus)
    duplicated = frame["job_id"].duplicated(keep=False)
    if duplicated.any():
        raise fail("job_id", "unique", duplicated)
    return pd.DataFrame(
        {
            "job_id": frame["job_id"].astype(str),
            "kind": kind.astype(str),
            **times,
            "gpus": gpus.astype(int),
            "outcome": outcome.astype(str),
        }
    )


def load_history(path: Path) -> pd.DataFrame:
    """Read and validate a history file, sorted by submit time."""
    history = validate_history(read_history(path), source=str(path))
    logger.info("loaded %d jobs from %s", len(history), path)
    return history.sort_values("submit_time", kind="stable").reset_index(drop=True)


def bundled_history_path(*, seed: int = DEFAULT_SEED) -> Path:
    """The bundled history file, generated from ``seed`` on first use when absent."""
    if not BUNDLED_HISTORY.is_file():
        logger.info("generating the bundled job history (seed %d) at %s", seed, BUNDLED_HISTORY)
        write_history(generate_history(seed=seed), BUNDLED_HISTORY)
    return BUNDLED_HISTORY


def write_history(history: pd.DataFrame, path: Path) -> Path:
    out = history.copy()
    for column in ("submit_time", "start_time", "end_time"):
        out[column] = out[column].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    tmp = path.with_name(path.name + ".tmp")
    # mtime 0: the same seed gives the same bytes, so a regenerated file diffs clean.
    compression = {"method": "gzip", "mtime": 0} if path.suffix == ".gz" else None
    out.to_csv(tmp, index=False, float_format="%.6g", compression=compression)
    tmp.replace(path)
    return path


def completed_jobs(history: pd.DataFrame, kind: JobKind) -> pd.DataFrame:
    """Completed jobs of one kind with their targets: ``duration_hours`` and ``gpus``.

    Failed and cancelled jobs stopped early, so their durations would teach the
    estimators that jobs are shorter than they are.
    """
    rows = history[(history["kind"] == kind) & (history["outcome"] == "completed")]
    duration = (rows["end_time"] - rows["start_time"]).dt.total_seconds() / 3600.0
    result = rows[[*SCHEMAS[kind].names, "gpus", "submit_time"]].copy()
    for feature in SCHEMAS[kind].features:
        # A mixed history leaves the other kind's cells empty, which widened the dtypes.
        if feature.type is FeatureType.BOOLEAN:
            result[feature.name] = result[feature.name].astype(bool)
        elif feature.type is not FeatureType.CATEGORY:
            result[feature.name] = result[feature.name].astype(float)
    result["duration_hours"] = duration
    return result.reset_index(drop=True)


# --- the generator -----------------------------------------------------------------

# Base models users fine-tune: (params_billion, layers, hidden size), from the published
# configs of Qwen2.5 0.5-72B, Llama 2/3 7-405B, Mistral 7B and Falcon 180B; the weights
# lean toward the small models most fine-tuning runs use.
MODEL_FAMILY = np.array(
    [
        (0.5, 24, 896),
        (1.5, 28, 1536),
        (3.0, 36, 2048),
        (7.0, 32, 4096),
        (8.0, 32, 4096),
        (13.0, 40, 5120),
        (14.0, 48, 5120),
        (32.0, 64, 5120),
        (34.0, 48, 8192),
        (70.0, 80, 8192),
        (72.0, 80, 8192),
        (180.0, 80, 14848),
        (405.0, 126, 16384),
    ]
)
TRAINING_MODEL_WEIGHTS = np.array([6, 8, 8, 14, 14, 8, 8, 6, 3, 10, 5, 0.5, 0.5])
QUANTIZATION_MODEL_WEIGHTS = np.array([3, 5, 6, 12, 12, 8, 8, 8, 5, 12, 8, 4, 3])

VARIANT_WEIGHTS = {
    "lora_sft": 30,
    "full_sft": 15,
    "lora_dpo": 10,
    "full_dpo": 6,
    "lora_cpt": 4,
    "full_cpt": 8,
    "lora_rlvr": 8,
    "full_rlvr": 7,
    "lora_rlhf": 5,
    "full_rlhf": 7,
}
GPU_WEIGHTS = {"a100-40gb": 15, "a100-80gb": 30, "h100-80gb": 35, "h200-141gb": 10, "l40s-48gb": 10}


def _choice(rng: np.random.Generator, weights: Mapping[str, float], size: int) -> np.ndarray:
    p = np.array(list(weights.values()), dtype=float)
    return rng.choice(np.array(list(weights)), size=size, p=p / p.sum())


def _pick(rng: np.random.Generator, values: Sequence[float], p: Sequence[float], size: int) -> np.ndarray:
    weights = np.asarray(p, dtype=float)
    return rng.choice(np.asarray(values, dtype=float), size=size, p=weights / weights.sum())


def _log_uniform(
    rng: np.random.Generator, low: np.ndarray | float, high: np.ndarray | float, size: int
) -> np.ndarray:
    return np.exp(rng.uniform(np.log(low), np.log(high), size=size))


def _draw_training_features(rng: np.random.Generator, size: int) -> pd.DataFrame:
    variant = _choice(rng, VARIANT_WEIGHTS, size)
    technique = np.array([v.split("_", 1)[1] for v in variant])
    lora = np.char.startswith(variant.astype(str), "lora_")
    rl = np.isin(technique, ["rlhf", "rlvr"])
    model = MODEL_FAMILY[
        rng.choice(len(MODEL_FAMILY), size=size, p=TRAINING_MODEL_WEIGHTS / TRAINING_MODEL_WEIGHTS.sum())
    ]
    params = model[:, 0]

    seq_len = _pick(rng, [1024, 2048, 4096, 8192, 16384, 32768], [10, 25, 35, 18, 8, 4], size)
    seq_len = np.where(technique == "cpt", np.maximum(seq_len, 4096), seq_len)
    new_tokens = np.where(
        rl, _pick(rng, [256, 512, 1024, 2048, 4096, 8192], [5, 15, 25, 25, 20, 10], size), 0.0
    )
    new_tokens = np.where(technique == "rlhf", np.minimum(new_tokens, 1024), new_tokens)
    seq_len = np.where(rl, np.maximum(seq_len, 2 ** np.ceil(np.log2(new_tokens * 1.5 + 1))), seq_len)
    fill = np.where(technique == "cpt", rng.uniform(0.6, 1.0, size), rng.uniform(0.1, 0.8, size))
    mean_sample = np.where(rl, _log_uniform(rng, 64, 1024, size), fill * seq_len)
    mean_sample = np.round(np.minimum(mean_sample, np.where(rl, seq_len - new_tokens, seq_len)))

    # Dataset sizes per technique: SFT/DPO sets of 1M-2B tokens, CPT corpora of
    # 0.1-10B tokens, RL prompt sets of 1k-50k prompts.
    dataset_tokens_million = np.select(
        [technique == "cpt", rl, technique == "dpo"],
        [
            _log_uniform(rng, 100.0, 10_000.0, size),
            _log_uniform(rng, 1e3, 5e4, size) * mean_sample / 1e6,
            _log_uniform(rng, 1.0, 500.0, size),
        ],
        default=_log_uniform(rng, 1.0, 2_000.0, size),
    )
    epochs = np.select(
        [technique == "cpt", rl],
        [np.ones(size), _pick(rng, [1, 2, 3], [6, 3, 1], size)],
        default=_pick(rng, [1, 2, 3, 5], [3, 4, 3, 1], size),
    )
    global_batch = _pick(rng, [16, 32, 64, 128, 256, 512, 1024], [5, 10, 20, 25, 20, 12, 8], size)
    micro_batch = np.minimum(_pick(rng, [1, 2, 4, 8, 16], [35, 25, 20, 12, 8], size), global_batch)
    lora_rank = np.where(lora, _pick(rng, [8, 16, 32, 64, 128, 256], [10, 25, 25, 20, 15, 5], size), 0.0)
    base_4bit = lora & (rng.random(size) < 0.3)
    gpu_type = _choice(rng, GPU_WEIGHTS, size)
    supports_fp8 = np.isin(gpu_type, ["h100-80gb", "h200-141gb", "l40s-48gb"])
    precision = _choice(rng, {"bf16": 80, "fp16": 12, "fp8": 5, "fp32": 3}, size)
    precision = np.where((precision == "fp8") & ~supports_fp8, "bf16", precision)
    # A 4-bit base computes in bf16.
    precision = np.where(base_4bit & (precision == "fp8"), "bf16", precision)
    rollout_samples = np.select(
        [technique == "rlhf", technique == "rlvr"],
        [_pick(rng, [1, 2, 4], [5, 3, 2], size), _pick(rng, [4, 8, 16, 32], [2, 4, 3, 1], size)],
        default=0.0,
    )
    reward_ratio = _pick(rng, [0.1, 0.25, 0.5, 1.0], [2, 3, 3, 2], size)
    reward_params = np.select(
        [technique == "rlhf", (technique == "rlvr") & (rng.random(size) < 0.2)],
        [
            np.maximum(0.5, np.round(params * reward_ratio, 1)),
            np.maximum(0.5, np.round(params * 0.1, 1)),
        ],
        default=0.0,
    )
    packing = np.select(
        [technique == "cpt", rl, technique == "dpo"],
        [np.ones(size, dtype=bool), np.zeros(size, dtype=bool), rng.random(size) < 0.2],
        default=rng.random(size) < 0.5,
    )
    features = pd.DataFrame(
        {
            "variant": variant,
            "params_billion": params,
            "num_layers": model[:, 1],
            "hidden_size": model[:, 2],
            "seq_len_tokens": seq_len,
            "mean_sample_tokens": np.maximum(1.0, mean_sample),
            "dataset_tokens_million": np.round(dataset_tokens_million, 4),
            "epochs": epochs,
            "global_batch_size": global_batch,
            "micro_batch_size": micro_batch,
            "lora_rank": lora_rank,
            "base_4bit": base_4bit,
            "precision": precision,
            "gpu_type": gpu_type,
            "gpu_memory_gb": np.array([GPU_MEMORY_GB[g] for g in gpu_type]),
            "gradient_checkpointing": rng.random(size) < 0.6,
            "optimizer": _choice(rng, {"adamw": 70, "adamw_8bit": 20, "adafactor": 10}, size),
            "sharding": _choice(rng, {"none": 30, "zero1": 10, "zero2": 25, "zero3": 35}, size),
            "rollout_samples_per_prompt": rollout_samples,
            "rollout_new_tokens": new_tokens,
            "reward_model_params_billion": reward_params,
            "sequence_packing": packing,
        }
    )
    # Submitters whose activations would crowd out the model turn on checkpointing,
    # then shrink the micro-batch to one sequence.
    usable_bytes = features["gpu_memory_gb"].to_numpy() * 1e9 * job_costs.USABLE_MEMORY_FRACTION
    crowded = job_costs.activation_bytes(features) > ACTIVATION_SHARE * usable_bytes
    features.loc[crowded, "gradient_checkpointing"] = True
    crowded = job_costs.activation_bytes(features) > ACTIVATION_SHARE * usable_bytes
    features.loc[crowded, "micro_batch_size"] = 1.0
    return features


def _training_outcomes(rng: np.random.Generator, features: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(GPUs, hours) of each job: cost formulas with a random MFU and log-normal noise."""
    size = len(features)
    gpus = job_costs.min_gpus_for_memory(features)
    # 5% of submitters ask for twice the GPUs memory needs, to finish sooner.
    gpus = np.where(rng.random(size) < 0.05, np.minimum(gpus * 2, 2.0**job_costs.MAX_GPUS_LOG2), gpus)
    lora = features["variant"].str.startswith("lora_").to_numpy()
    # MFU of full fine-tuning on A100/H100: 25-50% (Megatron-LM, Narayanan et al. 2021,
    # report 44-52% at scale; fine-tuning jobs are smaller and less tuned). LoRA runs
    # lower (15-35%): small adapter matmuls and a frozen base leave the GPU waiting.
    mfu = np.where(lora, rng.uniform(0.15, 0.35, size), rng.uniform(0.25, 0.50, size))
    # QLoRA dequantizes the base on every forward (Dettmers et al. 2023: slower than LoRA).
    mfu = np.where(features["base_4bit"].to_numpy(dtype=bool), mfu * 0.7, mfu)
    # FP8 rarely reaches twice the BF16 speed end to end (Transformer Engine reports 1.3x).
    mfu = np.where(features["precision"].to_numpy() == "fp8", mfu * 0.65, mfu)
    # ZeRO-3 gathers weights every layer; PCIe-only L40S pay more for collectives.
    mfu = np.where(features["sharding"].to_numpy() == "zero3", mfu * 0.9, mfu)
    mfu = np.where(features["gpu_type"].to_numpy() == "l40s-48gb", mfu * 0.85, mfu)
    hours = job_costs.compute_hours(features, gpus, mfu)
    # Start-up: loading the weights (~1 GB/s) and a few minutes of setup.
    hours += 0.05 + 2.0 * features["params_billion"].to_numpy() / 3600.0
    hours *= rng.lognormal(0.0, 0.15, size)
    return gpus, hours


def _draw_quantization_features(rng: np.random.Generator, size: int) -> pd.DataFrame:
    model = MODEL_FAMILY[
        rng.choice(
            len(MODEL_FAMILY),
            size=size,
            p=QUANTIZATION_MODEL_WEIGHTS / QUANTIZATION_MODEL_WEIGHTS.sum(),
        )
    ]
    algorithm = _choice(rng, {"gptq": 40, "awq": 40, "bitsandbytes": 20}, size)
    # 128 calibration samples by default (both papers); some users raise it.
    samples = _pick(rng, [64, 128, 256, 512, 1024], [10, 60, 15, 10, 5], size)
    seq_len = np.where(
        algorithm == "gptq",
        _pick(rng, [1024, 2048, 4096], [15, 70, 15], size),
        _pick(rng, [512, 1024, 2048], [70, 20, 10], size),
    )
    bnb = algorithm == "bitsandbytes"
    return pd.DataFrame(
        {
            "params_billion": model[:, 0],
            "algorithm": algorithm,
            "calibration_samples": np.where(bnb, 0.0, samples),
            "calibration_seq_len_tokens": np.where(bnb, 0.0, seq_len),
            "gpu_type": _choice(rng, GPU_WEIGHTS, size),
        }
    )


def generate_history(
    *,
    seed: int = DEFAULT_SEED,
    training_jobs: int = DEFAULT_TRAINING_JOBS,
    quantization_jobs: int = DEFAULT_QUANTIZATION_JOBS,
) -> pd.DataFrame:
    """A year of finished jobs drawn deterministically from ``seed``."""
    if training_jobs < 0 or quantization_jobs < 0 or training_jobs + quantization_jobs == 0:
        raise ValueError(f"job counts must be >= 0 and not both 0; got {training_jobs}, {quantization_jobs}.")
    rng = np.random.default_rng(seed)
    batches: list[pd.DataFrame] = []
    while sum(len(batch) for batch in batches) < training_jobs:
        features = _draw_training_features(rng, training_jobs)
        gpus, hours = _training_outcomes(rng, features)
        # Submitters split anything past a month into several jobs, and a job whose
        # activations still do not fit would need sequence parallelism: drop those draws.
        usable_bytes = features["gpu_memory_gb"].to_numpy() * 1e9 * job_costs.USABLE_MEMORY_FRACTION
        fits = job_costs.activation_bytes(features) <= ACTIVATION_SHARE * usable_bytes
        keep = (hours <= MAX_JOB_HOURS) & fits
        batches.append(features[keep].assign(gpus=gpus[keep].astype(int), duration_hours=hours[keep]))
    kinds: list[pd.DataFrame] = []
    if batches:
        training = pd.concat(batches, ignore_index=True).head(training_jobs)
        training.insert(0, "kind", "training")
        kinds.append(training)

    if quantization_jobs > 0:
        quantization = _draw_quantization_features(rng, quantization_jobs)
        q_gpus = job_costs.quantization_gpus(quantization)
        noise = rng.lognormal(0.0, 0.2, quantization_jobs)
        gpu_hours = job_costs.quantization_gpu_hours(quantization) * noise
        quantization.insert(0, "kind", "quantization")
        quantization.insert(1, "gpus", q_gpus.astype(int))
        quantization.insert(2, "duration_hours", gpu_hours / q_gpus)
        kinds.append(quantization)

    jobs = pd.concat(kinds, ignore_index=True)
    jobs = jobs.iloc[rng.permutation(len(jobs))].reset_index(drop=True)
    n = len(jobs)
    submit_seconds = np.sort(rng.uniform(0.0, HISTORY_DAYS * 86400.0, n))
    wait_seconds = rng.exponential(3600.0, n)
    submit = HISTORY_START + pd.to_timedelta(np.round(submit_seconds), unit="s")
    start = submit + pd.to_timedelta(np.round(wait_seconds), unit="s")
    # 4% fail and 1% are cancelled part-way: they hold their GPUs for a random share.
    outcome = _choice(rng, {"completed": 95, "failed": 4, "cancelled": 1}, n)
    ran = np.where(outcome == "completed", 1.0, rng.uniform(0.05, 0.95, n))
    end = start + pd.to_timedelta(np.round(jobs["duration_hours"].to_numpy() * ran * 3600.0), unit="s")
    jobs.insert(0, "job_id", [f"job-{i:06d}" for i in range(n)])
    common = pd.DataFrame({"submit_time": submit, "start_time": start, "end_time": end, "outcome": outcome})
    history = pd.concat([jobs.drop(columns="duration_hours"), common], axis=1)
    return history.reindex(columns=list(HISTORY_COLUMNS))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the bundled job history.")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, default=BUNDLED_HISTORY)
    args = parser.parse_args(argv)
    write_history(generate_history(seed=args.seed), args.out)
    logging.getLogger(__name__).warning("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
