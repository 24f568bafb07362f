"""Job specs: the file a submitter writes to ask for a forecast or a place in the queue.

A spec is one JSON or YAML object (by suffix, read by :mod:`contract.files`): ``kind``
(``training`` or ``quantization``) and the job's feature values by name, each a plain
value (text, number, boolean). Which features and ranges are allowed is the schema's
business (``features.job_features``, ``gpuplan forecast job --schema``); a spec that
comes back from here has passed it, so no model is loaded for a spec that is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping

from contract.errors import InputError
from contract.scenario import JobKind
from features.job_features import SCHEMAS

KINDS: tuple[JobKind, ...] = tuple(SCHEMAS)


def parse_job_spec(document: object, *, source: str) -> tuple[JobKind, dict[str, object]]:
    """``(kind, feature values)`` from a parsed spec document (a file, a request body), validated."""
    if not isinstance(document, Mapping):
        raise InputError(
            "(top level)", "a mapping of feature names to values", type(document).__name__, source=source
        )
    features = {str(name): value for name, value in document.items()}
    kind = features.pop("kind", None)
    if kind not in KINDS:
        batch = {k.value for k in JobKind.batch()}
        raise InputError(
            "kind",
            " or ".join(KINDS),
            kind,
            source=source,
            hint=f"{str(kind).replace('_', ' ').capitalize()} has no forecaster: its spec states `gpus` and "
            "`hours`, and `gpuplan submit` plans it as stated."
            if isinstance(kind, str) and kind in batch
            else "Add `kind: training` or `kind: quantization` to the spec.",
        )
    for name, value in features.items():
        if value is not None and not isinstance(value, str | int | float | bool):
            raise InputError(
                name, "a single value (text, number or boolean)", type(value).__name__, source=source
            )
    job_kind = JobKind(str(kind))
    SCHEMAS[job_kind].validate_record(features, source=source)
    return job_kind, features
