"""The real-time profile on its frozen split (issue #50): MASE and P90 coverage per series.

    .venv/bin/python -m benchmarks.realtime_split [--data ../shared/data] [--set held-out]

The split (``split.json`` beside this file) was written before tuning: the profile's
constants are chosen on the ``tuning`` series only; the ``held out`` ones are scored.
Protocol (forecasting/backtest.py): a fresh fit at every daily origin after two weeks (one
week on a series under three weeks), each forecasting the next 24 hours. Per series:

- **MASE**, scaled by the in-sample weekly naive forecast (daily with one week of history);
- **relMAE**, the P50's mean absolute error over the weekly naive forecast's;
- **P90 cov**, the P90's coverage of all scored hours, and **busy cov**, of each day's
  busiest quarter (its 6 busiest hours by actual requests);
- **worst day**, the lowest busiest-quarter coverage of one scored day;
- **MASE@level**, the MASE of the P50 scaled, day by day, to the day's actual total: what a
  perfect level would give the profile's shape, the bound of any level recalibration;
- **MASE 1-6h / 7-12h / 13-24h**, the same MASE over the hours 1-6, 7-12 and 13-24 after
  the origin (the MASE is their mean weighted 6:6:12): how much of it a nowcast, which
  reaches the first hours only, could move.

``--level-weight``, ``--busy-quantile`` and ``--validation-days`` score the profile with another
shrinkage weight of the level-less families' recalibration (0: none), another busiest-quarter
floor, or another number of validation days (7 ships).

Each set ends with its worst slice: the highest MASE and the lowest busiest-quarter
coverage over its series. Goals (#50, held out): MASE <= 0.80, busy cov >= 0.85.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from benchmarks.forecast_accuracy import PODS, SHARED, write_pod_series
from features.traffic import HourlyTraffic, load_traffic
from forecasting.backtest import DayAheadForecaster, accuracy, config_for, run_backtest
from forecasting.realtime import BUSY_QUANTILE, HOURS_PER_WEEK, LEVEL_WEIGHT, RealtimeProfile, busiest_quarter
from forecasting.realtime_training import BUNDLED_TRAFFIC_DIR

SPLIT = Path(__file__).resolve().parent / "split.json"
SETS = ("tuning", "held out")


@dataclass(frozen=True, slots=True)
class SplitScore:
    """One series' day-ahead accuracy on the split."""

    group: str
    name: str
    origins: int
    mase: float
    relative_mae: float
    p90_coverage: float
    busy_coverage: float
    worst_day_busy_coverage: float
    method: str
    #: The MASE with each day's P50 scaled to that day's actual total (a known level).
    mase_known_level: float
    #: The MASE over the hours 1-6, 7-12 and 13-24 after each origin (``HORIZON_BUCKETS``).
    mase_by_horizon: tuple[float, ...]


#: The horizon buckets of ``SplitScore.mase_by_horizon``: [start, end) hours after the origin.
HORIZON_BUCKETS = ((0, 6), (6, 12), (12, 24))


def load_split(data: Path, groups: tuple[str, ...] = SETS) -> list[tuple[str, str, HourlyTraffic]]:
    """The split's series, in its order: (set, name, hourly traffic)."""
    split = json.loads(SPLIT.read_text())
    series: list[tuple[str, str, HourlyTraffic]] = []
    with tempfile.TemporaryDirectory() as folder:
        for group in groups:
            for entry in split[group]:
                if "pods" in entry:
                    path = write_pod_series(
                        data / PODS, Path(folder) / "pods.csv", weeks=entry["weeks"], measure=entry["pods"]
                    )
                    traffic = load_traffic(path)
                else:
                    traffic = load_traffic(BUNDLED_TRAFFIC_DIR / entry["bundled"])
                    if "weeks" in entry:
                        traffic = traffic.before(traffic.hours[0] + entry["weeks"] * HOURS_PER_WEEK)
                series.append((group, entry["name"], traffic))
    return series


def score_series(
    group: str,
    name: str,
    traffic: HourlyTraffic,
    make_forecaster: Callable[[], DayAheadForecaster] = RealtimeProfile,
) -> SplitScore:
    config = config_for(len(traffic))
    backtest = run_backtest(traffic, series=name, config=config, make_forecaster=make_forecaster)
    row = accuracy(backtest)
    totals = backtest.p50.sum(axis=1, keepdims=True)
    level = backtest.actual.sum(axis=1, keepdims=True) / np.where(totals > 0, totals, 1.0)
    known_level = np.abs(backtest.p50 * level - backtest.actual) / backtest.mase_scale[:, None]
    scaled = np.abs(backtest.p50 - backtest.actual) / backtest.mase_scale[:, None]
    covered = backtest.actual <= backtest.p90 + 1e-9
    busy = busiest_quarter(backtest.actual)
    per_day = [float(np.mean(day[mask])) for day, mask in zip(covered, busy, strict=True)]
    return SplitScore(
        group=group,
        name=name,
        origins=row.origins,
        mase=row.mase,
        relative_mae=row.relative_mae,
        p90_coverage=row.p90_coverage,
        busy_coverage=row.busy_p90_coverage,
        worst_day_busy_coverage=min(per_day),
        method=row.method,
        mase_known_level=float(np.mean(known_level)),
        mase_by_horizon=tuple(float(np.mean(scaled[:, start:end])) for start, end in HORIZON_BUCKETS),
    )


def table(scores: list[SplitScore]) -> list[str]:
    lines = [
        (
            f"{'set':9} {'series':26} {'n':>3} {'MASE':>6} {'relMAE':>6} {'P90cov':>6} {'busy':>6} "
            f"{'worstday':>8} {'MASE@level':>10} {'1-6h':>5} {'7-12h':>5} {'13-24h':>6}  chosen"
        )
    ]
    for group in SETS:
        rows = [s for s in scores if s.group == group]
        if not rows:
            continue
        lines += [
            f"{s.group:9} {s.name:26} {s.origins:3d} {s.mase:6.3f} {s.relative_mae:6.3f} "
            f"{s.p90_coverage:6.3f} {s.busy_coverage:6.3f} {s.worst_day_busy_coverage:8.3f} "
            f"{s.mase_known_level:10.3f} {s.mase_by_horizon[0]:5.3f} {s.mase_by_horizon[1]:5.3f} "
            f"{s.mase_by_horizon[2]:6.3f}  {s.method}"
            for s in rows
        ]
        worst_mase = max(rows, key=lambda s: s.mase)
        worst_busy = min(rows, key=lambda s: s.busy_coverage)
        lines.append(
            f"{group:9} worst slice: MASE {worst_mase.mase:.3f} ({worst_mase.name}), "
            f"busy cov {worst_busy.busy_coverage:.3f} ({worst_busy.name})"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SHARED, help="the shared data folder")
    parser.add_argument("--set", choices=("tuning", "held-out", "both"), default="both")
    parser.add_argument("--level-weight", type=float, default=LEVEL_WEIGHT, help="0: no recalibration")
    parser.add_argument("--busy-quantile", type=float, default=BUSY_QUANTILE)
    parser.add_argument("--validation-days", type=int, default=7, help="the profile's validation days")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    groups = SETS if args.set == "both" else (args.set.replace("-", " "),)
    make = partial(
        RealtimeProfile,
        level_weight=args.level_weight,
        busy_quantile=args.busy_quantile,
        validation_days=args.validation_days,
    )
    scores = [score_series(*entry, make_forecaster=make) for entry in load_split(args.data, groups)]
    sys.stdout.write("\n".join(table(scores)) + "\n")


if __name__ == "__main__":
    main()
