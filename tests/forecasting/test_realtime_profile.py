"""RealtimeProfile on the real traces and on made-up ones: contract, the families the
history allows, rolling-origin choice, level shifts, the P90 band, update."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from contract.errors import InputError, NotFittedError
from features.traffic import load_traffic
from forecasting.persistence import load_model, save_model
from forecasting.realtime import (
    HOURS_PER_DAY,
    HOURS_PER_WEEK,
    SURGE_RESERVE,
    SURGE_RISK_HOURS,
    Band,
    ProfileMethod,
    RealtimeProfile,
    busiest_quarter,
)
from forecasting.realtime_members import recalibrated_level

TRAFFIC = Path(__file__).resolve().parents[2] / "training_data" / "traffic"
START = np.datetime64("2024-01-01T00", "h")


@pytest.fixture(scope="module")
def philly() -> tuple[np.ndarray, np.ndarray]:
    traffic = load_traffic(TRAFFIC / "philly_active_nodes_hourly.csv")
    return traffic.hours, traffic.requests


@pytest.fixture(scope="module")
def lora() -> tuple[np.ndarray, np.ndarray]:
    traffic = load_traffic(TRAFFIC / "alibaba_genai_lora_hourly.csv")
    return traffic.hours, traffic.requests


def _hours(n: int) -> np.ndarray:
    return START + np.arange(n).astype("timedelta64[h]")


def _daily_cycle(n: int, level: float = 100.0) -> np.ndarray:
    hour_of_day = np.arange(n) % HOURS_PER_DAY
    return level * (1.0 + 0.5 * np.sin(2 * np.pi * hour_of_day / HOURS_PER_DAY))


def test_init_only_stores_parameters_and_predict_needs_fit() -> None:
    profile = RealtimeProfile(validation_days=5)
    assert vars(profile)["validation_days"] == 5
    assert not [name for name in vars(profile) if name.endswith("_")]
    message = "This RealtimeProfile is not fitted yet; call fit(hours, requests) first."
    with pytest.raises(NotFittedError, match=re.escape(message)):
        profile.predict("2024-01-01 00:00")
    assert issubclass(NotFittedError, ValueError)
    assert issubclass(NotFittedError, AttributeError)


def test_the_history_decides_which_families_compete(lora: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = lora
    assert RealtimeProfile().fit(hours[:60], requests[:60]).method_ is ProfileMethod.FLAT
    # Under two weeks: the daily fallback competes with the flat level, never weekly.
    short = RealtimeProfile().fit(hours[:300], requests[:300])
    assert set(short.validation_mae_) == {ProfileMethod.FLAT, ProfileMethod.DAILY}
    # Two to three weeks: flat, weekly, the same-hour median or the blend; from three weeks, all five.
    middle = RealtimeProfile().fit(hours[:400], requests[:400])
    assert set(middle.validation_mae_) == {
        ProfileMethod.FLAT,
        ProfileMethod.WEEKLY,
        ProfileMethod.SAME_HOUR_MEDIAN,
        ProfileMethod.BLEND,
    }
    full = RealtimeProfile().fit(hours, requests)
    assert set(full.validation_mae_) == set(ProfileMethod)


def test_rolling_origin_validation_picks_the_lowest_error(
    philly: tuple[np.ndarray, np.ndarray], lora: tuple[np.ndarray, np.ndarray]
) -> None:
    for hours, requests in (philly, lora):
        profile = RealtimeProfile().fit(hours, requests)
        best = min(profile.validation_mae_, key=profile.validation_mae_.__getitem__)
        assert profile.method_ is best
    # LoRA's weekdays and weekends differ; a clean daily cycle needs no weekly shape.
    assert RealtimeProfile().fit(*lora).method_ is ProfileMethod.WEEKLY
    cycle = _daily_cycle(4 * HOURS_PER_WEEK)
    assert RealtimeProfile().fit(_hours(cycle.size), cycle).method_ is not ProfileMethod.FLAT


def test_validation_uses_only_the_history_it_is_given(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    profile = RealtimeProfile().fit(hours[:900], requests[:900])
    changed_future = requests.copy()
    changed_future[900:] *= 3
    again = RealtimeProfile().fit(hours[:900], changed_future[:900])
    assert again.validation_mae_ == profile.validation_mae_
    np.testing.assert_array_equal(again.predict(hours[900]).p90, profile.predict(hours[900]).p90)


def test_forecast_quantiles_are_ordered_and_nonnegative(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    for method in ("flat", "daily", "weekly"):
        forecast = RealtimeProfile(method=method).fit(hours[:900], requests[:900]).predict(hours[900], 48)
        assert forecast.hours[0] == hours[900]
        assert forecast.p50.shape == forecast.p90.shape == (48,)
        assert np.all(forecast.p90 >= forecast.p50)
        assert np.all(forecast.p50 >= 0)
        assert forecast.method is ProfileMethod(method)


def test_a_later_start_forecasts_further_ahead(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    profile = RealtimeProfile().fit(hours[:900], requests[:900])
    whole = profile.predict(hours[900], 48)
    later = profile.predict(hours[912], 24)
    np.testing.assert_allclose(later.p50, whole.p50[12:36])


def test_level_is_re_estimated_after_a_shift() -> None:
    # Three weeks of a daily cycle, then the level doubles 30 hours before the origin.
    requests = _daily_cycle(3 * HOURS_PER_WEEK)
    requests[-30:] *= 2.0
    hours = _hours(requests.size)
    following = RealtimeProfile(method="daily").fit(hours, requests)
    fixed = RealtimeProfile(method="daily", level_shift_sigmas=float("inf")).fit(hours, requests)
    expected = 2.0 * _daily_cycle(requests.size + HOURS_PER_DAY)[-HOURS_PER_DAY:]
    error_following = np.mean(np.abs(following.predict(following.next_hour_).p50 - expected))
    error_fixed = np.mean(np.abs(fixed.predict(fixed.next_hour_).p50 - expected))
    assert error_following < 0.25 * error_fixed
    assert error_following < 0.1 * expected.mean()


def test_band_covers_the_busiest_hours_at_least_as_asked() -> None:
    rng = np.random.default_rng(3)
    requests = _daily_cycle(4 * HOURS_PER_WEEK) * rng.lognormal(0.0, 0.2, 4 * HOURS_PER_WEEK)
    hours = _hours(requests.size)
    profile = RealtimeProfile(busy_quantile=0.95).fit(hours, requests)
    relaxed = RealtimeProfile(busy_quantile=0.5).fit(hours, requests)
    # The band's power may differ between the two: compare the P90s of the busy hours.
    strict_p90, relaxed_p90 = profile.predict(hours[-1] + 1).p90, relaxed.predict(hours[-1] + 1).p90
    busy = busiest_quarter(strict_p90[None, :])[0]
    assert strict_p90[busy].mean() >= relaxed_p90[busy].mean()
    assert profile.band_.power in (0.0, 0.5, 1.0)


def test_band_transform_round_trips_and_never_goes_below_p50() -> None:
    p50 = np.array([0.0, 1.0, 10.0, 1000.0])
    for power in (0.0, 0.5, 1.0):
        band = Band(power, floor=2.0, shift=0.3)
        np.testing.assert_allclose(band.inverse(band.transform(p50)), p50, atol=1e-9)
        assert np.all(band.upper(p50) > p50)
    assert np.all(Band(1.0, 2.0, -5.0).upper(p50) == p50)


def test_busiest_quarter_marks_six_hours_a_day() -> None:
    days = np.arange(48, dtype=float).reshape(2, 24)
    busy = busiest_quarter(days)
    assert busy.sum(axis=1).tolist() == [6, 6]
    assert busy[0, 18:].all()


def test_update_adds_the_hour_without_refit(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    profile = RealtimeProfile(method="daily").fit(hours[:900], requests[:900])
    fitted_at, band = profile.provenance_.fitted_at, profile.band_
    profile.update(hours[900], float(requests[900]))
    assert profile.provenance_.fitted_at == fitted_at
    assert profile.band_ == band
    # The same family on the longer history gives the same P50.
    refitted = RealtimeProfile(method="daily").fit(hours[:901], requests[:901])
    np.testing.assert_allclose(profile.predict(hours[901]).p50, refitted.predict(hours[901]).p50)
    message = "`hour` must be 2017-11-09T13 or later"
    with pytest.raises(ValueError, match=re.escape(message)):
        profile.update(hours[899], 1.0)
    with pytest.raises(ValueError, match=re.escape("`start_hour` must be 2017-11-09T13 or later")):
        profile.predict(hours[900])


def test_a_spike_barely_moves_the_next_day_without_the_nowcast(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    normal = RealtimeProfile(method="weekly", surge_decay=0.0).fit(hours[:900], requests[:900])
    spiked = RealtimeProfile(method="weekly", surge_decay=0.0).fit(hours[:900], requests[:900])
    normal.update(hours[900], float(requests[900]))
    spiked.update(hours[900], 100 * float(requests[900]))
    ratio = spiked.predict(hours[901]).p50 / normal.predict(hours[901]).p50
    assert np.all(np.abs(ratio - 1.0) < 0.05)  # medians, not means


def test_the_nowcast_follows_a_surge_and_decays_back(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    normal = RealtimeProfile(method="weekly").fit(hours[:900], requests[:900])
    surged = RealtimeProfile(method="weekly").fit(hours[:900], requests[:900])
    normal.update(hours[900], float(requests[900]))
    surged.update(hours[900], 3 * float(requests[900]))
    base, moved = normal.predict(hours[901], 48), surged.predict(hours[901], 48)
    ratio = moved.p50 / base.p50
    # Toward the surge at once, then back: every hour less moved than the one before.
    assert ratio[0] > 1.5
    assert np.all(np.diff(ratio) <= 1e-3)
    assert abs(ratio[-1] - 1.0) < 0.01
    assert np.all(moved.p90 >= moved.p50)
    assert np.all(moved.p90 >= base.p90 - 1e-9)
    # A half hour running at three times the profile's rate moves the next hours too.
    partial = normal.predict(hours[902], 24, partial=3 * float(base.p50[0]))
    assert partial.p50[0] > 1.5 * base.p50[1]
    # Below the P90, the profile stands as fitted.
    quiet = normal.predict(hours[902], 24, partial=float(base.p50[0]))
    np.testing.assert_allclose(quiet.p50, base.p50[1:25])
    with pytest.raises(InputError, match=re.escape("`start_hour` must be after")):
        normal.predict(hours[901], 24, partial=1.0)


def _updated(profile: RealtimeProfile, hours: np.ndarray, band: str) -> RealtimeProfile:
    """``profile`` fed the next hours at its own P50 or P90 for them (forecast from before them)."""
    forecast = profile.predict(hours[0], len(hours))
    for hour, value in zip(hours, getattr(forecast, band), strict=True):
        profile.update(hour, float(value))
    return profile


def test_the_reserve_is_held_only_after_hours_high_in_their_band(
    philly: tuple[np.ndarray, np.ndarray],
) -> None:
    hours, requests = philly
    unfitted = RealtimeProfile(method="weekly", surge_decay=0.0)

    def fitted(**params: float) -> RealtimeProfile:
        return RealtimeProfile(method="weekly", surge_decay=0.0, **params).fit(hours[:900], requests[:900])

    # Three hours at their P90 (band position 1): the next SURGE_RISK_HOURS hours get the reserve.
    high = _updated(fitted(), hours[900:903], "p90")
    forecast = high.predict(hours[903], 24)
    widened = forecast.p90 + SURGE_RESERVE * (forecast.p90 - forecast.p50)
    np.testing.assert_allclose(forecast.planned[:SURGE_RISK_HOURS], widened[:SURGE_RISK_HOURS])
    assert np.all(widened[:SURGE_RISK_HOURS] > forecast.p90[:SURGE_RISK_HOURS])
    np.testing.assert_array_equal(forecast.planned[SURGE_RISK_HOURS:], forecast.p90[SURGE_RISK_HOURS:])
    # The hour in progress counts as the latest: at its P50 the mean position is 2/3, still
    # high; the hours held are counted from it, so the plan from the next hour gets one fewer.
    p50_now = float(forecast.p50[0])
    later = high.predict(hours[904], 24, partial=p50_now)
    assert np.all(later.planned[: SURGE_RISK_HOURS - 1] > later.p90[: SURGE_RISK_HOURS - 1])
    np.testing.assert_array_equal(later.planned[SURGE_RISK_HOURS - 1 :], later.p90[SURGE_RISK_HOURS - 1 :])
    # Hours at their P50 (position 0), or the reserve turned off: the P90 everywhere.
    quiet = _updated(fitted(), hours[900:903], "p50").predict(hours[903], 24)
    np.testing.assert_array_equal(quiet.planned, quiet.p90)
    off = _updated(fitted(surge_reserve=0.0), hours[900:903], "p90").predict(hours[903], 24)
    np.testing.assert_array_equal(off.planned, off.p90)
    np.testing.assert_allclose(off.p90, forecast.p90)  # the reserve leaves the P50 and P90 alone
    assert unfitted.get_params()["surge_reserve"] == SURGE_RESERVE
    with pytest.raises(InputError, match="surge_reserve"):
        RealtimeProfile(surge_reserve=-1.0).fit(hours[:900], requests[:900])


def _fed_in_band_widths(philly: tuple[np.ndarray, np.ndarray], widths: tuple[float, ...]) -> RealtimeProfile:
    """A weekly profile of the first 900 hours, fed the next hours ``widths`` band widths
    (P50 to P90, on the band's scale) above the P50 forecast for them from before them."""
    hours, requests = philly
    profile = RealtimeProfile(method="weekly", surge_decay=0.0).fit(hours[:900], requests[:900])
    band = profile.band_
    end = 900 + len(widths)
    before = profile.predict(hours[900], len(widths))
    for hour, p50, p90, k in zip(hours[900:end], before.p50, before.p90, widths, strict=True):
        low, high = band.transform([p50, p90])
        profile.update(hour, float(band.inverse(np.array([low + k * (high - low)]))[0]))
    return profile


def test_the_reserve_holds_the_highest_latest_hour_while_the_risk_lasts(
    philly: tuple[np.ndarray, np.ndarray],
) -> None:
    hours = philly[0]
    # Three hours high in their band: 1, 3 and 2 band widths above the P50 forecast for them.
    profile = _fed_in_band_widths(philly, (1.0, 3.0, 2.0))
    band = profile.band_
    highest = float(np.max(np.expm1(profile.z_[-3:])))
    forecast = profile.predict(hours[903], 24)
    held = slice(0, SURGE_RISK_HOURS)
    widened = forecast.p90 + SURGE_RESERVE * (forecast.p90 - forecast.p50)
    # The reserve is never below the highest of the latest hours, where the profile's shape
    # falls faster than the traffic (here: above the widened band in every hour held)...
    np.testing.assert_allclose(forecast.planned[held], np.maximum(widened[held], highest))
    assert np.all(forecast.planned[held] > widened[held] + 1e-6)
    # ...for the hours at risk only; the P50 and P90 stay the profile's.
    np.testing.assert_array_equal(forecast.planned[SURGE_RISK_HOURS:], forecast.p90[SURGE_RISK_HOURS:])
    np.testing.assert_allclose(forecast.p90, band.upper(forecast.p50, forecast.hours))
    # The hour in progress counts among the latest: a half hour at twice that rate lifts it.
    later = profile.predict(hours[904], 24, partial=2 * highest)
    np.testing.assert_allclose(later.planned[: SURGE_RISK_HOURS - 1], 2 * highest)


def test_the_p90_headroom_differs_by_hour_of_day(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    band = RealtimeProfile().fit(hours[:900], requests[:900]).band_
    assert len(band.hourly) == 24
    assert len(set(band.hourly)) > 1


def test_the_same_hour_median_competes_on_its_own(lora: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = lora
    profile = RealtimeProfile().fit(hours, requests)
    assert ProfileMethod.SAME_HOUR_MEDIAN in profile.validation_mae_
    forced = RealtimeProfile()
    forced._members(ProfileMethod.SAME_HOUR_MEDIAN)  # one member: the baseline itself
    from forecasting.seasonal_baselines import same_hour_median

    z = np.log1p(requests)
    ours = forced._forecast_requests(z, ProfileMethod.SAME_HOUR_MEDIAN, 24)
    assert ours is not None
    np.testing.assert_allclose(ours, same_hour_median(requests, 24), rtol=1e-9, atol=1e-9)


def test_the_blend_is_the_mean_of_the_best_family_and_the_median(lora: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = lora
    profile = RealtimeProfile().fit(hours, requests)
    mae = profile.validation_mae_
    families = {
        m: v for m, v in mae.items() if m not in (ProfileMethod.SAME_HOUR_MEDIAN, ProfileMethod.BLEND)
    }
    assert profile.blend_of_ is min(families, key=families.__getitem__)
    z = np.log1p(requests)
    parts = [
        profile._forecast_requests(z, m, 24) for m in (profile.blend_of_, ProfileMethod.SAME_HOUR_MEDIAN)
    ]
    blend = profile._forecast_requests(z, ProfileMethod.BLEND, 24)
    assert blend is not None and parts[0] is not None and parts[1] is not None
    np.testing.assert_allclose(blend, (parts[0] + parts[1]) / 2)
    # Validated on the two families' own days: the error of a mean is at most the mean error.
    assert (
        mae[ProfileMethod.BLEND] <= (mae[profile.blend_of_] + mae[ProfileMethod.SAME_HOUR_MEDIAN]) / 2 + 1e-9
    )
    # Under two weeks there is no median to blend with.
    assert RealtimeProfile().fit(hours[:300], requests[:300]).blend_of_ is None


def test_a_blended_profile_is_stored_with_its_partner(
    lora: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    hours, requests = lora
    profile = RealtimeProfile().fit(hours, requests)
    profile.method_ = ProfileMethod.BLEND  # as a fit that chose it
    loaded = load_model(save_model(profile, tmp_path / "lora.json"), RealtimeProfile)
    assert loaded.method_ is ProfileMethod.BLEND and loaded.blend_of_ is profile.blend_of_
    np.testing.assert_allclose(loaded.predict(hours[-1] + 1, 24).p50, profile.predict(hours[-1] + 1, 24).p50)


def test_update_fills_a_gap_with_the_p50(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    profile = RealtimeProfile(method="flat").fit(hours[:900], requests[:900])
    profile.update(hours[903], float(requests[903]))
    assert profile.next_hour_ == hours[904]


def test_fit_rejects_gaps_and_bad_parameters(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    with pytest.raises(ValueError, match=re.escape("`hours` must be consecutive hours")):
        RealtimeProfile().fit(np.delete(hours[:100], 50), np.delete(requests[:100], 50))
    with pytest.raises(InputError, match=re.escape("`band_floor_fraction` must be a number > 0")):
        RealtimeProfile(band_floor_fraction=0.0).fit(hours[:48], requests[:48])
    with pytest.raises(InputError, match=re.escape("`method` must be one of auto, flat, daily, weekly")):
        RealtimeProfile(method="mstl").fit(hours[:48], requests[:48])  # type: ignore[arg-type]


def test_saves_with_provenance(philly: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    hours, requests = philly
    profile = RealtimeProfile().fit(hours[:700], requests[:700])
    path = save_model(profile, tmp_path / "philly.json")
    loaded = load_model(path, RealtimeProfile)
    assert loaded.provenance_.rows == 700
    assert loaded.provenance_.window_start == "2017-10-03T00"
    np.testing.assert_allclose(loaded.predict(hours[700]).p90, profile.predict(hours[700]).p90)
    assert loaded.method_ is profile.method_
    np.testing.assert_array_equal(loaded.z_, profile.z_)  # JSON floats round-trip exactly
    assert loaded.next_hour_ == profile.next_hour_


def test_a_dip_holds_the_next_hours_reserve_within_a_swap_cap_step_of_the_latest_peak(
    philly: tuple[np.ndarray, np.ndarray],
) -> None:
    hours = philly[0]
    # An hour at its P50, one two band widths above it, then a dip two band widths below:
    # the mean band position is 0, no surge risk.
    profile = _fed_in_band_widths(philly, (0.0, 2.0, -2.0))
    peak = float(np.expm1(profile.z_[-2]))
    plain = profile.predict(hours[903], 24)
    regrow = (peak - float(plain.p90[0])) / 4
    held = profile.predict(hours[903], 24, regrow=regrow)
    # Without the hold the dip's next hour is planned for its P90, far below the peak...
    np.testing.assert_array_equal(plain.planned, plain.p90)
    assert plain.planned[0] < peak - regrow
    # ...with it, for the peak less a swap-cap step for the hour between (the dip), and
    # one more step for every hour after, down to the P90; the P50 and P90 are unchanged.
    envelope = peak - regrow * np.arange(1, 25)
    np.testing.assert_allclose(held.planned, np.maximum(plain.planned, envelope))
    assert held.planned[2] > plain.planned[2] and held.planned[6] == plain.planned[6]
    np.testing.assert_array_equal(held.p90, plain.p90)
    # The hour in progress counts among the latest: at the :30 cycle, one more hour between.
    later = profile.predict(hours[904], 24, partial=0.0, regrow=regrow)
    np.testing.assert_allclose(later.planned, np.maximum(later.p90, peak - regrow * np.arange(2, 26)))
    # A swap cap that regrows the whole peak in one step holds the latest hour only (the dip).
    wide = profile.predict(hours[903], 24, regrow=peak)
    np.testing.assert_array_equal(wide.planned, plain.planned)
    with pytest.raises(InputError, match="regrow"):
        profile.predict(hours[903], 24, regrow=-1.0)


def test_a_rise_faster_than_the_swap_cap_is_planned_ahead_for_the_next_hours(
    philly: tuple[np.ndarray, np.ndarray],
) -> None:
    from forecasting.realtime import RAMP_HOURS

    hours = philly[0]
    # Two hours two band widths below their P50, then one two widths above: a steep rise,
    # the mean band position below the surge risk's.
    profile = _fed_in_band_widths(philly, (-2.0, -2.0, 2.0))
    actual = np.expm1(profile.z_[-3:])
    latest, rise = float(actual[-1]), float(actual[-1] - actual[-2])
    assert rise > 0

    def dip_hold(start: int, regrow: float) -> np.ndarray:
        between = np.arange(start, start + 24)[:, None] - np.arange(900, 903)[None, :] - 1
        return np.asarray(np.max(actual[None, :] - regrow * between, axis=1))

    # A swap cap that follows the rise within an hour: the dip hold alone.
    slow = profile.predict(hours[903], 24, regrow=rise)
    np.testing.assert_allclose(slow.planned, np.maximum(slow.p90, dip_hold(903, rise)))
    # A swap cap slower than the rise: the rise carries on for the next RAMP_HOURS hours,
    # planned ahead of the traffic; after them, the dip hold again; the P50 and P90 unchanged.
    regrow = rise / 3
    fast = profile.predict(hours[903], 24, regrow=regrow)
    ramp = latest + rise * np.arange(1, RAMP_HOURS + 1)
    np.testing.assert_allclose(fast.planned[:RAMP_HOURS], ramp)
    assert fast.planned[0] > slow.planned[0] > fast.planned[0] - rise - 1e-9
    np.testing.assert_allclose(
        fast.planned[RAMP_HOURS:], np.maximum(fast.p90, dip_hold(903, regrow))[RAMP_HOURS:]
    )
    np.testing.assert_array_equal(fast.p90, slow.p90)
    # The hour in progress rising again, at its rate so far, is the latest: one step on.
    later = profile.predict(hours[904], 24, partial=latest + rise, regrow=regrow)
    np.testing.assert_allclose(
        later.planned[:RAMP_HOURS], latest + rise + rise * np.arange(1, RAMP_HOURS + 1)
    )
    # A fall is no rise: with no regrow, the dip hold keeps the latest hours' highest, no more.
    falling = _fed_in_band_widths(philly, (2.0, 2.0, -2.0))
    forecast = falling.predict(hours[903], 24, regrow=0.0)
    highest = float(np.max(np.expm1(falling.z_[-3:])))
    np.testing.assert_allclose(forecast.planned, np.maximum(forecast.p90, highest))


def test_the_recalibrated_level_is_the_latest_ratio_shrunk_by_its_weight() -> None:
    forecast = np.array([10.0, 20.0, 0.0])
    before = np.array([4.0, 6.0])
    np.testing.assert_allclose(recalibrated_level(forecast, before, before, 1.0, 0.4), forecast)
    np.testing.assert_allclose(recalibrated_level(forecast, before, 2 * before, 1.0, 0.0), forecast)
    ratio = (20.0 + 2.0) / (10.0 + 2.0)
    np.testing.assert_allclose(
        recalibrated_level(forecast, before, 2 * before, 1.0, 0.4), (forecast + 1.0) * ratio**0.4 - 1.0
    )
    # A fall never takes a forecast below zero.
    assert recalibrated_level(forecast, before, 0 * before, 1.0, 1.0).min() >= 0.0


def test_a_recalibrated_profile_follows_the_risen_level_of_the_lora_trace(
    lora: tuple[np.ndarray, np.ndarray],
) -> None:
    # Origin 480: the last day held 2,471 requests, the same day a week before 1,564; the
    # next day 2,225. The profile as it ships forecasts from the weeks before (weekly).
    hours, requests = lora
    origin = 480
    actual = requests[origin : origin + HOURS_PER_DAY]
    errors = {}
    for weight in (0.0, 0.4):
        profile = RealtimeProfile(level_weight=weight).fit(hours[:origin], requests[:origin])
        errors[weight] = float(np.mean(np.abs(profile.predict(hours[origin]).p50 - actual)))
    assert errors[0.4] < 0.9 * errors[0.0]


def test_the_level_weight_is_checked(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    message = "`level_weight` must be a number in [0, 1] (0: no recalibration); got 1.5."
    with pytest.raises(InputError, match=re.escape(message)):
        RealtimeProfile(level_weight=1.5).fit(hours[:400], requests[:400])
