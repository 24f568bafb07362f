"""The settings the real-time profile's families combine (forecasting/realtime.py): each
maps a ``log1p`` history and a horizon to a ``log1p`` forecast, or None when the history is
too short for it; and the calendar helpers the profile and its baselines share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
HourArray = npt.NDArray[np.datetime64]

HOURS_PER_DAY = 24
HOURS_PER_WEEK = 168
#: 1970-01-05 was a Monday; slot 0 of the weekly profile is Monday 00:00.
_MONDAY = np.datetime64("1970-01-05T00", "h")
#: Scale of a normal distribution's MAD, to read a MAD as a standard deviation.
MAD_TO_SIGMA = 1.4826


def hour_of_day(hours: HourArray) -> npt.NDArray[np.int64]:
    """Hour of the day, 0-23."""
    return ((np.asarray(hours).astype("datetime64[h]") - _MONDAY).astype(np.int64) % HOURS_PER_DAY).astype(
        np.int64
    )


def week_slot(hours: HourArray) -> npt.NDArray[np.int64]:
    """Hour of the week, 0 = Monday 00:00 .. 167 = Sunday 23:00."""
    return ((hours - _MONDAY).astype(np.int64) % HOURS_PER_WEEK).astype(np.int64)


def centred_mean(z: FloatArray, window_hours: int) -> FloatArray:
    """Moving average over a full window, centred where the series allows.

    Near the ends the window slides inward instead of shrinking: a half window at the
    end of a week would average only the busy weekdays and bias the shape of the hours
    it detrends (seen on the LoRA trace).
    """
    window = min(window_hours, z.size)
    cumulative = np.concatenate([[0.0], np.cumsum(z)])
    lo = np.clip(np.arange(z.size) - window // 2, 0, z.size - window)
    mean: FloatArray = (cumulative[lo + window] - cumulative[lo]) / window
    return mean


@dataclass(frozen=True, slots=True)
class Flat:
    """A flat setting: the median of the last ``level_hours``, every hour ahead."""

    level_hours: int

    def __call__(self, z: FloatArray, horizon: int) -> FloatArray | None:
        if z.size < self.level_hours:
            return None
        return np.full(horizon, float(np.median(z[-self.level_hours :])))


@dataclass(frozen=True, slots=True)
class Shaped:
    """A shaped setting: ``cycles`` periods of ``period`` hours, and the level-shift rule."""

    period: int
    cycles: int
    shift_sigmas: float
    recent_hours: int

    def __call__(self, z: FloatArray, horizon: int) -> FloatArray | None:
        span = self.period * self.cycles
        if z.size < span:
            return None
        # Detrend with a centred mean that may reach half a period before the window.
        context = z[-(span + self.period // 2) :]
        window = z[-span:]
        detrended = window - centred_mean(context, self.period)[-span:]
        shape = np.median(detrended.reshape(self.cycles, self.period), axis=0)
        shape = shape - shape.mean()
        adjusted = window - np.tile(shape, self.cycles)
        level = float(np.median(adjusted))
        residuals = adjusted - level
        recent = float(np.median(residuals[-self.recent_hours :]))
        sigma = MAD_TO_SIGMA * float(np.median(np.abs(residuals - np.median(residuals))))
        if abs(recent) > self.shift_sigmas * sigma:
            level += recent
        # The hour after the window has phase 0: the window starts a whole number of
        # periods before it.
        forecast: FloatArray = level + shape[np.arange(horizon) % self.period]
        return forecast


@dataclass(frozen=True, slots=True)
class Lagged:
    """A seasonal setting with no level of its own: per phase, the median of the last
    ``cycles`` periods (one cycle: the seasonal naive forecast)."""

    period: int
    cycles: int

    def __call__(self, z: FloatArray, horizon: int) -> FloatArray | None:
        span = self.period * self.cycles
        if z.size < span:
            return None
        by_phase = np.median(z[-span:].reshape(self.cycles, self.period), axis=0)
        forecast: FloatArray = by_phase[np.arange(horizon) % self.period]
        return forecast


def same_hour_median(requests: FloatArray, horizon: int, weeks: int = 4) -> FloatArray:
    """Median of the same hour of the week over the last ``weeks`` weeks there are
    (with under one week, the seasonal naive 24 h forecast; under a day, the last hour)."""
    available = min(weeks, requests.size // HOURS_PER_WEEK)
    ahead = np.arange(horizon)
    if available == 0:
        period = HOURS_PER_DAY if requests.size >= HOURS_PER_DAY else 1
        repeated: FloatArray = requests[requests.size - period + ahead % period]
        return repeated
    # Whole weeks back from each forecast hour, starting with the first one observed.
    first_back = ahead // HOURS_PER_WEEK + 1
    back = first_back[None, :] + np.arange(available)[:, None]
    index = requests.size + ahead[None, :] - HOURS_PER_WEEK * back
    median: FloatArray = np.median(requests[np.clip(index, 0, None)], axis=0)
    return median


@dataclass(frozen=True, slots=True)
class SameHourMedian:
    """:func:`same_hour_median` of the requests, on the log1p scale the members speak."""

    weeks: int

    def __call__(self, z: FloatArray, horizon: int) -> FloatArray | None:
        if z.size < HOURS_PER_WEEK:
            return None
        forecast: FloatArray = np.log1p(same_hour_median(np.expm1(z), horizon, self.weeks))
        return forecast


#: The hours whose requests recalibrate a level-less forecast: one whole day, so that the
#: ratio weighs every hour of the daily cycle once (12, 18 and 36 hours were worse on the
#: tuning split of benchmarks/realtime_split).
RECALIBRATION_HOURS = HOURS_PER_DAY


def recalibrated_level(
    forecast: FloatArray, before: FloatArray, actual: FloatArray, floor: float, weight: float
) -> FloatArray:
    """``forecast`` (requests) on the level of the latest hours: a multiplicative level with
    shrinkage.

    ``before`` is what the same forecaster forecast for the latest hours from the history
    before them, ``actual`` what came. Their ratio ``r = (sum actual + n floor) / (sum before
    + n floor)`` is how far the level has moved; the forecast is scaled by ``r ** weight``
    (on ``requests + floor``, so that a near-zero hour does not swing it): ``weight`` shrinks
    the one day's ratio toward 1, the level the weeks of history say (an exponent on a ratio
    of sums is the log-scale analogue of simple exponential smoothing's gain, FPP3 §8.1). A
    holiday or a burst in those hours moves the forecast by at most ``r ** weight``.
    """
    floor = max(floor, 1e-6)
    ratio = (float(np.sum(actual)) + floor * actual.size) / (float(np.sum(before)) + floor * before.size)
    scaled: FloatArray = np.maximum((forecast + floor) * ratio**weight - floor, 0.0)
    return scaled


#: One setting of a family: (log1p history, horizon) -> log1p forecast, or None when the
#: history is too short for it.
Member = Callable[[FloatArray, int], FloatArray | None]


def busiest_quarter(actual: FloatArray) -> npt.NDArray[np.bool_]:
    """Per row (one day), the quarter of hours with the most requests."""
    count = max(1, actual.shape[1] // 4)
    busy = np.zeros(actual.shape, dtype=bool)
    np.put_along_axis(busy, np.argsort(actual, axis=1, kind="stable")[:, -count:], True, axis=1)
    return busy


def rise_hold(actual: FloatArray, seen: HourArray, hours: HourArray, regrow: float, ahead: int) -> FloatArray:
    """The rise hold (forecasting/realtime.py): when the latest of ``actual`` (requests of the
    hours ``seen``) rose above the one before by more than ``regrow``, per hour of ``hours``
    within ``ahead`` hours after it the latest plus the rise once per hour between; else 0."""
    rise = float(actual[-1] - actual[-2]) if actual.size > 1 else 0.0
    after = ((hours - seen[-1]) // np.timedelta64(1, "h")).astype(float)
    held: FloatArray = np.where((after <= ahead) & (rise > regrow), actual[-1] + rise * after, 0.0)
    return held
