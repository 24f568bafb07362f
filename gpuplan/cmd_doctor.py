"""``gpuplan doctor``: the config, the database, the models, the executor, Prometheus and the clock,
one line a check (ok, warn or fail, and why); exit 1 when any check fails."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuplan.options import add_db


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="the daemon's YAML config (default: the demo's)"
    )
    parser.add_argument("--models", type=Path, help="models folder (default: the config's)")
    add_db(parser)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace
    from datetime import UTC, datetime

    from contract.errors import InputError
    from gpuplan.app.adapters.executors.registry import slurm_partition
    from gpuplan.app.core.config import ServiceConfig, demo_config, load_config
    from gpuplan.app.lab.seed import check_traffic
    from gpuplan.app.views.doctor import diagnose, failed

    config: ServiceConfig | None = None
    error = None
    try:
        config = load_config(args.config) if args.config else demo_config()
        check_traffic(config)
    except (InputError, OSError) as problem:
        config, error = None, str(problem)
    if config is not None and args.models is not None:
        config = replace(config, models_dir=args.models)
    source = str(args.config) if args.config else "no --config: the demo's defaults"
    cluster = None if config is None else slurm_partition(config)
    checks = diagnose(config, error, source, args.db, datetime.now(UTC), cluster=cluster)
    for check in checks:
        sys.stdout.write(check.line() + "\n")
    return 1 if failed(checks) else 0
