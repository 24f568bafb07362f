"""``gpuplan train``: the retrain use case (:mod:`gpuplan.app.cycle.retrain`) and its report."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.app.core.models import DEFAULT_MODELS_DIR
from gpuplan.options import add_traffic

if TYPE_CHECKING:
    import pandas as pd

    from gpuplan.app.cycle.retrain import RetrainReport


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
        "--db",
        metavar="URL",
        default=None,
        help="retrain on the job history stored in this database instead of a file",
    )
    parser.add_argument(
        "--models",
        type=Path,
        default=DEFAULT_MODELS_DIR,
        help="directory the fitted models are written to (default: ./models)",
    )
    add_traffic(parser, "hourly traffic CSVs, one real-time profile each (default: the bundled series)")
    parser.add_argument(
        "--column",
        default=None,
        metavar="NAME",
        help="read column NAME of each CSV as the hourly request count",
    )


def _table(title: str, rows: list[dict[str, object]]) -> str:
    from gpuplan.table import format_table

    headers = list(dict.fromkeys(key for row in rows for key in row))
    body = [[row.get(header, "") for header in headers] for row in rows]
    return f"{title}\n{format_table(headers, body)}"


def _stored_history(url: str) -> pd.DataFrame:
    from gpuplan.app.views.report_inputs import open_existing_store
    from training_data.history import validate_history

    store = open_existing_store(url)  # only the daemon creates a database
    try:
        frame = store.history()
    finally:
        store.close()
    return validate_history(frame, source="the job history in --db").sort_values("submit_time", kind="stable")


def _rounded(row: dict[str, object]) -> dict[str, object]:
    return {key: round(value, 3) if isinstance(value, float) else value for key, value in row.items()}


def _goal_lines(report: RetrainReport) -> list[str]:
    """The estimator against the issue's goals, in words."""
    by_name = {row.model: row for row in report.training}
    model, size_only = report.training[0], by_name["size-only baseline"]
    analytic = by_name["analytic-FLOPs baseline"]
    ratio = size_only.log_mae_hours / max(model.log_mae_hours, 1e-12)
    quintiles = [row.p90_coverage for row in report.training_slices if row.target == "hours"]
    accuracy = (
        f"log-MAE {ratio:.1f}x lower than the size-only baseline (goal >= 2x); "
        f"P90 coverage {model.p90_coverage:.3f} overall, {min(quintiles):.3f}-{max(quintiles):.3f} "
        "across the P50 quintiles (goal 0.85-0.95 in each)"
    )
    pinball = (
        f"pinball loss on log hours at 0.5 / 0.9: {model.pinball_p50_log_hours:.4f} / "
        f"{model.pinball_p90_log_hours:.4f} vs analytic-FLOPs {analytic.pinball_p50_log_hours:.4f} / "
        f"{analytic.pinball_p90_log_hours:.4f} (goal: below at both); on log2 GPUs "
        f"{model.pinball_p50_log2_gpus:.4f} / {model.pinball_p90_log2_gpus:.4f} vs "
        f"{analytic.pinball_p50_log2_gpus:.4f} / {analytic.pinball_p90_log2_gpus:.4f}"
    )
    return [accuracy, pinball]


def run(args: argparse.Namespace) -> int:
    from contract.files import check_writable_dir
    from gpuplan.app.cycle.retrain import MODELS_OPTION, RETRAIN_STEPS, retrain
    from gpuplan.progress import progress_bar
    from training_data.history import bundled_history_path, load_history

    if args.db is not None and args.history is not None:
        from contract.errors import InputError

        raise InputError("--db", "not given with --history (one history at a time)", args.db)
    # Checked again by the retrain itself; here before the history is even read.
    check_writable_dir(args.models, MODELS_OPTION)
    history_path = args.history if args.history is not None else bundled_history_path()
    # A stored history is read before the bar starts: a mistyped --db says so at once.
    stored = _stored_history(args.db) if args.db is not None else None
    steps = progress_bar(RETRAIN_STEPS, "train", unit="step", leave=False)
    with steps:

        def progress(step: str) -> None:
            steps.set_postfix_str(step)
            steps.update()

        if stored is not None:
            history, source = stored, "the job history in --db"
        else:
            history, source = load_history(history_path), str(history_path)
        progress("history read")
        report = retrain(
            history,
            source=source,
            models_dir=args.models,
            traffic_paths=list(args.traffic),
            requests_column=args.column,
            progress=progress,
        )

    split = (
        f"held-out split: last 20% by submit time ({report.held_out_jobs} of {report.training_jobs} "
        f"completed training jobs)"
    )
    _say(f"history: {report.history_source} ({report.history_jobs} jobs)")
    _say(_table(f"training jobs, {split}", [_rounded(asdict(row)) for row in report.training]))
    for line in _goal_lines(report):
        _say(line)
    hours = [_rounded(asdict(row)) for row in report.training_slices if row.target == "hours"]
    gpus = [_rounded(asdict(row)) for row in report.training_slices if row.target == "gpus"]
    _say("")
    _say(_table("P90 hours per quintile of the predicted P50 (goal: coverage 0.85-0.95 in each)", hours))
    _say("")
    _say(_table("P90 GPUs per predicted P50 GPU count", gpus))
    if report.quantization:
        _say("")
        _say(
            _table(
                "quantization jobs, held-out split: last 20% by submit time",
                [asdict(row) for row in report.quantization],
            )
        )
    else:
        _say("quantization jobs: none completed in the history, no quantization model written")
    if report.realtime:
        _say("")
        _say(_table("real-time profiles (day-ahead backtest)", report.realtime))
    _say("")
    for path in report.written:
        _say(f"wrote {path}")
    return 0
