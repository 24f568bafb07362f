"""``gpuplan backtest``: the real-time profile against the simple seasonal baselines.

The use case is :mod:`gpuplan.app.lab.backtest`; this face prints its tables (or JSON) and
plots.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.options import add_traffic
from gpuplan.table import format_table

if TYPE_CHECKING:
    from forecasting.backtest import ForecastBacktest, GpuRow
    from gpuplan.app.lab.backtest import SeriesReport

TRADEOFF_HEADER = ("headroom", "gpu_h", "peak_h", "saved", "hours_cov", "served")
COMPARISON_HEADER = (
    "forecaster",
    "method",
    "MASE",
    "relMAE",
    "P90 cov",
    "busiest-6h cov",
    "headroom@99%",
    "GPU-h saved@99%",
)
SUMMARY_HEADER = (
    "series",
    "weeks",
    "profile MASE",
    "best baseline (MASE)",
    "MASE gain",
    "P90 cov",
    "busiest-6h cov",
    "saved@99%",
    "level re-est. MASE gain",
)


def _say(text: str) -> None:
    """Command output goes to stdout; logging stays on stderr."""
    sys.stdout.write(text + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_traffic(parser, "hourly traffic CSVs, one backtest each (default: the bundled series)")
    parser.add_argument(
        "--column",
        default=None,
        metavar="NAME",
        help="read column NAME of each CSV as the hourly request count",
    )
    parser.add_argument("--swap-cap", type=int, default=2, help="max GPUs changed per hour (0-8192)")
    parser.add_argument("--no-mstl", action="store_true", help="skip the MSTL + ETS baseline (the slow one)")
    parser.add_argument("--json", action="store_true", help="print the tables as JSON")
    parser.add_argument(
        "--png",
        type=Path,
        default=None,
        metavar="DIR",
        help="a folder to write the plots in (one PNG per series; created if missing)",
    )


def run(args: argparse.Namespace) -> int:
    from contract.files import check_writable_dir
    from contract.scenario_io import MAX_CLUSTER_GPUS
    from features.traffic import load_traffic
    from forecasting.realtime_training import bundled_traffic_paths
    from gpuplan.app.lab.backtest import backtest_series
    from gpuplan.options import integer_in

    integer_in("--swap-cap", args.swap_cap, 0, 2 * MAX_CLUSTER_GPUS)
    if args.png is not None:
        check_writable_dir(args.png, "--png")
    paths = list(args.traffic) or bundled_traffic_paths()
    # Every file is read before the first backtest, so a bad one stops the command at once.
    series = [(path.stem, load_traffic(path, requests_column=args.column)) for path in paths]
    reports = [
        backtest_series(traffic, series=name, swap_cap=args.swap_cap, with_mstl=not args.no_mstl)
        for name, traffic in series
    ]
    if args.png is not None:
        for report in reports:
            _plot(report.profile_backtest, report.profile_tradeoffs["p90"], args.png)
    if args.json:
        # NaN (an undefined MASE) is not JSON; null is.
        _say(json.dumps(_finite_or_null([_as_json(report) for report in reports]), indent=2, allow_nan=False))
        return 0
    for report in reports:
        _print_series(report)
    _say("\n== summary: the profile against the best simple baseline of each series")
    _say(format_table(SUMMARY_HEADER, [_summary_row(report) for report in reports]))
    _say(
        "goals on series of three weeks or more: MASE at least 10% below the best baseline; "
        "P90 coverage 0.85-0.95 overall and >= 0.80 on each day's busiest quarter of hours"
    )
    return 0


def _percent(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.1%}"


def _print_series(report: SeriesReport) -> None:
    first = report.profile.accuracy
    label = " (under three weeks: one week of history, the daily fallback)" if first.short_history else ""
    _say(f"\n== {report.series}: {report.hours} hours{label}")
    _say(
        f"{first.origins} origins x 24 h, refitted at each; MASE scaled by the in-sample seasonal "
        f"naive with period {first.mase_period}; GPUs: requests_per_gpu_hour="
        f"{report.requests_per_gpu_hour:.4g} (peak = 16 GPUs), swap_cap={report.swap_cap}; "
        "saved = 1 - GPU-hours / (peak need x hours), P90 x (1 + headroom) planned"
    )
    rows = []
    for result in report.results:
        row, found = result.accuracy, result.at_target
        rows.append(
            [
                row.forecaster,
                row.method,
                f"{row.mase:.3f}",
                f"{row.relative_mae:.3f}",
                f"{row.p90_coverage:.3f}",
                f"{row.busy_p90_coverage:.3f}",
                "not reached" if found is None else f"{found.headroom:g}",
                _percent(None if found is None else found.saving),
            ]
        )
    _say(format_table(COMPARISON_HEADER, rows))
    for basis, tradeoff in report.profile_tradeoffs.items():
        _say(f"profile trade-off, GPUs from {basis.upper()} x (1 + headroom):")
        _say(format_table(TRADEOFF_HEADER, [_tradeoff_row(t) for t in tradeoff]))


def _tradeoff_row(row: GpuRow) -> list[object]:
    return [
        f"{row.headroom:.2f}",
        row.gpu_hours,
        row.peak_reservation_gpu_hours,
        f"{row.saving:.1%}",
        f"{row.hours_covered:.1%}",
        f"{row.demand_served:.2%}",
    ]


def _summary_row(report: SeriesReport) -> list[object]:
    from gpuplan.app.lab.backtest import PROFILE_WITHOUT_LEVEL_SHIFTS

    profile, best = report.profile, report.best_baseline
    fixed_level = next(r for r in report.results if r.accuracy.forecaster == PROFILE_WITHOUT_LEVEL_SHIFTS)
    level_gain = 1.0 - profile.accuracy.mase / fixed_level.accuracy.mase
    return [
        report.series,
        f"{report.hours / 168:.1f}",
        f"{profile.accuracy.mase:.3f}",
        f"{best.accuracy.forecaster} ({best.accuracy.mase:.3f})",
        f"{report.mase_gain:+.1%}",
        f"{profile.accuracy.p90_coverage:.3f}",
        f"{profile.accuracy.busy_p90_coverage:.3f}",
        _percent(None if profile.at_target is None else profile.at_target.saving),
        f"{level_gain:+.1%}",
    ]


def _as_json(report: SeriesReport) -> dict[str, object]:
    return {
        "series": report.series,
        "hours": report.hours,
        "requests_per_gpu_hour": report.requests_per_gpu_hour,
        "forecasters": [
            {
                "accuracy": asdict(result.accuracy),
                "baseline": result.baseline,
                "at_99_served": None if result.at_target is None else asdict(result.at_target),
            }
            for result in report.results
        ],
        "mase_gain_over_best_baseline": report.mase_gain,
        "profile_tradeoff": [asdict(t) for rows in report.profile_tradeoffs.values() for t in rows],
    }


def _finite_or_null(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite_or_null(item) for item in value]
    return value


def _plot(backtest: ForecastBacktest, rows: list[GpuRow], directory: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from contract.files import atomic_write

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7))
    hours = np.arange(backtest.actual.size)
    top.plot(hours, backtest.actual.ravel(), label="actual", color="black", lw=0.8)
    top.plot(hours, backtest.p50.ravel(), label="P50", lw=0.8)
    top.fill_between(hours, 0, backtest.p90.ravel(), alpha=0.2, label="≤ P90")
    top.set_title(f"{backtest.series}: day-ahead forecasts")
    top.set_xlabel("hour since first origin")
    top.legend()
    from matplotlib.ticker import PercentFormatter

    # Per headroom setting: the share of demand served (near 100%, on a span of its own so that
    # no point is squeezed into an unlabelled offset axis) and the GPU-hours saved.
    saved_axis = bottom.twinx()
    for basis in dict.fromkeys(r.basis for r in rows):
        mine = [r for r in rows if r.basis == basis]
        headroom = [100 * r.headroom for r in mine]
        bottom.plot(
            headroom,
            [100 * r.demand_served for r in mine],
            marker="o",
            ms=3,
            color="black",
            label=f"demand served ({basis} forecast)",
        )
        saved_axis.plot(
            headroom,
            [100 * r.saving for r in mine],
            marker="s",
            ms=3,
            color="tab:blue",
            label=f"GPU-hours saved vs peak reservation ({basis} forecast)",
        )
    low = min([100.0, *(100 * r.demand_served for r in rows)])
    bottom.set_ylim(min(low - 0.2, 99.0), 100.1)
    bottom.yaxis.set_major_formatter(PercentFormatter(decimals=1))
    saved_axis.yaxis.set_major_formatter(PercentFormatter(decimals=0))
    saved_axis.axhline(0, color="tab:blue", lw=0.6, ls=":")
    bottom.xaxis.set_major_formatter(PercentFormatter(decimals=0))
    bottom.set_xlabel("headroom over the P90 forecast")
    bottom.set_ylabel("share of the GPU demand served")
    saved_axis.set_ylabel("GPU-hours saved vs peak", color="tab:blue")
    bottom.set_title("GPUs held per headroom setting: demand served and GPU-hours saved", fontsize=9)
    if rows:
        lines = bottom.get_lines() + saved_axis.get_lines()[:-1]
        bottom.legend(lines, [line.get_label() for line in lines], fontsize=8, loc="center right")
    figure.tight_layout()
    try:
        with atomic_write(directory / f"{backtest.series}.png", "--png") as stream:
            figure.savefig(stream, format="png", dpi=100)
    finally:
        plt.close(figure)
