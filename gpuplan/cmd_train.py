"""``gpuplan train``: refit the job estimators (and the real-time profiles), then report.

Order matters for the promise "a bad history overwrites no model": the history is
validated first, every estimator is fitted in memory, and only then is anything
written. Each job estimator is evaluated on a held-out, time-ordered split (fitted on
the earlier 80% of jobs, scored on the latest 20%) and then refitted on the whole
history for the saved model.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

TRAINING_MODEL_FILE = "training_estimator.pkl"
QUANTIZATION_MODEL_FILE = "quantization_estimator.pkl"
DEFAULT_MODELS_DIR = Path("models")


def _say(text: str) -> None:
    """Command output goes to stdout; logging and the progress bar stay on stderr."""
    sys.stdout.write(text + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--history",
        type=Path,
        default=None,
        help="job history CSV (schema: training_data/README.md; default: the bundled one)",
    )
    parser.add_argument(
        "--models",
        type=Path,
        default=DEFAULT_MODELS_DIR,
        help="directory the fitted models are written to (default: ./models)",
    )
    parser.add_argument(
        "--traffic",
        type=Path,
        nargs="+",
        action="extend",
        default=[],
        metavar="CSV",
        help="hourly traffic CSVs, one real-time profile each (default: the bundled series)",
    )


def _table(title: str, rows: list[dict[str, object]]) -> str:
    from gpuplan.table import format_table

    headers = list(dict.fromkeys(key for row in rows for key in row))
    body = [[row.get(header, "") for header in headers] for row in rows]
    return f"{title}\n{format_table(headers, body)}"


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from features.job_features import QUANTIZATION_SCHEMA, TRAINING_SCHEMA
    from forecasting.evaluation import (
        QuantizationMetrics,
        TrainingMetrics,
        quantization_metrics,
        time_split,
        training_metrics,
    )
    from forecasting.persistence import save_model
    from forecasting.quantization_estimator import QuantizationEstimator
    from forecasting.realtime_training import fit_profiles
    from forecasting.training_estimator import (
        AnalyticBaseline,
        SizeOnlyBaseline,
        TrainingEstimator,
    )
    from gpuplan.errors import InputError
    from training_data.history import bundled_history_path, completed_jobs, load_history

    def inputs(jobs: pd.DataFrame, names: tuple[str, ...]) -> pd.DataFrame:
        return jobs[list(names)]

    def targets(jobs: pd.DataFrame) -> pd.DataFrame:
        return jobs[["gpus", "duration_hours"]]

    steps = tqdm(total=7, desc="train", unit="step", file=sys.stderr, leave=False)
    with steps:
        steps.set_postfix_str("loading the history")
        history_path = args.history if args.history is not None else bundled_history_path()
        history = load_history(history_path)
        training_jobs = completed_jobs(history, "training")
        quantization_jobs = completed_jobs(history, "quantization")
        if training_jobs.empty:
            raise InputError(
                "kind",
                "at least some completed training jobs",
                "none",
                source=str(history_path),
            )
        steps.update()

        steps.set_postfix_str("evaluating the training estimator")
        earlier, later = time_split(training_jobs)
        evaluation: list[TrainingMetrics] = []
        for name, candidate in (
            ("lightgbm (P50/P90)", TrainingEstimator()),
            ("size-only baseline", SizeOnlyBaseline()),
            ("analytic-FLOPs baseline", AnalyticBaseline()),
        ):
            candidate.fit(inputs(earlier, TRAINING_SCHEMA.names), targets(earlier))
            evaluation.append(training_metrics(name, candidate, later))
        steps.update()

        steps.set_postfix_str("fitting the training estimator")
        training_estimator = TrainingEstimator().fit(
            inputs(training_jobs, TRAINING_SCHEMA.names),
            targets(training_jobs),
            submit_times=training_jobs["submit_time"],
        )
        steps.update()

        quantization_rows: list[QuantizationMetrics] = []
        quantization_estimator: QuantizationEstimator | None = None
        if not quantization_jobs.empty:
            steps.set_postfix_str("evaluating the quantization estimator")
            earlier_q, later_q = time_split(quantization_jobs)
            held_out = QuantizationEstimator().fit(
                inputs(earlier_q, QUANTIZATION_SCHEMA.names), targets(earlier_q)
            )
            quantization_rows.append(quantization_metrics("tiered OLS + margin", held_out, later_q))
            quantization_estimator = QuantizationEstimator().fit(
                inputs(quantization_jobs, QUANTIZATION_SCHEMA.names),
                targets(quantization_jobs),
                submit_times=quantization_jobs["submit_time"],
            )
        steps.update(2)

        steps.set_postfix_str("fitting the real-time profiles")
        realtime_rows = fit_profiles(list(args.traffic), args.models)
        steps.update()

        steps.set_postfix_str("saving")
        written = [save_model(training_estimator, args.models / TRAINING_MODEL_FILE)]
        if quantization_estimator is not None:
            written.append(save_model(quantization_estimator, args.models / QUANTIZATION_MODEL_FILE))
        steps.update()

    split = (
        f"held-out split: last 20% by submit time ({len(later)} of {len(training_jobs)} "
        f"completed training jobs)"
    )
    _say(f"history: {history_path} ({len(history)} jobs)")
    _say(_table(f"training jobs, {split}", [asdict(row) for row in evaluation]))
    model, size_only = evaluation[0], evaluation[1]
    ratio = size_only.log_mae_hours / max(model.log_mae_hours, 1e-12)
    _say(
        f"log-MAE {ratio:.1f}x lower than the size-only baseline (goal >= 2x); "
        f"P90 coverage {model.p90_coverage:.3f} (target 0.88-0.92)"
    )
    if quantization_rows:
        _say("")
        _say(
            _table(
                "quantization jobs, held-out split: last 20% by submit time",
                [asdict(row) for row in quantization_rows],
            )
        )
    else:
        _say("quantization jobs: none completed in the history, no quantization model written")
    if realtime_rows:
        _say("")
        _say(_table("real-time profiles (day-ahead backtest)", realtime_rows))
    _say("")
    for path in written:
        _say(f"wrote {path}")
    return 0
