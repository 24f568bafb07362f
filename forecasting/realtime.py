"""The real-time demand profile: a level and an hourly shape, P50 and P90, with its
settings chosen by rolling-origin validation on the history before every forecast.

The model is the decomposition of forecasting-with-decomposition (Hyndman &
Athanasopoulos, *Forecasting: Principles and Practice*, 3rd ed., FPP3 §3 and §5.7) on
``z = log1p(requests)``, so that a level and a shape additive in ``z`` are
multiplicative in requests and a zero-traffic hour stays finite::

    z(t) = level + shape[phase(t)]

Three families, each the median of a few settings' forecasts (combining beats picking
one setting: Clemen 1989; the M4 competition, Makridakis et al. 2020):

- **flat**: no shape; the level is the median of the last 1, 6 or 24 hours (the naive
  forecast and two smoothed ones), for series that wander more than they cycle;
- **daily**: a 24-hour shape, the median over the last 3, 7 or 14 days of the series
  minus its centred daily mean (robust: one odd day moves a median little);
- **weekly**: a 168-hour shape, the same over the last 1 to 4 weeks; and, without a
  level of their own, the same hour last week and the median of the same hour over the
  last four weeks (spiky traffic such as LoRA's is forecast best close to them).

The level of a shaped setting is the median of its deseasonalized window. When the
residuals of the last ``recent_level_hours`` say the level has moved (their median is
more than ``level_shift_sigmas`` robust standard deviations from zero), it is
re-estimated from those hours alone: a level shift is followed within a day instead of
being averaged over weeks.

- **same-hour median**: the median of the same hour of the week over the last four
  weeks, alone, a candidate of its own (from two weeks of history) so that a series where
  that simple forecast is best can have it; it is chosen only when its validation error
  is ``MEDIAN_MARGIN`` (20%) below the best other family's, because on the bundled series
  its narrow wins over seven validation days did not hold on the days after;
- **blend**: the mean of the best other family's forecast and the same-hour median's,
  validated on the two families' own validation days (no refit). A combination of two
  forecasts that err differently is often better than either (Bates and Granger 1969);
  it keeps the profile near the median on series whose shape the families do not find
  (the pod submissions of a production GPU cluster), and the validation leaves it out
  where a family is clearly better (the bundled series, mostly).

The two level-less families (the same-hour median, the blend) may be put on the level of the
last day, ``level_weight`` > 0 (:func:`~forecasting.realtime_members.recalibrated_level`);
off by default: measured on the frozen split of benchmarks/realtime_split, not adopted.

**Rolling-origin validation** (Tashman 2000; FPP3 §5.10) chooses the family each time the
profile is fitted: every allowed family forecasts the 24 hours after each of the last
``validation_days`` origins (one a day, at the same hour of day as the forecast), from
the history before that origin only; the lowest mean absolute error wins. The scored
hours of a backtest are never seen. Which families are allowed depends on the history:

- under three days: flat (no daily shape is estimated from fewer days);
- under two weeks: flat or daily (the *daily fallback*: one week does not identify a
  weekly shape);
- two to three weeks: flat or weekly. A weekly shape exists, but every validation
  origin can only compare it with the first week, and a first week that is unusual (a
  launch ramp, as on the LoRA trace) then decides for the daily shape on every origin;
- three weeks or more: all three.

**P90** is split-conformal (Vovk et al. 2005; Lei et al. 2018) on the winning family's
validation errors. With T the Box-Cox transform of ``requests + floor`` with power 0
(log: errors proportional to the level), 1/2 (square root: count-like noise) or 1
(additive), the power chosen by the pinball loss at 0.9 on those errors,
``P90 = T^-1(T(P50) + q)``: ``q`` is the larger of the conformal ``quantile`` of
``T(actual) - T(forecast)`` over all validation hours and the conformal
``busy_quantile`` over each validation day's busiest quarter of hours (by actual
requests). The busiest hours are where a shortfall costs, and where errors run larger
than on a quiet night. The shift is then set **per hour of the day**: each hour gets the
conformal ``quantile`` of the errors made within ``HOURLY_WINDOW`` (2) hours of that time
of day, and never less than the busiest quarter's: the headroom an app is planned with
comes from its own errors at that time of day, not from one number.

**Nowcast.** The profile follows the shape of past weeks; a surge is not in it. When the
latest hour seen (or the hour in progress, at the rate seen so far: ``predict(partial=)``)
ran above its P90, the excess over its P50 (on the band's scale) carries into the next
hours, shrunk by ``surge_decay`` (0.8) each hour, and the P90 band sits on the moved P50.
When the surge passes (the latest hour back under its P90) the profile stands as fitted.
The decay was chosen on the bundled series (1-6 hours ahead: the P90's shortfall fell by
10-28% where surges occur, at 1-2% more headroom).

**Surge risk and the reserve.** Each hour seen has a *band position*: where its requests
fell between the P50 (0) and the P90 (1) forecast for it ``SURGE_LOOKBACK_HOURS`` before, on
the band's scale. When the mean position of the latest ``SURGE_LOOKBACK_HOURS`` hours (the
hour in progress, at the rate seen so far, as the latest) is above ``SURGE_RISK_POSITION``
(0.5), traffic has run high in its band for hours: the next ``SURGE_RISK_HOURS`` hours
(counted from the first hour not yet seen) are at surge risk, and the forecast's
``reserve``, what an app's GPUs are planned for, is ``P90 + surge_reserve x (P90 - P50)``
(``surge_reserve`` 0.25) there, and never less than the requests of the highest of those
latest hours: where the profile's shape falls (into the night) while the traffic holds,
the next hours are planned for the traffic just seen (persistence), not for the shape.
Elsewhere it is the P90. The reserve is held only while the risk lasts, so the GPUs it
keeps go back to batch work when traffic falls back in its band.

**The dip hold.** Given ``regrow``, the requests one swap-cap step of the app's GPUs serves
(``predict(regrow=)``; the plan and ``forecast realtime`` give it), the reserve of every
hour ahead is never below the requests of each of the latest ``SURGE_LOOKBACK_HOURS``
hours less ``regrow`` for every hour between them: the hour right after the latest one seen
is planned for at least its traffic, and a one-hour dip does not release the GPUs that the
next hour, back at the level before the dip, needs (it can regrow one swap-cap step, not
more). The reserve falls from the traffic just seen no faster than the swap cap can bring
it back.

**The rise hold.** When the latest hour seen (or in progress) rose above the one before by more
than ``regrow``, faster than the swap cap follows, each of the next ``RAMP_HOURS`` (3) hours
is planned for at least the latest plus the rise once per hour between (``rise_hold``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from enum import Enum
from typing import Literal, Self

import numpy as np
import numpy.typing as npt

from contract.errors import InputError, NotFittedError
from forecasting.persistence import Provenance, make_provenance
from forecasting.quantiles import conformal_quantile, pinball_loss
from forecasting.realtime_members import (
    HOURS_PER_DAY,
    HOURS_PER_WEEK,
    RECALIBRATION_HOURS,
    Flat,
    FloatArray,
    HourArray,
    Lagged,
    Member,
    SameHourMedian,
    Shaped,
    busiest_quarter,
    hour_of_day,
    recalibrated_level,
    rise_hold,
)

#: The calendar constants and array types live with the members; they are read from here.
__all__ = [
    "HOURS_PER_DAY",
    "HOURS_PER_WEEK",
    "KEPT_HOURS",
    "SURGE_RESERVE",
    "SURGE_RISK_HOURS",
    "Band",
    "FloatArray",
    "HourArray",
    "ProfileForecast",
    "ProfileMethod",
    "RealtimeProfile",
    "busiest_quarter",
]

logger = logging.getLogger(__name__)

#: The least history for a daily shape (its shortest window), a weekly one, and a
#: validated choice between the two.
MIN_DAILY_HISTORY_HOURS = 3 * HOURS_PER_DAY
MIN_WEEKLY_HISTORY_HOURS = 2 * HOURS_PER_WEEK
MIN_SHAPE_CHOICE_HOURS = 3 * HOURS_PER_WEEK
#: Level windows of the flat family (hours) and shape windows (cycles) of the others.
FLAT_LEVEL_HOURS = (1, 6, 24)
DAILY_SHAPE_DAYS = (3, 7, 14)
WEEKLY_SHAPE_WEEKS = (1, 2, 3, 4)
#: Box-Cox powers the P90 band may use: log, square root, additive.
BAND_POWERS = (0.0, 0.5, 1.0)
#: An hour of day's P90 shift is calibrated on the errors within this many hours of it
#: (5 hours x 7 validation days = 35 errors, enough for a conformal 0.9 quantile).
HOURLY_WINDOW = 2
#: The history a fitted profile keeps: the longest shape window, and a week to spare.
KEPT_HOURS = (max(WEEKLY_SHAPE_WEEKS) + 1) * HOURS_PER_WEEK
_HOUR = np.timedelta64(1, "h")
#: The nowcast compares the last full hour with the forecast made this many hours before it.
SURGE_LOOKBACK_HOURS = 3
#: The share of a surge's excess (band scale) that carries into each next hour.
SURGE_DECAY = 0.8
#: Surge risk (module docstring): the mean band position of the latest hours above which
#: the next ``SURGE_RISK_HOURS`` hours are planned with the reserve, and its width.
SURGE_RISK_POSITION = 0.5
SURGE_RISK_HOURS = 3
#: 0.5 before: the wider reserve went mostly to idle GPUs that promised batch work waited for,
#: and served about as much where FIFO reaches 98% (docs/closed-loop-log.md, *The reserve's
#: width and the promises*).
SURGE_RESERVE = 0.25
#: The rise hold (module docstring): a rise faster than the swap cap is carried on this many hours.
RAMP_HOURS = 3


class ProfileMethod(Enum):
    FLAT = "flat"
    DAILY = "daily"
    WEEKLY = "weekly"
    #: The median of the same hour of the week over the last four weeks, alone: a
    #: candidate of its own, so that validation can pick it where it is best.
    SAME_HOUR_MEDIAN = "same-hour median"
    #: The mean of the best other family and the same-hour median (``blend_of_`` names it).
    BLEND = "blend"


MethodChoice = Literal["auto", "flat", "daily", "weekly"]


@dataclass(frozen=True, slots=True, eq=False)
class ProfileForecast:
    """Hourly forecast: ``hours[i]`` is expected to see ``p50[i]`` (P90 ``p90[i]``) requests.

    ``method`` names what made it: a :class:`ProfileMethod`, or a baseline's own enum.
    ``reserve`` (the profile's; None: the P90) is what GPUs are planned for: the P90, raised
    in the hours at surge risk.
    """

    hours: HourArray
    p50: FloatArray
    p90: FloatArray
    method: Enum
    reserve: FloatArray | None = None

    @property
    def planned(self) -> FloatArray:
        """The requests to plan GPUs for: the reserve where given, else the P90."""
        return self.p90 if self.reserve is None else self.reserve


@dataclass(frozen=True, slots=True)
class Band:
    """``P90 = T^-1(T(P50) + shift)``, T the Box-Cox transform of ``requests + floor``.

    ``hourly`` (24 values, hour of day 0-23 UTC) replaces ``shift`` where given: the
    headroom of each hour of the day from the errors made at that time of day.
    """

    power: float
    floor: float
    shift: float
    hourly: tuple[float, ...] = ()

    def transform(self, requests: npt.ArrayLike) -> FloatArray:
        shifted = np.maximum(np.asarray(requests, dtype=float), 0.0) + self.floor
        if self.power == 0.0:
            return np.asarray(np.log(shifted), dtype=float)
        return np.asarray((shifted**self.power - 1.0) / self.power, dtype=float)

    def inverse(self, transformed: FloatArray) -> FloatArray:
        if self.power == 0.0:
            return np.asarray(np.exp(transformed) - self.floor, dtype=float)
        base = np.maximum(transformed * self.power + 1.0, 0.0)
        return np.asarray(base ** (1.0 / self.power) - self.floor, dtype=float)

    def shifts(self, hours: HourArray | None) -> FloatArray | float:
        """The shift of each hour (the one ``shift`` without hours or per-hour values)."""
        if hours is None or not self.hourly:
            return self.shift
        return np.asarray(self.hourly, dtype=float)[hour_of_day(hours)]

    def upper(self, p50: FloatArray, hours: HourArray | None = None) -> FloatArray:
        return np.maximum(self.inverse(self.transform(p50) + self.shifts(hours)), p50)

    def position(self, actual: FloatArray, p50: FloatArray, hours: HourArray) -> FloatArray:
        """Where ``actual`` fell in the band: 0 at the P50, 1 at the P90 (on the band's scale)."""
        low = self.transform(p50)
        width = np.maximum(self.transform(self.upper(p50, hours)) - low, 1e-9)
        return np.asarray((self.transform(actual) - low) / width, dtype=float)


@dataclass(frozen=True, slots=True, eq=False)
class ValidationDay:
    """One validation origin: what a family forecast for the next 24 hours, and what came."""

    forecast: FloatArray
    actual: FloatArray


#: Pure seasonal settings of the weekly family (weeks): the seasonal naive forecast and
#: the median of the same hour over four weeks, two baselines it must beat. Joining
#: them, it is never far from either where they are good (spiky LoRA-like traffic),
#: and the shaped settings carry it where they are not.
LAGGED_WEEKS = (1, 4)
#: How much lower (a share) the same-hour median's validation error must be to be chosen.
MEDIAN_MARGIN = 0.2
#: The weeks of the same-hour median family (the baseline the profile must not lose to).
SAME_HOUR_MEDIAN_WEEKS = 4
#: The families with no level of their own, which :func:`recalibrated_level` puts on the
#: last day's level (a shaped setting has its own level-shift rule).
LEVEL_LESS = (ProfileMethod.SAME_HOUR_MEDIAN, ProfileMethod.BLEND)
#: The shrinkage weight of that level; 0: off. 0.4 (chosen on the tuning split of
#: benchmarks/realtime_split, with ``BUSY_QUANTILE`` 0.91) raised three held-out series'
#: MASE: measured, not adopted (docs/benchmarks.md).
LEVEL_WEIGHT = 0.0
#: The quantile the P90 must reach on each validation day's busiest quarter of hours.
BUSY_QUANTILE = 0.85


class RealtimeProfile:
    """Hourly demand forecaster for one real-time app (scikit-learn estimator contract).

    Parameters
    ----------
    method:
        ``"auto"`` chooses the family by rolling-origin validation among those the
        history allows (see the module docstring); ``"flat"``, ``"daily"`` or
        ``"weekly"`` force one where the history allows it (else the richest allowed).
    validation_days:
        Origins of the rolling-origin validation, one a day before the forecast origin;
        the same days calibrate the P90.
    quantile:
        The upper quantile reported as ``p90`` over all hours.
    busy_quantile:
        The quantile the P90 must reach on each day's busiest quarter of hours.
    band_floor_fraction:
        The band's floor, as a fraction of the last week's mean requests: it keeps a
        near-zero forecast from turning a handful of requests into a huge ratio.
    level_shift_sigmas:
        How far (robust standard deviations) the recent residuals' median must be from
        zero for the level to be re-estimated from the recent hours; ``inf`` never does.
    recent_level_hours:
        The hours a moved level is re-estimated from.
    surge_decay:
        The nowcast's persistence: the share of a surge's excess over the P50 that
        carries into each next hour (0 turns the nowcast off).
    level_weight:
        The shrinkage weight of the level-less families' recalibration to the last day
        (:func:`recalibrated_level`; 0 turns it off).
    surge_reserve:
        The reserve's width in the hours at surge risk, in widths of the band above the
        P90, and never below the highest of the latest hours (0 turns the reserve off:
        GPUs are planned for the P90 everywhere).
    """

    def __init__(
        self,
        *,
        method: MethodChoice = "auto",
        validation_days: int = 7,
        quantile: float = 0.9,
        busy_quantile: float = BUSY_QUANTILE,
        band_floor_fraction: float = 0.1,
        level_shift_sigmas: float = 0.5,
        recent_level_hours: int = 24,
        surge_decay: float = SURGE_DECAY,
        surge_reserve: float = SURGE_RESERVE,
        level_weight: float = LEVEL_WEIGHT,
    ) -> None:
        self.method = method
        self.validation_days = validation_days
        self.quantile = quantile
        self.busy_quantile = busy_quantile
        self.band_floor_fraction = band_floor_fraction
        self.level_shift_sigmas = level_shift_sigmas
        self.recent_level_hours = recent_level_hours
        self.surge_decay = surge_decay
        self.surge_reserve = surge_reserve
        self.level_weight = level_weight

    def get_params(self, deep: bool = True) -> dict[str, object]:
        """The constructor's parameters (scikit-learn's contract)."""
        return {
            "method": self.method,
            "validation_days": self.validation_days,
            "quantile": self.quantile,
            "busy_quantile": self.busy_quantile,
            "band_floor_fraction": self.band_floor_fraction,
            "level_shift_sigmas": self.level_shift_sigmas,
            "recent_level_hours": self.recent_level_hours,
            "surge_decay": self.surge_decay,
            "surge_reserve": self.surge_reserve,
            "level_weight": self.level_weight,
        }

    # ---------------------------------------------------------- as data
    def to_state(self) -> tuple[dict[str, object], dict[str, str]]:
        """The fitted numbers as JSON-ready values (no boosters): what
        :func:`forecasting.persistence.model_bytes` stores."""
        self._check_fitted()
        state: dict[str, object] = {
            "method": self.method_.value,
            "blend_of": None if self.blend_of_ is None else self.blend_of_.value,
            "validation_mae": {m.value: float(v) for m, v in self.validation_mae_.items()},
            "band": {
                "power": self.band_.power,
                "floor": self.band_.floor,
                "shift": self.band_.shift,
                "hourly": [float(v) for v in self.band_.hourly],
            },
            "z": [float(v) for v in self.z_],
            "next_hour": str(self.next_hour_.astype("datetime64[h]")),
        }
        return state, {}

    @classmethod
    def from_state(
        cls, params: dict[str, object], state: dict[str, object], boosters: dict[str, str]
    ) -> Self:
        """The profile :meth:`to_state` described."""
        profile = cls(**params)  # type: ignore[arg-type]  # the names get_params gave
        band = state["band"]
        mae = state["validation_mae"]
        assert isinstance(band, dict) and isinstance(mae, dict) and isinstance(state["z"], list)
        profile.method_ = ProfileMethod(state["method"])
        blend_of = state.get("blend_of")  # a profile stored before the blend has none
        profile.blend_of_ = None if blend_of is None else ProfileMethod(blend_of)
        profile.validation_mae_ = {ProfileMethod(k): float(v) for k, v in mae.items()}
        hourly = tuple(float(v) for v in band.get("hourly", ()))  # a profile without per-hour headroom
        profile.band_ = Band(float(band["power"]), float(band["floor"]), float(band["shift"]), hourly)
        profile.z_ = np.asarray(state["z"], dtype=float)
        profile.next_hour_ = np.datetime64(str(state["next_hour"]), "h")
        return profile

    # ------------------------------------------------------------------ fit
    def fit(self, hours: HourArray, requests: FloatArray) -> RealtimeProfile:
        """Choose the family by rolling-origin validation, calibrate the P90, keep the
        recent history; nothing after ``hours[-1]`` is seen."""
        hours, requests = self._validate(hours, requests)
        z = np.log1p(requests)
        allowed = self._allowed(z.size)
        days = {method: self._validation_days(z, method) for method in allowed}
        self.blend_of_ = _best_family(_compare(days))
        if self.blend_of_ is not None:
            days[ProfileMethod.BLEND] = _blend_days(
                days[self.blend_of_], days[ProfileMethod.SAME_HOUR_MEDIAN]
            )
        self.validation_mae_ = _compare(days)
        method = _choose(self.validation_mae_, default=allowed[0])
        self.method_ = method
        self.band_ = self._calibrate(days.get(method, []), z, int(hour_of_day(hours[-1:] + _HOUR)[0]))
        self.z_ = z[-KEPT_HOURS:]
        self.next_hour_ = hours[-1] + _HOUR
        self.provenance_: Provenance = make_provenance(
            f"RealtimeProfile({method.value})",
            rows=int(requests.size),
            data_bytes=hours.astype(np.int64).tobytes() + requests.tobytes(),
            window_start=hours[0],
            window_end=hours[-1],
        )
        logger.info(
            "fitted %s profile on %d hours (%s .. %s); validation MAE %s",
            method.value,
            requests.size,
            hours[0],
            hours[-1],
            {m.value: round(v, 3) for m, v in self.validation_mae_.items()},
        )
        return self

    def _validate(self, hours: object, requests: object) -> tuple[HourArray, FloatArray]:
        if self.method not in ("auto", "flat", "daily", "weekly"):
            raise InputError("method", "one of auto, flat, daily, weekly", self.method)
        if not 0.5 <= self.quantile < 1:
            raise InputError("quantile", "in [0.5, 1)", self.quantile)
        if not 0.5 <= self.busy_quantile < 1:
            raise InputError("busy_quantile", "in [0.5, 1)", self.busy_quantile)
        if not self.band_floor_fraction > 0:
            raise InputError("band_floor_fraction", "a number > 0", self.band_floor_fraction)
        if not self.level_shift_sigmas >= 0:
            raise InputError("level_shift_sigmas", "a number >= 0 (inf: never)", self.level_shift_sigmas)
        if not 1 <= self.recent_level_hours <= HOURS_PER_DAY * DAILY_SHAPE_DAYS[0]:
            raise InputError("recent_level_hours", "an integer in [1, 72]", self.recent_level_hours)
        if not 0 <= self.surge_decay < 1:
            raise InputError("surge_decay", "a number in [0, 1) (0: no nowcast)", self.surge_decay)
        if not 0 <= self.surge_reserve <= 10:
            raise InputError("surge_reserve", "a number in [0, 10] (0: no reserve)", self.surge_reserve)
        if not 0 <= self.level_weight <= 1:
            raise InputError("level_weight", "a number in [0, 1] (0: no recalibration)", self.level_weight)
        if not 1 <= self.validation_days <= 28:
            raise InputError("validation_days", "an integer in [1, 28]", self.validation_days)
        hours_array = np.asarray(hours).astype("datetime64[h]")
        values = np.asarray(requests, dtype=float)
        if hours_array.ndim != 1 or hours_array.shape != values.shape or values.size == 0:
            raise InputError("hours, requests", "two 1-D arrays of the same non-zero length", values.shape)
        if not np.all(np.diff(hours_array) == _HOUR):
            raise InputError(
                "hours",
                "consecutive hours without gaps",
                "a gap or an unsorted hour",
                hint="Load the series with features.traffic.load_traffic, which repairs gaps.",
            )
        if not np.all(np.isfinite(values)) or values.min() < 0:
            raise InputError("requests", "finite, non-negative counts", float(values.min()))
        return hours_array, values

    def _allowed(self, n_hours: int) -> list[ProfileMethod]:
        """The families the history supports (module docstring), forced or not."""
        if n_hours < MIN_DAILY_HISTORY_HOURS:
            allowed = [ProfileMethod.FLAT]
        elif n_hours < MIN_WEEKLY_HISTORY_HOURS:
            allowed = [ProfileMethod.FLAT, ProfileMethod.DAILY]
        elif n_hours < MIN_SHAPE_CHOICE_HOURS:
            allowed = [ProfileMethod.FLAT, ProfileMethod.WEEKLY]
        else:
            allowed = [ProfileMethod.FLAT, ProfileMethod.DAILY, ProfileMethod.WEEKLY]
        if self.method == "auto":
            if n_hours >= MIN_WEEKLY_HISTORY_HOURS:
                allowed.append(ProfileMethod.SAME_HOUR_MEDIAN)
            return allowed
        forced = ProfileMethod(self.method)
        supported = forced is ProfileMethod.FLAT or (
            n_hours
            >= (MIN_WEEKLY_HISTORY_HOURS if forced is ProfileMethod.WEEKLY else MIN_DAILY_HISTORY_HOURS)
        )
        return [forced] if supported else [allowed[-1]]

    def _members(self, method: ProfileMethod) -> list[Member]:
        if method is ProfileMethod.SAME_HOUR_MEDIAN:
            return [SameHourMedian(SAME_HOUR_MEDIAN_WEEKS)]
        if method is ProfileMethod.FLAT:
            return [Flat(level) for level in FLAT_LEVEL_HOURS]
        period, cycles = (
            (HOURS_PER_DAY, DAILY_SHAPE_DAYS)
            if method is ProfileMethod.DAILY
            else (HOURS_PER_WEEK, WEEKLY_SHAPE_WEEKS)
        )
        shaped: list[Member] = [
            Shaped(period, count, self.level_shift_sigmas, self.recent_level_hours) for count in cycles
        ]
        if method is ProfileMethod.WEEKLY:
            shaped += [Lagged(HOURS_PER_WEEK, weeks) for weeks in LAGGED_WEEKS]
        return shaped

    def _forecast_requests(self, z: FloatArray, method: ProfileMethod, horizon: int) -> FloatArray | None:
        """The family's forecast in requests, a level-less one (the same-hour median, the
        blend) on the level of the last day (:func:`recalibrated_level`)."""
        forecast = self._family_forecast(z, method, horizon)
        if method not in LEVEL_LESS or forecast is None or not self.level_weight > 0:
            return forecast
        if z.size < HOURS_PER_WEEK + RECALIBRATION_HOURS:
            return forecast
        before = self._family_forecast(z[:-RECALIBRATION_HOURS], method, RECALIBRATION_HOURS)
        if before is None:
            return forecast
        floor = self.band_floor_fraction * float(np.mean(np.expm1(z[-HOURS_PER_WEEK:])))
        latest = np.expm1(z[-RECALIBRATION_HOURS:])
        return recalibrated_level(forecast, before, latest, floor, self.level_weight)

    def _family_forecast(self, z: FloatArray, method: ProfileMethod, horizon: int) -> FloatArray | None:
        """The family's own forecast in requests: the median of its settings' forecasts (the
        blend: the mean of its two families' forecasts)."""
        if method is ProfileMethod.BLEND:
            assert self.blend_of_ is not None  # set by fit whenever BLEND can win
            parts = [
                self._family_forecast(z, m, horizon) for m in (self.blend_of_, ProfileMethod.SAME_HOUR_MEDIAN)
            ]
            present = [part for part in parts if part is not None]
            return np.mean(present, axis=0) if present else None
        forecasts = [f for member in self._members(method) if (f := member(z, horizon)) is not None]
        if not forecasts:
            return None
        median: FloatArray = np.maximum(np.median(np.expm1(np.array(forecasts)), axis=0), 0.0)
        return median

    def _validation_days(self, z: FloatArray, method: ProfileMethod) -> list[ValidationDay]:
        """Day-ahead forecasts from the origins 1..``validation_days`` days back, newest
        first, each from the history before its origin only."""
        days = []
        for back in range(1, self.validation_days + 1):
            origin = z.size - HOURS_PER_DAY * back
            forecast = self._forecast_requests(z[:origin], method, HOURS_PER_DAY) if origin >= 1 else None
            if forecast is None:
                break
            days.append(ValidationDay(forecast, np.expm1(z[origin : origin + HOURS_PER_DAY])))
        return days

    def _calibrate(self, days: list[ValidationDay], z: FloatArray, first_hour: int) -> Band:
        """The P90 band from the chosen family's validation days (module docstring).

        ``first_hour`` is the hour of day of each validation day's first hour. Each hour of
        the day gets its own shift, from the errors within ``HOURLY_WINDOW`` hours of it.
        """
        floor = max(self.band_floor_fraction * float(np.mean(np.expm1(z[-HOURS_PER_WEEK:]))), 1e-6)
        if not days:
            # No day to validate on (under two days of history): the history's own spread
            # around its median, on the log scale.
            spread = z - np.median(z)
            return Band(0.0, 1.0, conformal_quantile(spread, self.quantile))
        forecast = np.array([day.forecast for day in days])
        actual = np.array([day.actual for day in days])
        busy = busiest_quarter(actual)
        column_hour = (first_hour + np.arange(HOURS_PER_DAY)) % HOURS_PER_DAY
        distance = np.abs(column_hour[None, :] - np.arange(HOURS_PER_DAY)[:, None])
        near = np.minimum(distance, HOURS_PER_DAY - distance) <= HOURLY_WINDOW  # (hour of day, column)
        hours = np.broadcast_to(column_hour, actual.shape).ravel()
        best: tuple[float, Band] | None = None
        for power in BAND_POWERS:
            unit = Band(power, floor, 0.0)
            scores = unit.transform(actual) - unit.transform(forecast)
            busy_shift = conformal_quantile(scores[busy], self.busy_quantile)
            shift = max(conformal_quantile(scores.ravel(), self.quantile), busy_shift)
            hourly = tuple(
                max(conformal_quantile(scores[:, near[h]].ravel(), self.quantile), busy_shift)
                for h in range(HOURS_PER_DAY)
            )
            band = Band(power, floor, shift, hourly)
            upper = band.inverse(unit.transform(forecast.ravel()) + np.asarray(hourly)[hours])
            loss = pinball_loss(actual.ravel(), np.maximum(upper, forecast.ravel()), self.quantile)
            if best is None or loss < best[0]:
                best = (loss, band)
        assert best is not None  # BAND_POWERS is not empty
        return best[1]

    # --------------------------------------------------------------- update
    def update(self, hour: object, requests: float) -> RealtimeProfile:
        """Add one newly observed hour (no refit: the family and band stay as fitted).

        ``hour`` must be the hour after the last one seen; a later hour is accepted and
        the missing hours in between are filled with the profile's own P50 (logged), an
        earlier one is refused.
        """
        observed = self._unseen_hour(hour, "hour", "the profile has already seen earlier hours")
        if not math.isfinite(requests) or requests < 0:
            raise InputError("requests", "a finite, non-negative count", requests)
        missing = int((observed - self.next_hour_) // _HOUR)
        if missing > 0:
            logger.warning("update fills %d missing hours before %s with the P50", missing, observed)
            filler = self._forecast_requests(self.z_, self.method_, missing)
            self.z_ = np.concatenate([self.z_, np.log1p(filler if filler is not None else np.zeros(missing))])
        self.z_ = np.append(self.z_, math.log1p(requests))[-KEPT_HOURS:]
        self.next_hour_ = observed + _HOUR
        return self

    def _unseen_hour(self, value: object, field: str, why: str) -> np.datetime64:
        """``value`` as an hour, checked fitted and not before the first hour not yet seen."""
        self._check_fitted()
        hour: np.datetime64 = np.datetime64(value, "m").astype("datetime64[h]")  # type: ignore[call-overload]
        if hour < self.next_hour_:
            raise InputError(field, f"{self.next_hour_} or later ({why})", str(hour))
        return hour

    # -------------------------------------------------------------- predict
    def predict(
        self,
        start_hour: object,
        horizon_hours: int = HOURS_PER_DAY,
        *,
        partial: float | None = None,
        regrow: float | None = None,
    ) -> ProfileForecast:
        """P50 and P90 requests for ``horizon_hours`` hours from ``start_hour``.

        ``partial`` is the hour in progress (the first one not yet seen) at the rate seen
        so far: the nowcast reads it as the latest hour. ``start_hour`` must then be after it.
        ``regrow`` is the requests one swap-cap step of the app's GPUs serves: the reserve of
        every hour ahead is then never below each of the latest hours' requests less it for
        every hour between (the dip hold, module docstring).
        """
        start = self._unseen_hour(start_hour, "start_hour", "the first hour not yet observed")
        if horizon_hours < 1:
            raise InputError("horizon_hours", "an integer >= 1", horizon_hours)
        if partial is not None and not (math.isfinite(partial) and partial >= 0):
            raise InputError("partial", "a finite, non-negative count", partial)
        if regrow is not None and not (math.isfinite(regrow) and regrow >= 0):
            raise InputError("regrow", "a finite, non-negative count", regrow)
        lead = int((start - self.next_hour_) // _HOUR)
        if partial is not None and lead < 1:
            raise InputError("start_hour", f"after {self.next_hour_}, the hour in progress", str(start))
        forecast = self._forecast_requests(self.z_, self.method_, lead + horizon_hours)
        if forecast is None:  # pragma: no cover - fit only chooses families it can forecast
            raise NotFittedError(f"The {self.method_.value} profile has too little history to forecast.")
        ahead = self.next_hour_ + np.arange(lead + horizon_hours).astype("timedelta64[h]")
        # What the profile forecast for the latest hours seen, from before them.
        before = (
            self._forecast_requests(self.z_[:-SURGE_LOOKBACK_HOURS], self.method_, SURGE_LOOKBACK_HOURS)
            if self.z_.size > SURGE_LOOKBACK_HOURS
            else None
        )
        reach = self._surge_reach(before, forecast, partial)
        forecast = self._nowcast(forecast, ahead, partial, before)
        p50 = forecast[lead:]
        hours = ahead[lead:]
        p90 = self.band_.upper(p50, hours)
        reserve = p90
        steps = np.arange(lead, lead + horizon_hours)
        if reach is not None:
            widened = p90 + self.surge_reserve * (p90 - p50)
            reserve = np.where(steps < SURGE_RISK_HOURS, np.maximum(widened, reach), p90)
        if regrow is not None:
            reserve = np.maximum(reserve, self._regrowable(partial, hours, regrow))
            reserve = np.maximum(reserve, rise_hold(*self._latest(partial), hours, regrow, RAMP_HOURS))
        return ProfileForecast(hours, p50, p90, self.method_, reserve)

    def _regrowable(self, partial: float | None, hours: HourArray, regrow: float) -> FloatArray:
        """The dip hold (module docstring): per hour ahead, the most requests of the latest
        hours less ``regrow`` for every hour between (the hour right after one seen: all of
        its requests), so that the reserve falls from the traffic just seen no faster than
        one swap-cap step an hour."""
        actual, seen = self._latest(partial)
        between = (hours[:, None] - seen[None, :]) // _HOUR - 1
        floor: FloatArray = np.max(actual[None, :] - regrow * between, axis=1)
        return floor

    def _latest(self, partial: float | None) -> tuple[FloatArray, HourArray]:
        """The latest ``SURGE_LOOKBACK_HOURS`` hours' requests and hours: the full hours seen,
        the hour in progress (``partial``) replacing the oldest."""
        actual = np.expm1(self.z_[-SURGE_LOOKBACK_HOURS:])
        seen = self.next_hour_ - np.arange(actual.size, 0, -1).astype("timedelta64[h]")
        if partial is not None:
            actual = np.append(actual[1:], partial)
            seen = np.append(seen[1:], self.next_hour_)
        return actual, seen

    def _surge_reach(
        self, before: FloatArray | None, forecast: FloatArray, partial: float | None
    ) -> float | None:
        """When the latest hours ran high in their band (module docstring), the requests of
        the highest of them; None: no surge risk.

        The latest hours are the last ``SURGE_LOOKBACK_HOURS`` full hours against ``before``
        (the forecast made for them from the hours before), the hour in progress
        (``partial``, against the fitted ``forecast[0]``) replacing the oldest. They are at
        risk when their mean band position is above ``SURGE_RISK_POSITION``.
        """
        if not self.surge_reserve > 0 or before is None:
            return None
        actual, seen = self._latest(partial)
        expected = before if partial is None else np.append(before[1:], forecast[0])
        if not float(np.mean(self.band_.position(actual, expected, seen))) > SURGE_RISK_POSITION:
            return None
        return float(np.max(actual))

    def _nowcast(
        self, forecast: FloatArray, ahead: HourArray, partial: float | None, before: FloatArray | None
    ) -> FloatArray:
        """The P50 moved toward a surge in progress, decaying back (module docstring).

        The latest hour seen (``partial``, else the last full hour) is compared with what
        the profile forecast for it (``before``: from ``SURGE_LOOKBACK_HOURS`` before). Above
        its P90, the excess over its P50 on the band's scale carries into the next hours,
        shrunk by ``surge_decay`` an hour.
        """
        if not self.surge_decay > 0 or self.z_.size <= SURGE_LOOKBACK_HOURS:
            return forecast
        if partial is not None:
            actual, expected, hour, age = partial, float(forecast[0]), ahead[:1], 0
        else:
            if before is None:
                return forecast
            actual, expected, hour, age = (
                float(np.expm1(self.z_[-1])),
                float(before[-1]),
                ahead[:1] - _HOUR,
                -1,
            )
        band = self.band_
        if actual <= float(band.upper(np.array([expected]), hour)[0]):
            return forecast
        excess = float(band.transform([actual])[0] - band.transform([expected])[0])
        steps = np.arange(forecast.size) - age
        moved = band.inverse(band.transform(forecast) + excess * self.surge_decay**steps)
        result: FloatArray = np.maximum(forecast, moved)
        return result

    def _check_fitted(self) -> None:
        if not hasattr(self, "band_"):
            raise NotFittedError("This RealtimeProfile is not fitted yet; call fit(hours, requests) first.")


def _best_family(mae: dict[ProfileMethod, float]) -> ProfileMethod | None:
    """The blend's partner: the family (flat, daily, weekly) with the lowest validation
    error, when the same-hour median is validated too (None: no blend)."""
    families = {m: v for m, v in mae.items() if m is not ProfileMethod.SAME_HOUR_MEDIAN}
    if ProfileMethod.SAME_HOUR_MEDIAN not in mae or not families:
        return None
    return min(families, key=families.__getitem__)


def _blend_days(family: list[ValidationDay], median: list[ValidationDay]) -> list[ValidationDay]:
    """The blend's validation days: the mean of the two families' forecasts on their common days."""
    return [
        ValidationDay((f.forecast + m.forecast) / 2, f.actual) for f, m in zip(family, median, strict=False)
    ]


def _choose(mae: dict[ProfileMethod, float], *, default: ProfileMethod) -> ProfileMethod:
    """The family with the lowest validation error; the same-hour median, a fallback with
    no level or shape of its own, only when it beats the best other by ``MEDIAN_MARGIN``."""
    others = {m: v for m, v in mae.items() if m is not ProfileMethod.SAME_HOUR_MEDIAN}
    best = min(others, key=others.__getitem__, default=None)
    median = mae.get(ProfileMethod.SAME_HOUR_MEDIAN)
    if median is not None and (best is None or median < (1 - MEDIAN_MARGIN) * others[best]):
        return ProfileMethod.SAME_HOUR_MEDIAN
    return default if best is None else best


def _compare(days: dict[ProfileMethod, list[ValidationDay]]) -> dict[ProfileMethod, float]:
    """Mean absolute error of each family over the validation days all of them have.

    A family validated on fewer days than the others would be compared on other days;
    one with none at all is left out (and chosen only when no family has any).
    """
    counts = [len(d) for d in days.values() if d]
    if not counts:
        return {}
    common = min(counts)
    return {
        method: float(np.mean([np.mean(np.abs(day.forecast - day.actual)) for day in d[:common]]))
        for method, d in days.items()
        if d
    }
