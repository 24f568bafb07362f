"""The simple forecasts the real-time profile must beat, with the profile's interface.

- **seasonal naive, 168 h and 24 h** (FPP3 §5.2): the same hour one week, or one day,
  earlier; with less history than a period, the shorter period.
- **median of the same hour over the last four weeks**: the robust version of the
  weekly naive forecast (with fewer weeks, the weeks there are; under one, the day
  before).
- **MSTL + ETS** (statsmodels): MSTL (Bandara, Hyndman & Bergmeir 2021) splits the last
  four weeks into daily and weekly seasonal components and the rest; the seasonal parts
  repeat their last cycle and the rest is forecast by simple exponential smoothing,
  ETS(A,N,N) (FPP3 §8.1), as statsforecast's MSTL model does. Weekly only from two full
  weeks (statsmodels needs two cycles).

Each gives a P90 too, the way such a method usually would: its point forecast plus the
conformal 0.9 quantile of its own errors on the history (the seasonal methods' errors
over the last four weeks, exactly their day-ahead errors; MSTL + ETS's in-sample
residuals, one step ahead, which understate a day-ahead error).
"""

from __future__ import annotations

import warnings
from enum import Enum

import numpy as np

from contract.errors import InputError
from forecasting.quantiles import conformal_quantile
from forecasting.realtime import (
    HOURS_PER_DAY,
    HOURS_PER_WEEK,
    FloatArray,
    HourArray,
    ProfileForecast,
)
from forecasting.realtime_members import same_hour_median

__all__ = ["BaselineForecaster", "SeasonalBaseline", "mstl_ets", "same_hour_median", "seasonal_naive"]

#: The history the baselines look back over: four weeks.
LOOKBACK_HOURS = 4 * HOURS_PER_WEEK
_HOUR = np.timedelta64(1, "h")


class SeasonalBaseline(Enum):
    SEASONAL_NAIVE_168 = "seasonal naive 168 h"
    SEASONAL_NAIVE_24 = "seasonal naive 24 h"
    SAME_HOUR_MEDIAN_4W = "median same hour 4 weeks"
    MSTL_ETS = "MSTL + ETS"


def seasonal_naive(requests: FloatArray, period: int, horizon: int) -> FloatArray:
    """``y(t - period)``, repeating the last observed cycle beyond one period ahead."""
    if requests.size < period:
        period = HOURS_PER_DAY if requests.size >= HOURS_PER_DAY else 1
    start = requests.size - period
    forecast: FloatArray = requests[start + np.arange(horizon) % period]
    return forecast


def _in_sample_errors(requests: FloatArray, kind: SeasonalBaseline) -> FloatArray:
    """The method's own errors on the last four weeks of history (its day-ahead errors)."""
    n = requests.size
    period = {
        SeasonalBaseline.SEASONAL_NAIVE_168: HOURS_PER_WEEK,
        SeasonalBaseline.SEASONAL_NAIVE_24: HOURS_PER_DAY,
        SeasonalBaseline.SAME_HOUR_MEDIAN_4W: HOURS_PER_WEEK,
    }[kind]
    if n < period + HOURS_PER_DAY:
        period = HOURS_PER_DAY if n >= 2 * HOURS_PER_DAY else 1
    targets = np.arange(max(period, n - LOOKBACK_HOURS), n)
    if kind is SeasonalBaseline.SAME_HOUR_MEDIAN_4W and period == HOURS_PER_WEEK:
        weeks = np.arange(1, 5)[:, None]
        index = targets[None, :] - HOURS_PER_WEEK * weeks
        values = np.where(index >= 0, requests[np.clip(index, 0, None)], np.nan)
        fitted = np.nanmedian(values, axis=0)
    else:
        fitted = requests[targets - period]
    errors: FloatArray = requests[targets] - fitted
    return errors


def mstl_ets(requests: FloatArray, horizon: int) -> tuple[FloatArray, FloatArray]:
    """MSTL + ETS(A,N,N) on the last four weeks: (point forecast, in-sample residuals)."""
    from statsmodels.tsa.holtwinters import SimpleExpSmoothing
    from statsmodels.tsa.seasonal import MSTL

    window = requests[-LOOKBACK_HOURS:]
    periods = [p for p in (HOURS_PER_DAY, HOURS_PER_WEEK) if window.size >= 2 * p + 1]
    with warnings.catch_warnings():
        # LOESS on flat runs (zero hours) and the optimiser of a near-constant series warn;
        # the results are checked for finiteness below instead.
        warnings.simplefilter("ignore")
        if periods:
            decomposition = MSTL(window, periods=periods).fit()
            seasonal = np.asarray(decomposition.seasonal, dtype=float).reshape(window.size, -1)
        else:
            seasonal = np.zeros((window.size, 1))
        adjusted = window - seasonal.sum(axis=1)
        smoothing = SimpleExpSmoothing(adjusted, initialization_method="estimated").fit()
        level = np.asarray(smoothing.forecast(horizon), dtype=float)
        residuals = adjusted - np.asarray(smoothing.fittedvalues, dtype=float)
    future = np.zeros(horizon)
    for column, period in enumerate(periods):
        last_cycle = seasonal[-period:, column]
        future += last_cycle[np.arange(horizon) % period]
    point = np.maximum(level + future, 0.0)
    if not (np.all(np.isfinite(point)) and np.all(np.isfinite(residuals))):
        raise InputError("requests", "a series MSTL + ETS can fit", "non-finite components")
    return point, residuals


class BaselineForecaster:
    """One simple baseline with ``fit(hours, requests)`` and ``predict(start, horizon)``."""

    def __init__(self, kind: SeasonalBaseline) -> None:
        self.kind = kind

    def fit(self, hours: HourArray, requests: FloatArray) -> BaselineForecaster:
        self.requests_ = np.asarray(requests, dtype=float)
        self.next_hour_ = np.asarray(hours).astype("datetime64[h]")[-1] + _HOUR
        return self

    def predict(self, start_hour: object, horizon_hours: int = HOURS_PER_DAY) -> ProfileForecast:
        start: np.datetime64 = np.datetime64(start_hour, "m").astype("datetime64[h]")  # type: ignore[call-overload]
        if start != self.next_hour_:
            raise InputError("start_hour", f"{self.next_hour_} (the hour after the history)", str(start))
        history = self.requests_
        if self.kind is SeasonalBaseline.MSTL_ETS:
            p50, errors = mstl_ets(history, horizon_hours)
        else:
            errors = _in_sample_errors(history, self.kind)
            if self.kind is SeasonalBaseline.SAME_HOUR_MEDIAN_4W:
                p50 = same_hour_median(history, horizon_hours)
            else:
                period = HOURS_PER_WEEK if self.kind is SeasonalBaseline.SEASONAL_NAIVE_168 else HOURS_PER_DAY
                p50 = seasonal_naive(history, period, horizon_hours)
        margin = max(conformal_quantile(errors, 0.9), 0.0) if errors.size else 0.0
        hours = start + np.arange(horizon_hours).astype("timedelta64[h]")
        return ProfileForecast(hours, p50, p50 + margin, self.kind)
