"""Rolling-origin backtest of a day-ahead forecaster, in requests and in GPUs.

Protocol: a forecast origin falls every ``step_hours`` (24) after ``initial_hours``
(two weeks; one week for series under three weeks, which the rows mark) and forecasts
the next ``horizon_hours`` (24). At every origin the forecaster is fitted afresh on the
history before it, exactly what ``gpuplan forecast realtime --at ORIGIN`` does; the
profile's own rolling-origin validation runs inside that fit, on that history only, so
no scored hour ever chooses a setting. The same protocol scores the simple baselines
(:mod:`forecasting.seasonal_baselines`).

Accuracy (Hyndman & Athanasopoulos, FPP3 §5.8):

- **MASE**: absolute error scaled by the in-sample MAE of the seasonal naive method on
  the history before the origin (Hyndman & Koehler 2006), averaged over all forecast
  hours; period 168 with two weeks of history, 24 with less (``mase_period``).
- **relative MAE**: MAE divided by the MAE of the seasonal naive *forecast*
  (``y(t - 168)``, or ``y(t - 24)`` with under a week) over the same hours.
- **P90 coverage**: share of hours whose actual requests were at or below P90; and the
  same on each day's busiest quarter of hours (the 6 of 24 with the most requests),
  where a shortfall actually happens.

GPUs: P90 becomes a swap-capped GPU curve per origin (:mod:`forecasting.gpu_mapping`);
it is scored against the GPUs the actual requests needed, and against a static
reservation at the observed peak need over the *evaluated* hours (the FIFO baseline of
CONTRACT.md). That peak is known only in hindsight: it is the smallest static
reservation that serves 100% of the demand, so it is the cheapest fair baseline.
``saving = 1 - planned GPU-hours / (peak GPUs x evaluated hours)``. Windows are mapped
one origin at a time and then chained (:func:`forecasting.gpu_mapping.chain_daily_plans`)
so that the swap cap also holds across the boundary between two daily plans. To start
the next day's rises in time, each origin also forecasts the 24 hours after its window
(planning only, never scored), as ``gpuplan forecast realtime`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from contract.errors import InputError
from features.traffic import HourlyTraffic
from forecasting.gpu_mapping import AppCapacity, chain_daily_plans, gpu_curve, gpus_needed
from forecasting.realtime import (
    HOURS_PER_DAY,
    HOURS_PER_WEEK,
    HourArray,
    ProfileForecast,
    RealtimeProfile,
    busiest_quarter,
)

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]

#: Fine steps where the trade-off turns (99% served is reached at 0-0.7 on every
#: bundled series with the P90 basis), then coarse steps far enough to serve all.
DEFAULT_HEADROOMS = (
    *(round(0.05 * step, 2) for step in range(11)),
    0.6,
    0.7,
    0.8,
    1.0,
    1.25,
    1.5,
    2.0,
    3.0,
)
#: A series needs this much history for the full protocol (two weeks, then origins).
FULL_PROTOCOL_HOURS = 3 * HOURS_PER_WEEK


class DayAheadForecaster(Protocol):
    """What the backtest needs: fit on a history, forecast from the hour after it."""

    def fit(self, hours: HourArray, requests: FloatArray) -> DayAheadForecaster: ...

    def predict(self, start_hour: object, horizon_hours: int = ...) -> ProfileForecast: ...


@dataclass(frozen=True, slots=True)
class BacktestConfig:
    initial_hours: int = 2 * HOURS_PER_WEEK
    step_hours: int = HOURS_PER_DAY
    horizon_hours: int = HOURS_PER_DAY

    @property
    def short_history(self) -> bool:
        """Origins start with under two weeks of history: the daily fallback."""
        return self.initial_hours < 2 * HOURS_PER_WEEK


def config_for(hours: int) -> BacktestConfig:
    """The full protocol (two weeks, then daily origins) where three weeks exist.

    Shorter series (the two-week ServeGen traces) get one week of history and daily
    origins over the rest: the profile's daily fallback, marked ``short_history``.
    """
    if hours >= FULL_PROTOCOL_HOURS:
        return BacktestConfig()
    return BacktestConfig(initial_hours=HOURS_PER_WEEK)


@dataclass(frozen=True, slots=True, eq=False)
class ForecastBacktest:
    """Forecasts at each origin: arrays of shape (origins, horizon_hours)."""

    series: str
    forecaster: str
    origins: tuple[str, ...]
    actual: FloatArray
    p50: FloatArray
    p90: FloatArray
    seasonal_naive: FloatArray
    mase_scale: FloatArray
    mase_period: int
    methods: tuple[str, ...]
    short_history: bool
    #: The forecasts for the ``horizon_hours`` after each window, made at the same
    #: origin: not scored, only used to start the next day's rises in time.
    p50_next: FloatArray
    p90_next: FloatArray


@dataclass(frozen=True, slots=True)
class AccuracyRow:
    series: str
    forecaster: str
    origins: int
    hours: int
    method: str
    mase: float
    mase_period: int
    relative_mae: float
    mae: float
    seasonal_naive_mae: float
    p90_coverage: float
    busy_p90_coverage: float
    short_history: bool


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One headroom setting of the GPU trade-off."""

    series: str
    basis: str
    headroom: float
    gpu_hours: int
    peak_reservation_gpu_hours: int
    saving: float
    hours_covered: float
    demand_served: float


