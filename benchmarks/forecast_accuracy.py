"""The real-time profile's accuracy on unseen series, against the same-hour median of four weeks.

    .venv/bin/python -m benchmarks.forecast_accuracy [--data ../shared/data] [--variants]

Protocol (forecasting/backtest.py): a fresh fit at every daily origin after two weeks,
each forecasting the next 24 hours. Per series: the profile's P50 MASE and that of the
same-hour median of the previous four weeks (the ratio below 1 is the goal), the P90
coverage over all hours (goal 0.85-0.95) and in each day's busiest quarter (goal >= 0.80).

Two sets of series, three of them from the pod trace of Alibaba's production GPU cluster
(``alibaba_openb_pods_v2023.csv`` in the shared data, its last five weeks, when pods
arrive all day):

- **tuning**: the bundled series (training_data/traffic) and the trace's pod submissions
  per hour (bursty); the profile's constants (surge decay, the hourly band's window, the
  median's margin, the blend) were chosen on these;
- **held out**: never read while tuning: the trace's GPUs requested per hour (each pod
  created in the hour weighed by its GPUs, ``num_gpu x gpu_milli / 1000``) and its GPUs
  in use per hour (the scheduled pods alive in the hour, weighed the same way).

``--variants`` also scores the profile without the nowcast (``surge_decay=0``), the
effect of the nowcast on day-ahead accuracy. ``--nowcast`` scores what the nowcast is for,
the next hours (bundled series only): refit at each daily origin, then fed hour by hour,
each hour forecasting the next ``NOWCAST_HOURS``; the P90's shortfall (requests above it)
and excess (above need), as shares of the series' mean per hour, with and without it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from features.traffic import HourlyTraffic, load_traffic
from forecasting.backtest import accuracy, config_for, run_backtest
from forecasting.realtime import HOURS_PER_WEEK, RealtimeProfile
from forecasting.realtime_training import bundled_traffic_paths
from forecasting.seasonal_baselines import BaselineForecaster, SeasonalBaseline

#: The shared data folder beside the repository (``--data`` names another).
SHARED = Path("../shared/data")
PODS = "workloads/alibaba_openb_pods_v2023.csv"
#: The pod trace's last five weeks: submissions arrive all day (earlier weeks are sparse).
POD_WEEKS = 5


#: The pod trace's hourly series: what each hour counts (the backtest's three; the surge
#: table also reads the pods deleted and the CPUs requested per hour).
POD_MEASURES = ("pods", "gpus requested", "gpus in use")
POD_MEASURES_ALL = (*POD_MEASURES, "pods deleted", "cpus requested")


def write_pod_series(
    pods: Path,
    out: Path,
    weeks: int = POD_WEEKS,
    measure: str = "pods",
    *,
    qos: str | None = None,
    drop_hours: int = 0,
) -> Path:
    """An hourly series of the production cluster's pod trace, its last ``weeks`` weeks, as a
    traffic CSV (``hour,requests``), for the backtest and ``gpuplan simulate --traffic``:
    pods created per hour (``pods``), their GPUs (``gpus requested``), the GPUs of the
    scheduled pods alive in the hour (``gpus in use``), the pods deleted per hour (``pods
    deleted``) or the CPUs the pods created asked for (``cpus requested``). ``qos`` keeps the
    pods of one class only (``LS``, ``BE``, ...); ``drop_hours`` ends the series that many
    hours before the trace's end (an earlier window of the same weeks' length)."""
    import numpy as np
    import pandas as pd

    trace = pd.read_csv(
        pods,
        usecols=[
            "creation_time",
            "scheduled_time",
            "deletion_time",
            "num_gpu",
            "gpu_milli",
            "cpu_milli",
            "qos",
        ],
    )
    if qos is not None:
        trace = trace[trace["qos"] == qos]
    gpus = (trace["num_gpu"] * trace["gpu_milli"] / 1000).to_numpy(dtype=float)
    # Through the hour the last pod arrived (in the whole trace: a class's series ends there too).
    end = int(pd.read_csv(pods, usecols=["creation_time"])["creation_time"].max() // 3600) + 1 - drop_hours
    first = end - weeks * HOURS_PER_WEEK
    created = (trace["creation_time"] // 3600).to_numpy(dtype=int) - first
    inside = (created >= 0) & (created < end - first)
    values: np.ndarray  # counts for pods, GPUs or CPUs (fractional) otherwise
    if measure == "pods":
        values = np.bincount(created[inside], minlength=end - first)
    elif measure == "gpus requested":
        values = np.bincount(created[inside], weights=gpus[inside], minlength=end - first)
    elif measure == "cpus requested":
        cpus = trace["cpu_milli"].to_numpy(dtype=float) / 1000
        values = np.bincount(created[inside], weights=cpus[inside], minlength=end - first)
    elif measure == "pods deleted":
        deleted = (trace["deletion_time"] // 3600).to_numpy(dtype=int) - first
        kept = (deleted >= 0) & (deleted < end - first)
        values = np.bincount(deleted[kept], minlength=end - first)
    elif measure == "gpus in use":
        scheduled = trace["scheduled_time"].notna().to_numpy()
        since = (trace["scheduled_time"].fillna(0) // 3600).to_numpy(dtype=int) - first
        until = (trace["deletion_time"] // 3600).to_numpy(dtype=int) - first
        change = np.zeros(end - first + 1)
        np.add.at(change, np.clip(since[scheduled], 0, end - first), gpus[scheduled])
        np.add.at(change, np.clip(until[scheduled], 0, end - first), -gpus[scheduled])
        values = np.cumsum(change)[:-1]
    else:
        raise ValueError(f"measure must be one of {POD_MEASURES_ALL}; got {measure!r}")
    # The trace's clock starts at 0 s; put it on a Monday so that weeks have their usual phase.
    hours = pd.date_range("2023-01-02", periods=values.size, freq="h")
    pd.DataFrame({"hour": hours, "requests": np.round(values, 3)}).to_csv(out, index=False)
    return out


#: How far ahead the nowcast is scored.
NOWCAST_HOURS = 6


def nowcast_rows(decays: tuple[float, ...] = (0.0, 0.8)) -> list[str]:
    import numpy as np

    rows = []
    for path in bundled_traffic_paths():
        traffic = load_traffic(path)
        hours, requests = traffic.hours, traffic.requests
        initial = config_for(len(traffic)).initial_hours
        cells = []
        for decay in decays:
            short = excess = 0.0
            count = 0
            for origin in range(initial, requests.size - 24 - NOWCAST_HOURS, 24):
                model = RealtimeProfile(surge_decay=decay).fit(hours[:origin], requests[:origin])
                for k in range(24):
                    if k:
                        model.update(hours[origin + k - 1], float(requests[origin + k - 1]))
                    forecast = model.predict(hours[origin + k], NOWCAST_HOURS)
                    actual = requests[origin + k : origin + k + NOWCAST_HOURS]
                    short += float(np.maximum(actual - forecast.p90, 0).sum())
                    excess += float(np.maximum(forecast.p90 - actual, 0).sum())
                    count += NOWCAST_HOURS
            scale = float(requests.mean()) * count
            cells.append(f"decay {decay:g}: short {short / scale:.4f} excess {excess / scale:.3f}")
        rows.append(f"{path.name:38} " + " | ".join(cells))
    return rows


def score(name: str, traffic: HourlyTraffic, variants: bool) -> list[str]:
    config = config_for(len(traffic))
    median = accuracy(
        run_backtest(
            traffic,
            series=name,
            config=config,
            make_forecaster=partial(BaselineForecaster, SeasonalBaseline.SAME_HOUR_MEDIAN_4W),
            forecaster="median",
        )
    )
    makers: dict[str, Callable[[], RealtimeProfile]] = {"profile": RealtimeProfile}
    if variants:
        makers["no nowcast"] = partial(RealtimeProfile, surge_decay=0.0)
    rows = []
    for label, make in makers.items():
        row = accuracy(run_backtest(traffic, series=name, config=config, make_forecaster=make))
        rows.append(
            f"{name:38} {label:11} {row.origins:3d} {row.mase:6.3f} {median.mase:6.3f} "
            f"{row.mase / median.mase:6.3f} {row.p90_coverage:6.3f} {row.busy_p90_coverage:6.3f}"
            f"  {row.method}"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SHARED, help="the shared data folder")
    parser.add_argument("--held-out-only", action="store_true")
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--nowcast", action="store_true", help="score the next hours with and without it")
    parser.add_argument("--write-pods", type=Path, help="write a pod series (--measure) as a CSV and stop")
    parser.add_argument(
        "--measure", choices=POD_MEASURES_ALL, default="pods", help="what --write-pods counts"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.write_pods:
        written = write_pod_series(args.data / PODS, args.write_pods, measure=args.measure)
        sys.stdout.write(f"wrote {written}\n")
        return
    if args.nowcast:
        sys.stdout.write("\n".join(nowcast_rows()) + "\n")
        return
    series: list[tuple[str, str, HourlyTraffic]] = []
    with tempfile.TemporaryDirectory() as folder:
        pods = {
            measure: load_traffic(
                write_pod_series(args.data / PODS, Path(folder) / "pods.csv", measure=measure)
            )
            for measure in POD_MEASURES
        }
    if not args.held_out_only:
        series += [("tuning", p.name, load_traffic(p)) for p in bundled_traffic_paths()]
        series.append(("tuning", "openb pods submitted (5 weeks)", pods["pods"]))
    series += [("held out", f"openb {m} (5 weeks)", pods[m]) for m in POD_MEASURES[1:]]
    header = (
        f"{'set':9} {'series':38} {'forecaster':11} {'n':>3} {'MASE':>6} {'median':>6} "
        f"{'ratio':>6} {'P90cov':>6} {'busy':>6}  chosen"
    )
    lines = [header]
    for group, name, traffic in series:
        lines += [f"{group:9} {row}" for row in score(name, traffic, args.variants)]
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
