"""``gpuplan forecast job``: one batch job's GPUs and hours (P50, P90), or the schema.

The spec (YAML or JSON) is the one ``gpuplan submit`` takes: ``kind`` (training or
quantization), the feature values by name, and optionally the queue's ``id`` and
``priority`` (checked, not used here). The estimators are read from ``--models``
(default ./models); when none is there the command stops and says to run ``gpuplan
train`` rather than training silently: a forecast should come from a model whose
provenance the user chose.

With ``--config`` naming a cluster of several pools (``cluster.pools``), the forecast is also
made on each GPU model the spec's ``gpu_models`` allows, at the one GPU count the job would
be queued with (docs/pools.md, "What a job may say"): its hours on each, and why a model is
left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpuplan.app.core.models import DEFAULT_MODELS_DIR, MODEL_FILES

KINDS = tuple(MODEL_FILES)


def _say(text: str) -> None:
    """Command output goes to stdout; logging stays on stderr."""
    sys.stdout.write(text + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", type=Path, nargs="?", help="job spec (YAML or JSON)")
    parser.add_argument("--json", action="store_true", help="print the forecast as JSON")
    parser.add_argument("--schema", action="store_true", help="print the feature schema as JSON and exit")
    parser.add_argument(
        "--kind", choices=KINDS, help="schema to print with --schema (default training; a spec names its own)"
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="the daemon's config: on a cluster of several pools, the hours on each GPU model too",
    )
    parser.add_argument(
        "--models",
        type=Path,
        default=DEFAULT_MODELS_DIR,
        help="directory holding the fitted models (default: ./models)",
    )


def run(args: argparse.Namespace) -> int:
    from contract.errors import InputError
    from contract.files import read_mapping
    from contract.scenario import JobKind
    from features.job_features import SCHEMAS
    from gpuplan.app.core.config import load_config
    from gpuplan.app.core.forecasters import kind_and_features
    from gpuplan.app.core.job_models import allowed_models, model_key, with_model_features
    from gpuplan.app.core.models import load_job_estimator
    from gpuplan.app.jobs.jobspec import parse_job_spec
    from gpuplan.app.jobs.submit import check_spec

    if args.schema:
        if args.spec is not None:
            raise InputError(
                "JOB",
                "absent with --schema",
                str(args.spec),
                hint="--schema prints a kind's schema (--kind); drop it to forecast the spec.",
            )
        _say(json.dumps(SCHEMAS[JobKind(args.kind or JobKind.TRAINING)].to_json(), indent=2))
        return 0
    if args.spec is None:
        raise InputError("JOB", "a job spec path (or --schema)", None)
    if args.kind is not None:
        raise InputError("--kind", "given only with --schema", args.kind, hint="A spec names its own `kind`.")
    # The spec `submit` takes: the forecast reads its kind and features, and its queue keys
    # (id, priority, gpus, hours) are checked as `submit` checks them.
    source = str(args.spec)
    document = read_mapping(args.spec, "JOB", expected="a mapping of feature names to values")
    pools = load_config(args.config).pools if args.config is not None else ()
    filled = with_model_features(document, pools)
    document = dict(filled) if isinstance(filled, dict) else document
    kind, features = parse_job_spec(kind_and_features(document), source=source)
    check_spec(document, source=source, default_id=args.spec.stem)
    estimator = load_job_estimator(args.models, kind)
    forecast = estimator.forecast_spec(features, source=source)
    on_models = None
    if len(pools) > 1:
        models = allowed_models(document, pools, source=source)
        on_models = estimator.forecast_on_models(features, models, source=source)
    if args.json:
        answer: dict[str, object] = dict(forecast.to_json())
        if on_models is not None:
            answer["on_models"] = {
                "gpus": on_models.gpus,
                "hours": {model: hours.to_json() for model, hours in on_models.hours.items()},
                "left_out": dict(on_models.left_out),
            }
        _say(json.dumps(answer))
        return 0
    _say(f"{args.spec.name} ({kind}), model fitted {estimator.provenance_.fitted_at}:")
    _say(f"  GPUs:  P50 {forecast.gpus.p50:g}  P90 {forecast.gpus.p90:g}")
    _say(f"  hours: P50 {forecast.duration_hours.p50:.2f}  P90 {forecast.duration_hours.p90:.2f}")
    if forecast.gpu_hours is not None:
        _say(f"  GPU-hours: P50 {forecast.gpu_hours.p50:.2f}  P90 {forecast.gpu_hours.p90:g}")
    if on_models is not None:
        _say(f"  on the cluster's GPU models, at {on_models.gpus} GPUs:")
        names: dict[str, list[str]] = {model_key(pool.gpu_model): [] for pool in pools}
        for pool in pools:
            names[model_key(pool.gpu_model)].append(pool.name)
        for model, pool_names in names.items():
            where = f"{model} (pool {', '.join(pool_names)})"
            if model in on_models.hours:
                hours = on_models.hours[model]
                _say(f"    {where}: hours P50 {hours.p50:.2f}  P90 {hours.p90:.2f}")
            else:
                _say(f"    {where}: left out: {on_models.left_out.get(model, 'not in its gpu_models')}")
    return 0