def run_backtest(
    traffic: HourlyTraffic,
    *,
    series: str,
    config: BacktestConfig = BacktestConfig(),
    make_forecaster: Callable[[], DayAheadForecaster] = RealtimeProfile,
    forecaster: str = "profile",
) -> ForecastBacktest:
    """Fit afresh at every origin on the history before it; forecast two windows ahead."""
    hours, requests = traffic.hours, traffic.requests
    n_hours = requests.size
    horizon = config.horizon_hours
    last_origin = n_hours - horizon
    if last_origin < config.initial_hours or config.initial_hours < HOURS_PER_DAY:
        raise InputError(
            "traffic",
            f"at least {config.initial_hours + horizon} hours "
            f"(initial {config.initial_hours} + horizon {horizon})",
            f"{n_hours} hours",
            source=series,
        )
    origins = list(range(config.initial_hours, last_origin + 1, config.step_hours))
    period = HOURS_PER_WEEK if config.initial_hours >= 2 * HOURS_PER_WEEK else HOURS_PER_DAY
    rows: dict[str, list[FloatArray]] = {key: [] for key in ("p50", "p90", "p50_next", "p90_next", "naive")}
    scales: list[float] = []
    methods: list[str] = []
    for origin in origins:
        model = make_forecaster().fit(hours[:origin], requests[:origin])
        forecast = model.predict(hours[origin], 2 * horizon)
        rows["p50"].append(forecast.p50[:horizon])
        rows["p90"].append(forecast.p90[:horizon])
        rows["p50_next"].append(forecast.p50[horizon:])
        rows["p90_next"].append(forecast.p90[horizon:])
        naive_period = HOURS_PER_WEEK if origin >= HOURS_PER_WEEK else HOURS_PER_DAY
        rows["naive"].append(requests[origin - naive_period + np.arange(horizon) % naive_period])
        scales.append(_mase_scale(requests[:origin], period))
        methods.append(forecast.method.value)
    logger.info("%s / %s: %d origins, methods %s", series, forecaster, len(origins), sorted(set(methods)))
    return ForecastBacktest(
        series=series,
        forecaster=forecaster,
        origins=tuple(str(hours[o]) for o in origins),
        actual=np.array([requests[o : o + horizon] for o in origins]),
        p50=np.array(rows["p50"]),
        p90=np.array(rows["p90"]),
        seasonal_naive=np.array(rows["naive"]),
        mase_scale=np.array(scales),
        mase_period=period,
        methods=tuple(methods),
        short_history=config.short_history,
        p50_next=np.array(rows["p50_next"]),
        p90_next=np.array(rows["p90_next"]),
    )


