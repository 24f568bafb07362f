"""Expanding-window backtest of the real-time profile, in requests and in GPUs.

Protocol (issue 5): the profile is fitted on the first ``initial_hours`` (two weeks);
from then on a forecast origin falls every ``step_hours`` (24) and forecasts the next
``horizon_hours`` (24). Between origins the profile is recalibrated with every observed
hour through :meth:`RealtimeProfile.update`, and rebuilt by a full ``fit`` on all the
history so far every ``refit_every_hours`` (a week), which is how the product runs it.

Accuracy (Hyndman & Athanasopoulos, FPP3 §5.8):

- **MASE**: absolute error scaled by the in-sample MAE of the seasonal naive method with
  period 168 on the history before the origin (Hyndman & Koehler 2006), averaged over
  all forecast hours. Undefined (NaN) with less than two weeks of history.
- **relative MAE**: MAE of the profile divided by the MAE of the seasonal naive
  *forecast* (``y(t - 168)``) over the same hours; below 1 the profile beats it.
- **P90 coverage**: share of hours whose actual requests were at or below P90.

GPUs: P90 becomes a swap-capped GPU curve per origin (:mod:`forecasting.gpu_mapping`);
it is scored against the GPUs the actual requests needed, and against a static
reservation at the observed peak need over the *evaluated* hours (the FIFO baseline of
CONTRACT.md). That peak is known only in hindsight: it is the smallest static
reservation that serves 100% of the demand, so it is the cheapest fair baseline (a
peak taken from the history before the origins can be lower and then under-serves, as
on LoRA, whose evaluated peak of 436 requests exceeds the history's 355).
``saving = 1 - planned GPU-hours / (peak GPUs x evaluated hours)``. Windows are mapped
one origin at a time and then chained (:func:`forecasting.gpu_mapping.chain_daily_plans`)
so that the swap cap also holds across the boundary between two daily plans; before
that, 6 of LoRA's 8 boundaries jumped by up to 20 GPUs in one hour. To start the next
day's rises in time, each origin also forecasts the 24 hours after its window (planning
only, never scored).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from contract.errors import InputError
from features.traffic import HourlyTraffic
from forecasting.gpu_mapping import AppCapacity, chain_daily_plans, gpu_curve, gpus_needed
from forecasting.realtime import HOURS_PER_DAY, HOURS_PER_WEEK, RealtimeProfile

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


@dataclass(frozen=True, slots=True)
class BacktestConfig:
    initial_hours: int = 2 * HOURS_PER_WEEK
    step_hours: int = HOURS_PER_DAY
    horizon_hours: int = HOURS_PER_DAY
    refit_every_hours: int = HOURS_PER_WEEK


@dataclass(frozen=True, slots=True, eq=False)
class ForecastBacktest:
    """Forecasts at each origin: arrays of shape (origins, horizon_hours)."""

    series: str
    origins: tuple[str, ...]
    actual: FloatArray
    p50: FloatArray
    p90: FloatArray
    seasonal_naive: FloatArray
    mase_scale: FloatArray
    methods: tuple[str, ...]
    #: The forecasts for the ``horizon_hours`` after each window, made at the same
    #: origin: not scored, only used to start the next day's rises in time.
    p50_next: FloatArray
    p90_next: FloatArray


@dataclass(frozen=True, slots=True)
class AccuracyRow:
    series: str
    origins: int
    hours: int
    method: str
    mase: float
    relative_mae: float
    mae: float
    seasonal_naive_mae: float
    p90_coverage: float


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
    make_profile: Callable[[], RealtimeProfile] = RealtimeProfile,
) -> ForecastBacktest:
    """Forecast at every origin, updating hourly and refitting weekly in between."""
    hours, requests = traffic.hours, traffic.requests
    n_hours = requests.size
    last_origin = n_hours - config.horizon_hours
    if last_origin < config.initial_hours or config.initial_hours < HOURS_PER_DAY:
        raise InputError(
            "traffic",
            f"at least {config.initial_hours + config.horizon_hours} hours "
            f"(initial {config.initial_hours} + horizon {config.horizon_hours})",
            f"{n_hours} hours",
            source=series,
        )
    origins = list(range(config.initial_hours, last_origin + 1, config.step_hours))
    profile = make_profile().fit(hours[: origins[0]], requests[: origins[0]])
    fitted_at = origins[0]
    rows: dict[str, list[FloatArray]] = {
        "p50": [],
        "p90": [],
        "p50_next": [],
        "p90_next": [],
        "naive": [],
        "actual": [],
    }
    scales: list[float] = []
    methods: list[str] = []
    seen = origins[0]
    for origin in origins:
        for step in range(seen, origin):
            profile.update(hours[step], float(requests[step]))
        seen = origin
        if origin - fitted_at >= config.refit_every_hours:
            profile = make_profile().fit(hours[:origin], requests[:origin])
            fitted_at = origin
        horizon = config.horizon_hours
        forecast = profile.predict(hours[origin], 2 * horizon)
        window = slice(origin, origin + horizon)
        rows["p50"].append(forecast.p50[:horizon])
        rows["p90"].append(forecast.p90[:horizon])
        rows["p50_next"].append(forecast.p50[horizon:])
        rows["p90_next"].append(forecast.p90[horizon:])
        rows["actual"].append(requests[window])
        rows["naive"].append(_seasonal_naive(requests, origin, config.horizon_hours))
        scales.append(_mase_scale(requests[:origin]))
        methods.append(forecast.method.value)
    logger.info("%s: %d origins, methods %s", series, len(origins), sorted(set(methods)))
    return ForecastBacktest(
        series=series,
        origins=tuple(str(hours[o]) for o in origins),
        actual=np.array(rows["actual"]),
        p50=np.array(rows["p50"]),
        p90=np.array(rows["p90"]),
        seasonal_naive=np.array(rows["naive"]),
        mase_scale=np.array(scales),
        methods=tuple(methods),
        p50_next=np.array(rows["p50_next"]),
        p90_next=np.array(rows["p90_next"]),
    )


def _seasonal_naive(requests: FloatArray, origin: int, horizon_hours: int) -> FloatArray:
    """FPP3 §5.2 seasonal naive, period 168: the same hour one week earlier.

    With less than a week before the origin, the same hour one day earlier.
    """
    period = HOURS_PER_WEEK if origin >= HOURS_PER_WEEK else HOURS_PER_DAY
    index = origin + np.arange(horizon_hours)
    # Beyond one period ahead, repeat the last observed cycle.
    back = period * (1 + np.arange(horizon_hours) // period)
    naive: FloatArray = requests[index - back]
    return naive


def _mase_scale(history: FloatArray) -> float:
    if history.size <= 2 * HOURS_PER_WEEK - 1:
        return float("nan")
    return float(np.mean(np.abs(history[HOURS_PER_WEEK:] - history[:-HOURS_PER_WEEK])))


def accuracy(backtest: ForecastBacktest) -> AccuracyRow:
    errors = np.abs(backtest.p50 - backtest.actual)
    naive_errors = np.abs(backtest.seasonal_naive - backtest.actual)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = errors / backtest.mase_scale[:, None]
    mase = float(np.mean(scaled)) if np.all(np.isfinite(scaled)) else float("nan")
    methods = sorted(set(backtest.methods))
    return AccuracyRow(
        series=backtest.series,
        origins=len(backtest.origins),
        hours=int(errors.size),
        method="+".join(methods),
        mase=mase,
        # Undefined (NaN, printed n/a) when the seasonal naive is exact, as on all-zero traffic.
        relative_mae=float(errors.mean() / naive_errors.mean()) if naive_errors.mean() > 0 else float("nan"),
        mae=float(errors.mean()),
        seasonal_naive_mae=float(naive_errors.mean()),
        p90_coverage=float(np.mean(backtest.actual <= backtest.p90 + 1e-9)),
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
