"""``gpuplan forecast realtime``: the next hours' P50, P90 and GPUs for one app.

The GPU curve is planned across the end of the window, as the backtest plans it: the
profile also forecasts the 24 hours after the window, and the swap-capped curve is
computed over both, so a rise just after the window starts inside it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

#: Four weeks of hourly steps, the scheduler's longest horizon.
MAX_HOURS = 168 * 4
#: Headroom above P90 as a fraction: 10 is eleven times the forecast, beyond any use.
MAX_HEADROOM = 10.0
#: Hours forecast beyond the window so that the GPU plan starts the next rises in time.
LOOKAHEAD_HOURS = 24


def _say(text: str) -> None:
    """Command output goes to stdout; logging stays on stderr."""
    sys.stdout.write(text + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--traffic", type=Path, required=True, help="CSV: hour,requests (or timestamp,... per request)"
    )
    parser.add_argument(
        "--column", default=None, metavar="NAME", help="read column NAME as the hourly request count"
    )
    parser.add_argument(
        "--at", required=True, help="first forecast hour; only history strictly before it is used"
    )
    parser.add_argument("--hours", type=int, default=24, help="horizon in hours (default 24, at most 672)")
    parser.add_argument(
        "--requests-per-gpu-hour",
        type=float,
        default=None,
        help="capacity of one GPU at the latency target, > 0 (default: peak of history / 8)",
    )
    parser.add_argument("--headroom", type=float, default=0.0, help="fraction above P90, in [0, 10]")
    parser.add_argument("--swap-cap", type=int, default=2, help="max GPUs changed per hour (0-8192)")
    parser.add_argument("--json", action="store_true", help="print a JSON list")


def run(args: argparse.Namespace) -> int:
    from datetime import UTC

    from contract.errors import InputError
    from contract.scenario_io import MAX_CLUSTER_GPUS
    from features.traffic import MAX_REQUESTS_PER_HOUR, forecast_caveats, load_traffic, parse_hour
    from forecasting.gpu_mapping import AppCapacity, gpu_curve
    from forecasting.realtime import RealtimeProfile
    from gpuplan.options import integer_in, number_in

    at = parse_hour(args.at, "--at")
    integer_in("--hours", args.hours, 1, MAX_HOURS)
    number_in("--headroom", args.headroom, 0.0, MAX_HEADROOM)
    integer_in("--swap-cap", args.swap_cap, 0, 2 * MAX_CLUSTER_GPUS)
    if args.requests_per_gpu_hour is not None:
        number_in(
            "--requests-per-gpu-hour", args.requests_per_gpu_hour, 0.0, MAX_REQUESTS_PER_HOUR, low_open=True
        )
    history = load_traffic(args.traffic, requests_column=args.column).before(at)
    if len(history) == 0:
        raise InputError(
            "--at",
            "a time after the first hour of the traffic file",
            args.at,
            source=str(args.traffic),
        )
    for caveat in forecast_caveats(history, at):
        logger.warning("%s", caveat)
    # When no capacity is given, a unit that puts the observed peak at 8 GPUs.
    requests_per_gpu_hour = args.requests_per_gpu_hour or max(float(history.requests.max()), 1.0) / 8
    capacity = AppCapacity(requests_per_gpu_hour, args.headroom, args.swap_cap)
    profile = RealtimeProfile().fit(history.hours, history.requests)
    forecast = profile.predict(at, args.hours + LOOKAHEAD_HOURS, regrow=capacity.regrow)
    # Planned over the window and the day after it; only the window is printed.
    gpus = gpu_curve(forecast.planned, capacity)[: args.hours]
    rows = [
        {
            "hour": hour.astype("datetime64[s]").item().replace(tzinfo=UTC).isoformat(),
            "p50": round(float(p50), 3),
            "p90": round(float(p90), 3),
            "gpus": int(count),
        }
        for hour, p50, p90, count in zip(
            forecast.hours[: args.hours],
            forecast.p50[: args.hours],
            forecast.p90[: args.hours],
            gpus,
            strict=True,
        )
    ]
    if args.json:
        _say(json.dumps(rows, indent=2))
        return 0
    _say(
        f"{args.traffic.name}: {profile.method_.value} profile on {len(history)} hours, "
        f"requests_per_gpu_hour={requests_per_gpu_hour:g}, headroom={args.headroom:g}, "
        f"swap_cap={args.swap_cap}"
    )
    _say(f"{'hour':25s} {'p50':>12s} {'p90':>12s} {'gpus':>5s}")
    for row in rows:
        _say(f"{row['hour']:25s} {row['p50']:12.1f} {row['p90']:12.1f} {row['gpus']:5d}")
    return 0
