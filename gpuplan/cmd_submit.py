"""``gpuplan submit JOB.yaml``: validate, forecast, queue, and answer with the planned start."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuplan.options import add_at, add_db, at_of, open_db, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", type=Path, metavar="JOB.yaml", help="job spec: id, kind, priority, features")
    add_db(parser)
    add_at(parser, "submission time")
    parser.add_argument("--config", type=Path, metavar="FILE", help="the daemon's config (models, budgets)")
    parser.add_argument("--models", type=Path, help="models folder (default ./models)")
    parser.add_argument(
        "--team", metavar="NAME", help="the job's team: one of the config's teams (as the spec's `team`)"
    )
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from contract.files import read_mapping
    from gpuplan.app.adapters.executors.registry import slurm_partition
    from gpuplan.app.core.config import demo_config, load_config
    from gpuplan.app.jobs.submit import submit
    from gpuplan.table import count_of, gpu_ranges

    config = load_config(args.config) if args.config else demo_config()
    if args.models is not None:
        config = replace(config, models_dir=args.models)
    document = read_mapping(
        args.spec, "JOB", expected="a mapping of job fields (id, kind, priority, ...)"
    )  # before the database: a bad file touches nothing
    now = at_of(args)
    store = open_db(args)
    try:
        default_id = f"{args.spec.stem}-{now:%Y%m%dT%H%M%S}"  # when the spec names none
        held = slurm_partition(config)  # a spec with a slurm: section is submitted to Slurm held
        result = submit(
            store,
            document,
            now,
            config,
            source=str(args.spec),
            default_id=default_id,
            held=held,
            team=args.team,
        )
    finally:
        store.close()
    if args.json:
        print_json(result.as_dict())
        return 0
    where = f"no start in the plan: {result.reason}"
    if result.planned_start is not None and result.first_gpu is not None:
        gpus = range(result.first_gpu, result.first_gpu + result.gpus)
        where = (
            f"planned at {result.planned_start.isoformat()} on "
            f"{'GPU' if result.gpus == 1 else 'GPUs'} {gpu_ranges(gpus)}"
        )
        if result.promised_start is not None:
            where += f"; promised start {result.promised_start.isoformat()}"
            if result.promised_start > result.planned_start:
                where += f"\n  why: {result.reason}"  # the promise's why is in the reason
    sys.stdout.write(
        f"queued {result.job}: {count_of(result.gpus, 'GPU')}, P50 {result.hours_p50:.2f} h, "
        f"P90 {result.hours_p90:.2f} h; {where}\n"
    )
    return 0
