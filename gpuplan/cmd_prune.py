"""``gpuplan prune --keep-days N``: delete plan runs and their forecasts older than N days
(commits and the job history are never pruned)."""

from __future__ import annotations

import argparse
import sys

from gpuplan.options import add_at, add_db, at_of, open_db

FLAGS = {"keep_days": "--keep-days"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gpuplan.app.cycle.prune import DEFAULT_KEEP_DAYS

    parser.add_argument(
        "--keep-days",
        type=int,
        default=DEFAULT_KEEP_DAYS,
        metavar="N",
        help=f"keep the runs of the last N days (default {DEFAULT_KEEP_DAYS})",
    )
    add_db(parser)
    add_at(parser, "the time the N days count back from")


def run(args: argparse.Namespace) -> int:
    from gpuplan.app.cycle.prune import checked_keep_days, prune

    checked_keep_days(args.keep_days, "--keep-days")  # before the database is touched
    now = at_of(args)
    store = open_db(args)
    try:
        report = prune(store, now, args.keep_days)
    finally:
        store.close()
    sys.stdout.write(report.line() + "\n")
    return 0
