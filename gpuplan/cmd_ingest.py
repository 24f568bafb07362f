"""``gpuplan ingest APP --traffic CSV``: store an app's hourly traffic; the daemon recalibrates on it.

A row for the hour in progress (the hour of ``--at``) is what the app served so far in it:
when it outruns the app's GPUs, the hot path re-plans at once and amends the hour.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuplan.options import add_at, add_db, as_flags, at_of, open_db
from gpuplan.table import count_of


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app", metavar="APP", help="the real-time app's id")
    parser.add_argument(
        "--traffic", type=Path, required=True, metavar="CSV", help="hourly counts: hour,requests"
    )
    parser.add_argument("--column", default=None, metavar="NAME", help="read column NAME as the hourly count")
    add_db(parser)
    add_at(parser, "the time of the counts (a row for its hour is the hour in progress)")
    parser.add_argument("--config", type=Path, metavar="FILE", help="the daemon's config (models, executor)")


def run(args: argparse.Namespace) -> int:
    from features.traffic import load_traffic
    from gpuplan.app.adapters.executors.registry import make_executor
    from gpuplan.app.core.config import demo_config, load_config
    from gpuplan.app.cycle.tick import known_app
    from gpuplan.app.cycle.traffic import answer_surge, ingest
    from gpuplan.app.service import holding

    config = load_config(args.config) if args.config else demo_config()
    traffic = load_traffic(args.traffic, requests_column=args.column)  # before the database is touched
    now = at_of(args)
    store = open_db(args)
    try:
        with as_flags({"app": "APP"}):
            known_app(store, args.app)
        stored = ingest(store, args.app, traffic, now)
        surge = None
        if stored.observed is not None:
            with holding(store, "plan"):
                surge = answer_surge(store, now, config, make_executor(config, store))
    finally:
        store.close()
    sys.stdout.write(f"{args.app}: stored {stored.hours} hours from {args.traffic}\n")
    if stored.observed is not None:
        seen = stored.observed
        sys.stdout.write(
            f"{args.app}: {seen.requests:g} requests in the first {seen.minutes:.0f} minutes "
            f"of {seen.hour.isoformat()} (the hour in progress)\n"
        )
    if surge is not None:
        added = (
            "none"
            if surge.amendment is None
            else ", ".join(f"{a.job} +{count_of(len(a.gpus), 'GPU')}" for a in surge.amendment.assignments)
        )
        sys.stdout.write(f"surge: re-planned (run {surge.report.run_id}); the hour amended: {added}\n")
    return 0
