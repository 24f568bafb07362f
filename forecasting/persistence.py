"""Saving fitted models with their provenance, and loading them back: as data, never code.

Every saved model records the library versions, fit time, training window, row
count and a hash of the training data (skforecast's habit), so a model found on
disk can be traced to what it learned from, and the format version of its files. A
model is a JSON document (class, parameters, fitted numbers) plus its LightGBM boosters
in LightGBM's own text format; nothing is unpickled, so whoever can write the models
folder or the database cannot make the head node run code. A model class gives its
fitted numbers with ``to_state()`` and is rebuilt by ``from_state(params, state, boosters)``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from contract.errors import InputError
from contract.files import replace_files

T = TypeVar("T")

TRACKED_LIBRARIES = ("gpuplan", "numpy", "pandas", "scikit-learn", "lightgbm", "statsmodels")
#: The models' file format: 2 is JSON documents and LightGBM text (1, unversioned, was pickles).
FORMAT_VERSION = 2
RETRAIN_HINT = "retrain with `gpuplan train`."
PICKLE_MARK = b"\x80"  # the first byte of every pickle since protocol 2


@dataclass(frozen=True, slots=True)
class Provenance:
    model: str
    fitted_at: str
    rows: int
    data_sha256: str
    window_start: str | None = None
    window_end: str | None = None
    library_versions: dict[str, str] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION


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


def _document(estimator: Any, state: dict[str, Any], booster_files: dict[str, str]) -> bytes:
    provenance: Provenance = estimator.provenance_
    document = {
        **asdict(provenance),
        "format_version": FORMAT_VERSION,
        "type": type(estimator).__name__,
        "params": estimator.get_params(),
        "state": state,
        "boosters": booster_files,
    }
    return (json.dumps(document, indent=2, allow_nan=False) + "\n").encode()


def model_files(estimator: Any, path: Path) -> dict[str, bytes]:
    """The files that hold ``estimator`` (which must carry ``provenance_``), by name: data, never code.

    ``path.name`` (``NAME.json``) gets the model's document: its provenance (with the format
    version), its class, parameters and fitted numbers (``estimator.to_state()``); each
    LightGBM booster goes in its own text file ``NAME.<booster>.lgb.txt`` (LightGBM's own
    format, ``Booster.model_to_string``). A caller can write several models' files together
    (:func:`contract.files.replace_files`).
    """
    state, boosters = estimator.to_state()
    booster_files = {key: f"{path.stem}.{key}.lgb.txt" for key in boosters}
    files = {path.name: _document(estimator, state, booster_files)}
    files.update({booster_files[key]: text.encode() for key, text in boosters.items()})
    return files


def model_bytes(estimator: Any) -> bytes:
    """A model with no boosters (a real-time profile) as one JSON document, for the database."""
    state, boosters = estimator.to_state()
    if boosters:
        raise ValueError(f"a {type(estimator).__name__} has boosters: save it with save_model")
    return _document(estimator, state, {})


def save_model(estimator: Any, path: Path, what: str = "model file") -> Path:
    """Write ``estimator``'s document and its boosters' text files, all or none."""
    replace_files(path.parent, model_files(estimator, path), what)
    return path


def model_from_bytes(
    raw: bytes,
    expected_type: type[T],
    *,
    field: str,
    source: str,
    read_booster: Callable[[str], str] | None = None,
    saved_by: str = "`gpuplan train`",
    remedy: str = f"To use it, {RETRAIN_HINT}",
) -> T:
    """Rebuild a model from its JSON document; InputError naming ``field`` for anything else.

    Only data is read: a pickle (what gpuplan saved before the models' format version 2) or
    any other form is refused with a message saying to retrain, never loaded.
    """
    expected = f"a fitted {expected_type.__name__} saved by {saved_by} (JSON, format {FORMAT_VERSION})"

    def refuse(why: str) -> InputError:
        return InputError(field, expected, source, hint=f"{why} {remedy}")

    if raw[:1] == PICKLE_MARK:
        raise refuse("It is a pickle, which gpuplan never loads (a model is data, not code).")
    try:
        document = json.loads(raw)
    except ValueError:
        raise refuse("It is not a JSON model document.") from None
    if not isinstance(document, dict):
        raise refuse("It is not a JSON model document.")
    version = document.get("format_version")
    if version != FORMAT_VERSION:
        found = "no format version" if version is None else f"format version {version!r}"
        raise refuse(f"It has {found}: it was saved by another version of gpuplan.")
    if document.get("type") != expected_type.__name__:
        raise refuse(f"It holds a {document.get('type')!r}.")
    boosters: dict[str, str] = {}
    for key, name in dict(document.get("boosters") or {}).items():
        if read_booster is None:
            raise refuse("It names booster files, which a stored profile has none of.")
        try:
            boosters[str(key)] = read_booster(str(name))
        except (OSError, UnicodeDecodeError) as error:
            raise refuse(f"Its booster file {name} cannot be read ({error}).") from None
    names = {f.name for f in dataclass_fields(Provenance)}
    try:
        provenance = Provenance(**{k: v for k, v in document.items() if k in names})
        estimator: T = expected_type.from_state(  # type: ignore[attr-defined]
            dict(document["params"]), document["state"], boosters
        )
    except Exception as error:  # a damaged document can fail anywhere in the rebuild
        raise refuse(f"It does not load ({type(error).__name__}: {error}).") from None
    estimator.provenance_ = provenance  # type: ignore[attr-defined]
    return estimator


def load_model(path: Path, expected_type: type[T]) -> T:
    """Load a model saved by :func:`save_model`; InputError when the file holds anything else."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise InputError(
            "model file", "a readable file", str(path), hint=f"{error.strerror or error}."
        ) from None

    def read_booster(name: str) -> str:
        if Path(name).name != name:
            raise OSError(f"{name!r} is not a file name beside the model")
        return (path.parent / name).read_text(encoding="utf-8")

    return model_from_bytes(
        raw, expected_type, field="model file", source=str(path), read_booster=read_booster
    )
