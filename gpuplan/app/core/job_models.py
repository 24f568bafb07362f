"""Where a batch job may run on a cluster of several pools, and its hours on each GPU model.

A spec's ``gpu_models`` is ``any`` (every pool of the cluster: the default) or a list of GPU
models (datasheet names such as ``h100-80gb``, or short ones such as ``h100``:
``features.gpu_models``). On a cluster of several pools (the config's ``cluster.pools``) the
job's estimate holds its hours on each model it may run on (``JobEstimate.by_model``):

- training and quantization: the estimator's forecast per model, at one GPU count, each
  model kept only where the job fits in its memory (:mod:`forecasting.by_model`);
- a spec that states ``gpus`` and ``hours`` (batch inference always does): the hours are on
  the reference model, the first pool's, and move to each other model by the ratio of the
  kind's speed on the two (:func:`features.gpu_models.speed`); a model the datasheet does
  not know keeps the hours as stated.

On a cluster of one pool the estimate is the spec's own, as it always was.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from contract.errors import InputError
from contract.records import Job, JobEstimate
from contract.scenario import JobKind, Pool
from features.gpu_models import GPU_SPECS, known_model, model_names, speed
from gpuplan.app.core.forecasters import SPEC_KEYS, Forecasters, estimate_of, explicit_estimate

log = logging.getLogger(__name__)

#: A spec's ``gpu_models`` that allows every pool of the cluster.
ANY_MODEL = "any"


def model_key(gpu_model: str) -> str:
    """The name a pool's ``gpu_model`` goes by in a job's hours: its datasheet name, or itself
    where gpuplan does not know it."""
    return known_model(gpu_model) or gpu_model


def pool_models(pools: Sequence[Pool]) -> dict[str, int]:
    """Each GPU model of ``pools`` -> the GPUs of its largest pool, in the cluster's order."""
    models: dict[str, int] = {}
    for pool in pools:
        key = model_key(pool.gpu_model)
        models[key] = max(models.get(key, 0), pool.gpus)
    return models


def check_gpu_models(value: object, *, source: str) -> None:
    """A spec's ``gpu_models`` is ``any`` or a non-empty list of models gpuplan knows."""
    if value == ANY_MODEL:
        return
    expected = f"{ANY_MODEL!r} or a list of GPU models"
    if not isinstance(value, list):
        raise InputError("gpu_models", expected, value, source=source)
    if not value:
        raise InputError(
            "gpu_models", f"{ANY_MODEL!r} or a list of at least one GPU model", "an empty list", source=source
        )
    for index, name in enumerate(value):
        if not isinstance(name, str) or known_model(name) is None:
            raise InputError(
                f"gpu_models[{index}]",
                f"a GPU model gpuplan knows: one of {model_names()}",
                name,
                source=source,
            )


def allowed_models(spec: Mapping[str, Any], pools: Sequence[Pool], *, source: str) -> dict[str, int]:
    """The models of ``pools`` the spec's ``gpu_models`` allows (model -> the GPUs of its
    largest pool, in the cluster's order); empty on a cluster without pools."""
    value = spec.get("gpu_models", ANY_MODEL)
    check_gpu_models(value, source=source)
    if not pools:
        if value != ANY_MODEL:
            raise InputError(
                "gpu_models",
                f"absent or {ANY_MODEL!r} on a cluster without cluster.pools (the daemon's config)",
                value,
                source=source,
            )
        return {}
    models = pool_models(pools)
    if value == ANY_MODEL:
        return models
    listed = {known_model(name) for name in value}
    chosen = {model: gpus for model, gpus in models.items() if model in listed}
    if not chosen:
        raise InputError(
            "gpu_models",
            f"a list naming a GPU model of the cluster's pools {list(models)}",
            value,
            source=source,
        )
    return chosen


def stated_on_models(
    estimate: JobEstimate, kind: JobKind, models: Mapping[str, int], reference: str
) -> JobEstimate:
    """A stated estimate (hours on the ``reference`` model) on each of ``models``, moved by the
    kind's speed ratio; a model the datasheet does not know (or a reference it does not) keeps
    the hours as stated."""
    by_model = {}
    for model in models:
        ratio = 1.0
        if model in GPU_SPECS and reference in GPU_SPECS:
            ratio = speed(kind, reference) / speed(kind, model)
        by_model[model] = (estimate.hours_p50 * ratio, estimate.hours_p90 * ratio)
    return JobEstimate(estimate.gpus, estimate.hours_p50, estimate.hours_p90, by_model)


