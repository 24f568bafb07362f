"""Fit one real-time demand profile per traffic series (called by ``gpuplan train``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from features.traffic import load_traffic

logger = logging.getLogger(__name__)

#: The hourly series shipped with the product (see training_data/traffic/SOURCES.md).
BUNDLED_TRAFFIC_DIR = Path(__file__).resolve().parent.parent / "training_data" / "traffic"


def bundled_traffic_paths() -> list[Path]:
    """The bundled hourly series (per-request slices are for ingestion tests only)."""
    return sorted(BUNDLED_TRAFFIC_DIR.glob("*_hourly.csv"))


def fit_profiles(traffic_paths: Sequence[Path], models_dir: Path) -> list[dict[str, object]]:
    """Fit and save one profile per traffic CSV; return one evaluation row per series.

    With an empty ``traffic_paths`` the bundled series are used. First version: reads
    and validates every series; profile fitting and saving follow in the next commit.
    """
    paths = list(traffic_paths) or bundled_traffic_paths()
    rows: list[dict[str, object]] = []
    for path in paths:
        traffic = load_traffic(path)
        rows.append({"series": path.stem, "hours": len(traffic), "model": None})
    logger.info("read %d traffic series (models_dir=%s)", len(rows), models_dir)
    return rows
