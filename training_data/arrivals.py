"""When batch jobs arrive: a daily and a weekly pattern taken from a real cluster trace.

The bundled ``workloads/openb_arrival_pattern.csv`` counts the GPU pods of Alibaba's
``openb`` trace (cluster-trace-gpu-v2023, 8,152 pods over 149 days; see
``workloads/SOURCES.md``) by hour of the week since the trace starts: ``pods``
requested GPUs, ``latency_sensitive`` of them were of QoS class LS, Guaranteed or
Burstable (the rest best-effort). The trace's weekday is unknown, so slot 0 is "the
trace's first hour", not Monday.

The arrival rate of an hour of the week is the product of its day's share and its
hour of day's share (the two marginals), which keeps the real daily and weekly shape
without the noise of ~50 pods per single slot.

Run ``python -m training_data.arrivals PODS_CSV`` to regenerate the bundled file.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from contract.errors import InputError
from contract.files import read_csv

logger = logging.getLogger(__name__)

BUNDLED_PATTERN = Path(__file__).parent / "workloads" / "openb_arrival_pattern.csv"
HOURS_PER_DAY = 24
HOURS_PER_WEEK = 168
#: QoS classes of the openb trace that are not best-effort.
LATENCY_SENSITIVE_QOS = ("LS", "Guaranteed", "Burstable")
PATTERN_COLUMNS = ("hour_of_week", "pods", "latency_sensitive")

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, eq=False)
class ArrivalPattern:
    """Relative arrival rate per hour of the week (mean 1) and the latency-sensitive share."""

    rate: FloatArray  # 168 values, mean 1
    latency_sensitive_share: float


def derive_pattern(pods_csv: Path) -> pd.DataFrame:
    """Count the GPU pods of an openb pod list by hour of the week since the trace start."""
    pods = read_csv(pods_csv, "pods CSV")
    gpu_pods = pods[pods["num_gpu"] > 0]
    slot = (gpu_pods["creation_time"] // 3600).astype(int) % HOURS_PER_WEEK
    sensitive = gpu_pods["qos"].isin(LATENCY_SENSITIVE_QOS)
    table = pd.DataFrame({"hour_of_week": np.arange(HOURS_PER_WEEK)})
    table["pods"] = slot.value_counts().reindex(table["hour_of_week"], fill_value=0).to_numpy()
    table["latency_sensitive"] = (
        slot[sensitive].value_counts().reindex(table["hour_of_week"], fill_value=0).to_numpy()
    )
    return table


def load_pattern(path: Path = BUNDLED_PATTERN) -> ArrivalPattern:
    """The arrival pattern in ``path`` (the bundled openb counts by default)."""
    table = read_csv(path, "arrival pattern")
    if list(table.columns) != list(PATTERN_COLUMNS) or len(table) != HOURS_PER_WEEK:
        raise InputError(
            "arrival pattern",
            f"168 rows of {', '.join(PATTERN_COLUMNS)}",
            f"{len(table)} rows of {', '.join(map(str, table.columns))}",
            source=str(path),
        )
    counts = table["pods"].to_numpy(dtype=float).reshape(7, HOURS_PER_DAY)
    if counts.sum() <= 0:
        raise InputError("pods", "some arrivals", 0, source=str(path))
    day_share = counts.sum(axis=1) / counts.sum()
    hour_share = counts.sum(axis=0) / counts.sum()
    rate = np.outer(day_share, hour_share).ravel() * HOURS_PER_WEEK
    share = float(table["latency_sensitive"].sum() / table["pods"].sum())
    return ArrivalPattern(rate=rate, latency_sensitive_share=share)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the bundled arrival pattern.")
    parser.add_argument("pods_csv", type=Path, help="openb_pod_list_default.csv (or the shared copy)")
    parser.add_argument("--out", type=Path, default=BUNDLED_PATTERN)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    derive_pattern(args.pods_csv).to_csv(args.out, index=False)
    logger.warning("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
