"""RealtimeProfile on the real traces: contract, fallback, update, selection."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from contract.errors import InputError
from features.traffic import load_traffic
from forecasting.persistence import load_model, save_model
from forecasting.realtime import NotFittedError, ProfileMethod, RealtimeProfile

TRAFFIC = Path(__file__).resolve().parent.parent / "training_data" / "traffic"


@pytest.fixture(scope="module")
def philly() -> tuple[np.ndarray, np.ndarray]:
    traffic = load_traffic(TRAFFIC / "philly_active_nodes_hourly.csv")
    return traffic.hours, traffic.requests


@pytest.fixture(scope="module")
def lora() -> tuple[np.ndarray, np.ndarray]:
    traffic = load_traffic(TRAFFIC / "alibaba_genai_lora_hourly.csv")
    return traffic.hours, traffic.requests


def test_init_only_stores_parameters_and_predict_needs_fit() -> None:
    profile = RealtimeProfile(half_life_weeks=3.0)
    assert vars(profile)["half_life_weeks"] == 3.0
    assert not [name for name in vars(profile) if name.endswith("_")]
    message = "This RealtimeProfile is not fitted yet; call fit(hours, requests) first."
    with pytest.raises(NotFittedError, match=re.escape(message)):
        profile.predict("2024-01-01 00:00")
    assert issubclass(NotFittedError, ValueError)
    assert issubclass(NotFittedError, AttributeError)


def test_fallbacks_below_two_weeks(lora: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = lora
    assert RealtimeProfile().fit(hours[:12], requests[:12]).method_ is ProfileMethod.FLAT
    daily = RealtimeProfile().fit(hours[:200], requests[:200])
    assert daily.method_ is ProfileMethod.DAILY
    np.testing.assert_allclose(daily.shape_[:24], daily.shape_[24:48])
    assert RealtimeProfile().fit(hours[:400], requests[:400]).method_ is ProfileMethod.WEEKLY


def test_forecast_quantiles_are_ordered_and_nonnegative(
    philly: tuple[np.ndarray, np.ndarray],
) -> None:
    hours, requests = philly
    profile = RealtimeProfile(method="weekly").fit(hours[:900], requests[:900])
    forecast = profile.predict(hours[900], 24)
    assert forecast.hours[0] == hours[900]
    assert np.all(forecast.p90 >= forecast.p50)
    assert np.all(forecast.p50 >= 0)
    assert forecast.p50.shape == (24,)


def test_update_moves_the_forecast_without_refit(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    profile = RealtimeProfile(method="weekly").fit(hours[:900], requests[:900])
    before = profile.predict(hours[901], 24).p50
    fitted_at = profile.provenance_.fitted_at
    profile.update(hours[900], 2 * float(requests[900]))
    after = profile.predict(hours[901], 24).p50
    assert np.all(after > before)  # a busier hour lifts the level
    assert profile.provenance_.fitted_at == fitted_at
    message = "`hour` must be 2017-11-09T13 or later"
    with pytest.raises(ValueError, match=re.escape(message)):
        profile.update(hours[899], 1.0)
    with pytest.raises(ValueError, match=re.escape("`start_hour` must be 2017-11-09T13 or later")):
        profile.predict(hours[900])


def test_spike_barely_moves_the_level(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    profile = RealtimeProfile(method="weekly").fit(hours[:900], requests[:900])
    level = profile.level_
    profile.update(hours[900], 100 * float(requests[900]))
    assert abs(profile.level_ - level) < 0.2  # clipped innovation, in log1p units


def test_fit_rejects_gaps(philly: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = philly
    with pytest.raises(ValueError, match=re.escape("`hours` must be consecutive hours")):
        RealtimeProfile().fit(np.delete(hours[:100], 50), np.delete(requests[:100], 50))


def test_auto_selects_by_backtest_and_saves_with_provenance(
    philly: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    hours, requests = philly
    profile = RealtimeProfile().fit(hours[:700], requests[:700])
    assert set(profile.selection_mae_) == {"weekly", "daily", "mstl"}
    best = min(profile.selection_mae_, key=profile.selection_mae_.__getitem__)
    assert profile.method_.value == best
    path = save_model(profile, tmp_path / "philly.pkl")
    loaded = load_model(path, RealtimeProfile)
    assert loaded.provenance_.rows == 700
    assert loaded.provenance_.window_start == "2017-10-03T00"
    np.testing.assert_allclose(loaded.predict(hours[700]).p90, profile.predict(hours[700]).p90)
    assert pickle.loads(pickle.dumps(profile)).method_ is profile.method_


def test_ratio_band_is_proportionate_at_peaks(lora: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = lora
    ratio = RealtimeProfile().fit(hours[:408], requests[:408]).predict(hours[408], 24)
    log = RealtimeProfile(band="log").fit(hours[:408], requests[:408]).predict(hours[408], 24)
    np.testing.assert_allclose(ratio.p50, log.p50)  # the band changes P90 only
    assert np.all(ratio.p90 >= ratio.p50)
    # The log band multiplies a peak by the night's spread; the ratio band stays within
    # a few times the history's peak (355 requests).
    assert ratio.p90.max() < 3 * requests[:408].max() < log.p90.max()


def test_band_parameters_are_validated(lora: tuple[np.ndarray, np.ndarray]) -> None:
    hours, requests = lora
    with pytest.raises(InputError, match=re.escape("`band_floor_fraction` must be a number > 0")):
        RealtimeProfile(band_floor_fraction=0.0).fit(hours[:48], requests[:48])
    with pytest.raises(InputError, match=re.escape("`band` must be one of ratio, log")):
        RealtimeProfile(band="normal").fit(hours[:48], requests[:48])  # type: ignore[arg-type]
