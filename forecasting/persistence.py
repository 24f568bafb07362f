"""Saving fitted models with their provenance, and loading them back.

Every saved model records the library versions, fit time, training window, row
count and a hash of the training data (skforecast's habit), so a model found on
disk can be traced to what it learned from.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

TRACKED_LIBRARIES = ("gpuplan", "numpy", "pandas", "scikit-learn", "lightgbm", "statsmodels")


@dataclass(frozen=True, slots=True)
class Provenance:
    model: str
    fitted_at: str
    rows: int
    data_sha256: str
    window_start: str | None = None
    window_end: str | None = None
    library_versions: dict[str, str] = field(default_factory=dict)


def library_versions() -> dict[str, str]:
    versions = {}
    for name in TRACKED_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def data_sha256(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def make_provenance(
    model: str,
    *,
    rows: int,
    data_bytes: bytes,
    window_start: object = None,
    window_end: object = None,
    now: datetime | None = None,
) -> Provenance:
    """Provenance for a model fitted now on ``rows`` rows serialised as ``data_bytes``."""
    fitted_at = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    return Provenance(
        model=model,
        fitted_at=fitted_at,
        rows=rows,
        data_sha256=data_sha256(data_bytes),
        window_start=None if window_start is None else str(window_start),
        window_end=None if window_end is None else str(window_end),
        library_versions=library_versions(),
    )


def save_model(estimator: Any, path: Path) -> Path:
    """Write ``estimator`` (which must carry ``provenance_``) and a JSON sidecar beside it.

    Written to a temporary name and renamed, so a failed save never leaves half a model.
    """
    provenance: Provenance = estimator.provenance_
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("wb") as handle:
        pickle.dump(estimator, handle, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.replace(path)
    sidecar = path.with_suffix(".json")
    sidecar.write_text(json.dumps(asdict(provenance), indent=2) + "\n")
    return path


def load_model(path: Path, expected_type: type[T]) -> T:
    """Load a model saved by :func:`save_model`, checking it is of ``expected_type``."""
    with path.open("rb") as handle:
        estimator = pickle.load(handle)
    if not isinstance(estimator, expected_type):
        raise TypeError(f"{path} holds a {type(estimator).__name__}, expected {expected_type.__name__}.")
    return estimator
