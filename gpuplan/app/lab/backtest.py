"""The backtest use case: the real-time profile against the simple seasonal baselines.

Every forecaster runs the same rolling-origin protocol (:mod:`forecasting.backtest`) on
each traffic series and is scored the same way: MASE, P90 coverage overall and on each
day's busiest quarter of hours, and the GPU-hours it saves against a peak reservation
when its P90 (plus the least headroom that serves 99% of the GPU-demand) is planned.
The profile also runs once with its level re-estimation switched off, which shows what
following a level shift buys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from forecasting.backtest import accuracy, config_for, gpu_tradeoff, run_backtest, saving_at_served
from forecasting.realtime import RealtimeProfile
from forecasting.seasonal_baselines import BaselineForecaster, SeasonalBaseline

if TYPE_CHECKING:
    from features.traffic import HourlyTraffic
    from forecasting.backtest import AccuracyRow, DayAheadForecaster, ForecastBacktest, GpuRow

#: Unit of GPU capacity in the backtest: the observed peak of a series needs this many
#: GPUs. A scale choice, not something learned: it sets how coarse a GPU step is.
PEAK_GPUS = 16
#: The share of GPU-demand a plan must serve for its GPU-hours to count.
SERVED_TARGET = 0.99
#: The issue's goal: the profile's MASE at least this far below the best baseline.
MASE_GAIN_GOAL = 0.10
PROFILE = "profile"
PROFILE_WITHOUT_LEVEL_SHIFTS = "profile, level never re-estimated"


@dataclass(frozen=True)
class ForecasterResult:
    accuracy: AccuracyRow
    #: The cheapest P90 headroom serving 99% of the GPU-demand; None when none does.
    at_target: GpuRow | None
    baseline: bool


@dataclass(frozen=True)
class SeriesReport:
    series: str
    hours: int
    requests_per_gpu_hour: float
    swap_cap: int
    results: list[ForecasterResult]
    #: The profile's whole trade-off, GPUs from P90 and from P50, per headroom.
    profile_tradeoffs: dict[str, list[GpuRow]]
    profile_backtest: ForecastBacktest

    @property
    def profile(self) -> ForecasterResult:
        return self.results[0]

    @property
    def best_baseline(self) -> ForecasterResult:
        return min((r for r in self.results if r.baseline), key=lambda r: r.accuracy.mase)

    @property
    def mase_gain(self) -> float:
        """How far the profile's MASE is below the best baseline's (0.1 = 10% below)."""
        return 1.0 - self.profile.accuracy.mase / self.best_baseline.accuracy.mase


def forecasters(*, with_mstl: bool = True) -> dict[str, tuple[Callable[[], DayAheadForecaster], bool]]:
    """Name -> (factory, is a baseline), the product's profile first."""

    def baseline(kind: SeasonalBaseline) -> Callable[[], DayAheadForecaster]:
        return lambda: BaselineForecaster(kind)

    chosen: dict[str, tuple[Callable[[], DayAheadForecaster], bool]] = {
        PROFILE: (RealtimeProfile, False),
        PROFILE_WITHOUT_LEVEL_SHIFTS: (lambda: RealtimeProfile(level_shift_sigmas=float("inf")), False),
    }
    for kind in SeasonalBaseline:
        if with_mstl or kind is not SeasonalBaseline.MSTL_ETS:
            chosen[kind.value] = (baseline(kind), True)
    return chosen


def backtest_series(
    traffic: HourlyTraffic, *, series: str, swap_cap: int, with_mstl: bool = True
) -> SeriesReport:
    """Every forecaster's rolling-origin backtest on one hourly series."""

    config = config_for(len(traffic))
    requests_per_gpu_hour = max(float(traffic.requests.max()), 1.0) / PEAK_GPUS
    results: list[ForecasterResult] = []
    tradeoffs: dict[str, list[GpuRow]] = {}
    profile_backtest: ForecastBacktest | None = None
    for name, (factory, is_baseline) in forecasters(with_mstl=with_mstl).items():
        backtest = run_backtest(
            traffic, series=series, config=config, make_forecaster=factory, forecaster=name
        )
        rows = gpu_tradeoff(backtest, requests_per_gpu_hour=requests_per_gpu_hour, swap_cap=swap_cap)
        results.append(
            ForecasterResult(accuracy(backtest), saving_at_served(rows, SERVED_TARGET), is_baseline)
        )
        if name == PROFILE:
            profile_backtest = backtest
            p50_rows = gpu_tradeoff(
                backtest, requests_per_gpu_hour=requests_per_gpu_hour, swap_cap=swap_cap, basis="p50"
            )
            tradeoffs = {"p90": rows, "p50": p50_rows}
    assert profile_backtest is not None  # forecasters() always lists the profile first
    return SeriesReport(
        series=series,
        hours=len(traffic),
        requests_per_gpu_hour=requests_per_gpu_hour,
        swap_cap=swap_cap,
        results=results,
        profile_tradeoffs=tradeoffs,
        profile_backtest=profile_backtest,
    )
