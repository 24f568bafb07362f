"""Fit one real-time demand profile per traffic series (the retrain use case saves them)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from features.traffic import load_traffic
from forecasting.backtest import BacktestConfig, accuracy, run_backtest
from forecasting.realtime import HOURS_PER_DAY, HOURS_PER_WEEK, RealtimeProfile

logger = logging.getLogger(__name__)

#: The hourly series shipped with the product (see training_data/traffic/SOURCES.md).
BUNDLED_TRAFFIC_DIR = Path(__file__).resolve().parent.parent / "training_data" / "traffic"


def bundled_traffic_paths() -> list[Path]:
    """The bundled hourly series (per-request slices are for ingestion tests only)."""
    return sorted(BUNDLED_TRAFFIC_DIR.glob("*_hourly.csv"))


def backtest_config_for(hours: int) -> BacktestConfig:
    """The issue's protocol (two weeks, then daily origins) where three weeks exist.

    Shorter series (the two-week ServeGen traces) get one week of history and daily
    origins over the second week; their rows are marked ``short_history``.
    """
    if hours >= 3 * HOURS_PER_WEEK:
        return BacktestConfig()
    return BacktestConfig(initial_hours=HOURS_PER_WEEK)


def fit_profiles(
    traffic_paths: Sequence[Path], *, requests_column: str | None = None
) -> list[tuple[str, RealtimeProfile, dict[str, object]]]:
    """Fit one profile per traffic CSV: ``(series, profile, evaluation row)`` each.

    With an empty ``traffic_paths`` the bundled series are used; ``requests_column`` names
    the count column of hourly files with another header (``features.traffic``). Each profile is fitted
    on the whole series; the row reports the day-ahead backtest of the same
    configuration (:mod:`forecasting.backtest`). Nothing is written here: the caller
    saves every profile only once all of them have fitted.
    """
    paths = list(traffic_paths) or bundled_traffic_paths()
    # Every file is read before the first fit, so a bad one stops the retrain at once.
    loaded = [(path.stem, load_traffic(path, requests_column=requests_column)) for path in paths]
    fitted: list[tuple[str, RealtimeProfile, dict[str, object]]] = []
    for series, traffic in loaded:
        profile = RealtimeProfile().fit(traffic.hours, traffic.requests)
        row: dict[str, object] = {"series": series, "hours": len(traffic)}
        if len(traffic) >= HOURS_PER_WEEK + HOURS_PER_DAY:
            config = backtest_config_for(len(traffic))
            row.update(asdict(accuracy(run_backtest(traffic, series=series, config=config))))
            row["short_history"] = config.initial_hours < 2 * HOURS_PER_WEEK
        row["model"] = profile.method_.value
        fitted.append((series, profile, row))
        logger.info("fitted real-time profile %s", series)
    return fitted