def _mase_scale(history: FloatArray, period: int) -> float:
    """In-sample MAE of the seasonal naive method with ``period`` (Hyndman & Koehler 2006)."""
    return float(np.mean(np.abs(history[period:] - history[:-period])))


def accuracy(backtest: ForecastBacktest) -> AccuracyRow:
    errors = np.abs(backtest.p50 - backtest.actual)
    naive_errors = np.abs(backtest.seasonal_naive - backtest.actual)
    covered = backtest.actual <= backtest.p90 + 1e-9
    busy = busiest_quarter(backtest.actual)
    methods = sorted(set(backtest.methods))
    return AccuracyRow(
        series=backtest.series,
        forecaster=backtest.forecaster,
        origins=len(backtest.origins),
        hours=int(errors.size),
        method="+".join(methods),
        # Undefined (NaN, printed n/a) where the in-sample seasonal naive is exact (all-zero traffic).
        mase=float(np.mean(errors / backtest.mase_scale[:, None]))
        if np.all(backtest.mase_scale > 0)
        else float("nan"),
        mase_period=backtest.mase_period,
        relative_mae=float(errors.mean() / naive_errors.mean()) if naive_errors.mean() > 0 else float("nan"),
        mae=float(errors.mean()),
        seasonal_naive_mae=float(naive_errors.mean()),
        p90_coverage=float(np.mean(covered)),
        busy_p90_coverage=float(np.mean(covered[busy])),
        short_history=backtest.short_history,
    )


def gpu_tradeoff(
    backtest: ForecastBacktest,
    *,
    requests_per_gpu_hour: float,
    swap_cap: int,
    headrooms: Sequence[float] = DEFAULT_HEADROOMS,
    basis: Literal["p50", "p90"] = "p90",
) -> list[GpuRow]:
    """GPU-hours saved against peak reservation vs demand covered, per headroom.

    ``basis`` is the forecast the headroom multiplies: the product maps P90; P50 with
    headroom is reported beside it because on spiky series (LoRA) the P90 band is so
    wide that even zero headroom over-reserves.
    """
    forecasts = backtest.p90 if basis == "p90" else backtest.p50
    following = backtest.p90_next if basis == "p90" else backtest.p50_next
    horizon = forecasts.shape[1]
    need_actual = gpus_needed(backtest.actual, requests_per_gpu_hour)
    # A peak reservation holds at least one GPU (a service with no traffic still keeps one
    # up); this also keeps the saving defined on an all-zero series.
    peak_gpu_hours = max(int(need_actual.max()), 1) * need_actual.size
    rows = []
    for headroom in headrooms:
        capacity = AppCapacity(requests_per_gpu_hour, headroom, swap_cap)
        # Each day's plan sees its origin's forecast of the next day too, so that rises
        # at the start of the next day begin in this day's last hours.
        daily = np.array(
            [
                gpu_curve(np.concatenate([window, after]), capacity)[:horizon]
                for window, after in zip(forecasts, following, strict=True)
            ]
        )
        curves = chain_daily_plans(daily, swap_cap)
        served = np.minimum(curves, need_actual)
        total_need = int(need_actual.sum())
        rows.append(
            GpuRow(
                series=backtest.series,
                basis=basis,
                headroom=headroom,
                gpu_hours=int(curves.sum()),
                peak_reservation_gpu_hours=peak_gpu_hours,
                saving=1.0 - float(curves.sum()) / peak_gpu_hours,
                hours_covered=float(np.mean(curves >= need_actual)),
                demand_served=float(served.sum()) / total_need if total_need else 1.0,
            )
        )
    return rows


def saving_at_served(rows: Sequence[GpuRow], target: float = 0.99) -> GpuRow | None:
    """The cheapest headroom whose share of GPU-demand served reaches ``target``."""
    eligible = [row for row in rows if row.demand_served >= target]
    return max(eligible, key=lambda row: row.saving) if eligible else None
