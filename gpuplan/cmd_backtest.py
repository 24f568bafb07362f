"""``gpuplan backtest``: day-ahead backtest of the real-time profile on traffic series."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from gpuplan.table import format_table

if TYPE_CHECKING:
    from forecasting.backtest import ForecastBacktest, GpuRow

#: Unit of GPU capacity in the backtest: the observed peak of a series needs this many
#: GPUs. A scale choice, not something learned: it sets how coarse a GPU step is.
PEAK_GPUS = 16
BASES: tuple[Literal["p90"], Literal["p50"]] = ("p90", "p50")
TRADEOFF_HEADER = ("headroom", "gpu_h", "peak_h", "saved", "hours_cov", "served")


def _say(text: str) -> None:
    """Command output goes to stdout; logging stays on stderr."""
    sys.stdout.write(text + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--traffic",
        type=Path,
        action="append",
        default=[],
        help="CSV (repeatable); default: bundled",
    )
    parser.add_argument(
        "--column",
        default=None,
        metavar="NAME",
        help="read column NAME of each CSV as the hourly request count",
    )
    parser.add_argument("--swap-cap", type=int, default=2, help="max GPUs changed per hour (0-8192)")
    parser.add_argument("--json", action="store_true", help="print the tables as JSON")
    parser.add_argument("--png", type=Path, default=None, help="directory for plots")


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from contract.files import check_writable_dir
    from features.traffic import load_traffic
    from forecasting.backtest import accuracy, gpu_tradeoff, run_backtest, saving_at_served
    from forecasting.realtime_training import backtest_config_for, bundled_traffic_paths
    from gpuplan.options import integer_in
    from scheduler.scenario_io import MAX_CLUSTER_GPUS

    integer_in("--swap-cap", args.swap_cap, 0, 2 * MAX_CLUSTER_GPUS)
    if args.png is not None:
        check_writable_dir(args.png, "--png")
    paths = list(args.traffic) or bundled_traffic_paths()
    # Every file is read before the first backtest, so a bad one stops the command at once.
    series = [(path, load_traffic(path, requests_column=args.column)) for path in paths]
    report: list[dict[str, object]] = []
    for path, traffic in series:
        config = backtest_config_for(len(traffic))
        backtest = run_backtest(traffic, series=path.stem, config=config)
        row = accuracy(backtest)
        requests_per_gpu_hour = max(float(traffic.requests.max()), 1.0) / PEAK_GPUS
        tradeoffs = {
            basis: gpu_tradeoff(
                backtest,
                requests_per_gpu_hour=requests_per_gpu_hour,
                swap_cap=args.swap_cap,
                basis=basis,
            )
            for basis in BASES
        }
        tradeoff = tradeoffs["p90"]
        best_by_basis = {basis: saving_at_served(rows, 0.99) for basis, rows in tradeoffs.items()}
        short = config.initial_hours < 2 * 168
        report.append(
            {
                "accuracy": asdict(row),
                "short_history": short,
                "requests_per_gpu_hour": requests_per_gpu_hour,
                "tradeoff": [asdict(t) for rows in tradeoffs.values() for t in rows],
                "at_99_served": {
                    basis: None if found is None else asdict(found) for basis, found in best_by_basis.items()
                },
            }
        )
        if args.png is not None:
            _plot(backtest, tradeoff, args.png)
        if args.json:
            continue
        label = " (two weeks only: 1 week of history, 7 origins)" if short else ""
        _say(f"\n== {path.stem}{label}")
        mase = "n/a" if row.mase != row.mase else f"{row.mase:.3f}"
        relative_mae = "n/a" if row.relative_mae != row.relative_mae else f"{row.relative_mae:.3f}"
        _say(
            f"origins={row.origins} hours={row.hours} method={row.method} MASE={mase} "
            f"MAE={row.mae:.4g} seasonal-naive MAE={row.seasonal_naive_mae:.4g} "
            f"relMAE={relative_mae} P90 coverage={row.p90_coverage:.3f}"
        )
        _say(
            f"GPUs: requests_per_gpu_hour={requests_per_gpu_hour:.4g} "
            f"(peak = {PEAK_GPUS} GPUs), swap_cap={args.swap_cap}; "
            "saved = 1 - gpu_h / peak_h, peak_h = observed peak need of the evaluated "
            "hours x hours (hindsight: the smallest static reservation serving 100%)"
        )
        for basis, rows in tradeoffs.items():
            _say(f"trade-off, GPUs from {basis.upper()} x (1 + headroom):")
            table = [
                [
                    f"{t.headroom:.2f}",
                    t.gpu_hours,
                    t.peak_reservation_gpu_hours,
                    f"{t.saving:.1%}",
                    f"{t.hours_covered:.1%}",
                    f"{t.demand_served:.2%}",
                ]
                for t in rows
            ]
            _say(format_table(TRADEOFF_HEADER, table))
            found = best_by_basis[basis]
            if found is None:
                _say(f"at 99% of GPU-demand served ({basis.upper()}): not reached")
            else:
                _say(
                    f"at 99% of GPU-demand served ({basis.upper()}): headroom {found.headroom:g} "
                    f"saves {found.saving:.1%} of GPU-hours vs peak reservation"
                )
    if args.json:
        # NaN (an undefined MASE) is not JSON; null is.
        _say(json.dumps(_finite_or_null(report), indent=2, allow_nan=False))
    return 0


def _finite_or_null(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite_or_null(item) for item in value]
    return value


def _plot(backtest: ForecastBacktest, rows: Sequence[GpuRow], directory: Path) -> None:
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
    bottom.plot([r.demand_served for r in rows], [r.saving for r in rows], marker="o")
    bottom.set_xlabel("share of GPU-demand served")
    bottom.set_ylabel("GPU-hours saved vs peak")
    figure.tight_layout()
    try:
        with atomic_write(directory / f"{backtest.series}.png", "--png") as stream:
            figure.savefig(stream, format="png", dpi=100)
    finally:
        plt.close(figure)