def stated_per_model(
    estimate: JobEstimate, models: Mapping[str, int], pools: Sequence[Pool], *, source: str
) -> JobEstimate:
    """Hours stated per GPU model (``hours: {h100: 4, a100: 8}``) on the cluster of ``pools``:
    the job runs on the models it allows (``models``) that the mapping gives hours on, in the
    cluster's order; on one pool, at that pool's model's hours. InputError when none is left,
    or on a cluster without pools."""
    stated = estimate.by_model or {}
    if not pools:
        raise InputError(
            "hours", "a number of hours on a cluster without cluster.pools", dict(stated), source=source
        )
    if len(pools) == 1:
        models = pool_models(pools)
    chosen = {model: stated[model] for model in models if model in stated}
    if not chosen:
        raise InputError(
            "hours",
            f"hours on a GPU model of the cluster's pools the job may run on {list(models)}",
            list(stated),
            source=source,
        )
    first = next(iter(chosen.values()))
    if len(pools) == 1:
        return JobEstimate(estimate.gpus, first[0], first[1])
    return JobEstimate(estimate.gpus, first[0], first[1], chosen)


def estimate_on_pools(
    spec: Mapping[str, Any], forecasters: Forecasters, pools: Sequence[Pool], *, source: str
) -> JobEstimate:
    """A checked spec's estimate on the cluster of ``pools``: per GPU model with several pools,
    the spec's own with one or none. InputError when its ``gpu_models`` names none of the
    pools' models, or it fits in the memory of none of them."""
    kind = JobKind(spec["kind"])
    models = allowed_models(spec, pools, source=source)
    explicit = explicit_estimate(dict(spec))
    features = {k: v for k, v in spec.items() if k not in SPEC_KEYS}
    if explicit is not None and explicit.by_model is not None:
        return stated_per_model(explicit, models, pools, source=source)
    if len(pools) <= 1:
        return explicit or estimate_of(forecasters.forecast(kind, features, source=source))
    if explicit is not None:
        return stated_on_models(explicit, kind, models, model_key(pools[0].gpu_model))
    choice = forecasters.forecast_on_models(kind, features, models, source=source)
    for model, why in choice.left_out.items():
        log.info("%s: not on %s (%s)", source, model, why)
    by_model = {model: (float(hours.p50), float(hours.p90)) for model, hours in choice.hours.items()}
    first = next(iter(by_model.values()))
    return JobEstimate(choice.gpus, first[0], first[1], by_model)


def estimates_on_pools(
    forecasters: Forecasters, jobs: Sequence[Job], pools: Sequence[Pool]
) -> dict[str, JobEstimate]:
    """Estimates for stored jobs (the queue's without one) on the cluster of ``pools``; a job
    that cannot be estimated is left out (logged) and stays queued."""
    if len(pools) <= 1:
        return forecasters.estimates(jobs)
    found = {}
    for job in jobs:
        try:
            found[job.id] = estimate_on_pools(job.spec, forecasters, pools, source=f"job {job.id}")
        except InputError as error:
            log.warning("job %s cannot be estimated on the cluster's pools: %s", job.id, error)
    return found


def job_pools(estimate: JobEstimate, pools: Sequence[Pool]) -> list[tuple[Pool, tuple[float, float]]]:
    """The pools ``estimate`` lets its job run on, each with the job's (P50, P90) hours there,
    in the cluster's order; with no hours per model, every pool at the estimate's hours."""
    found = []
    for pool in pools:
        hours = estimate.hours_on(model_key(pool.gpu_model))
        if hours is not None:
            found.append((pool, hours))
    return found


def with_model_features(document: object, pools: Sequence[Pool]) -> object:
    """A spec document for the cluster of ``pools``: on several, a spec to forecast that leaves
    out ``gpu_type`` (and, for training, ``gpu_memory_gb``) takes them from the first model
    it may run on that gpuplan knows, since they are set per model anyway; any other document
    is returned as it is (a wrong one is refused by the checks that follow, naming its field)."""
    if len(pools) <= 1 or not isinstance(document, Mapping) or "gpu_type" in document:
        return document
    if document.get("kind") not in {kind.value for kind in JobKind.forecast()} or "hours" in document:
        return document
    try:
        models = allowed_models(document, pools, source="spec")
    except InputError:
        return document
    first = next((model for model in models if model in GPU_SPECS), None)
    if first is None:
        return document
    filled = {**document, "gpu_type": first}
    if document["kind"] == JobKind.TRAINING and "gpu_memory_gb" not in document:
        filled["gpu_memory_gb"] = GPU_SPECS[first].memory_gb
    return filled
