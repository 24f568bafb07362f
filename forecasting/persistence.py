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

from contract.errors import InputError
from contract.files import replace_files

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


def model_files(estimator: Any, path: Path) -> dict[str, bytes]:
    """The files that hold ``estimator`` (which must carry ``provenance_``), by name.

    ``path.name`` gets the pickled model and ``path.stem + ".json"`` its provenance, so a
    caller can write several models' files together (:func:`contract.files.replace_files`).
    """
    provenance: Provenance = estimator.provenance_
    return {
        path.name: pickle.dumps(estimator, protocol=pickle.HIGHEST_PROTOCOL),
        path.with_suffix(".json").name: (json.dumps(asdict(provenance), indent=2) + "\n").encode(),
    }


def save_model(estimator: Any, path: Path, what: str = "model file") -> Path:
    """Write ``estimator`` and its JSON provenance sidecar beside it, both or neither."""
    replace_files(path.parent, model_files(estimator, path), what)
    return path


def load_model(path: Path, expected_type: type[T]) -> T:
    """Load a model saved by :func:`save_model`; InputError when the file holds anything else."""
    expected = f"a fitted {expected_type.__name__} saved by `gpuplan train`"
    hint = "Run `gpuplan train` to write it again."
    try:
        with path.open("rb") as handle:
            estimator = pickle.load(handle)
    except OSError as error:
        raise InputError(
            "model file", "a readable file", str(path), hint=f"{error.strerror or error}."
        ) from None
    except Exception as error:  # unpickling a damaged file can raise any type
        raise InputError(
            "model file", expected, str(path), hint=f"It does not unpickle ({type(error).__name__}). {hint}"
        ) from None
    if not isinstance(estimator, expected_type) or not hasattr(estimator, "provenance_"):
        raise InputError(
            "model file", expected, str(path), hint=f"It holds a {type(estimator).__name__}. {hint}"
        )
    return estimator
