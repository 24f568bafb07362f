"""``gpuplan ingest APP --traffic CSV``: store an app's hourly traffic; the daemon recalibrates on it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuplan.options import add_db, as_flags, open_db


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app", metavar="APP", help="the real-time app's id")
    parser.add_argument(
        "--traffic", type=Path, required=True, metavar="CSV", help="hourly counts: hour,requests"
    )
    parser.add_argument("--column", default=None, metavar="NAME", help="read column NAME as the hourly count")
    add_db(parser)


def run(args: argparse.Namespace) -> int:
    from features.traffic import load_traffic
    from gpuplan.app.tick import ingest_traffic, known_app

    traffic = load_traffic(args.traffic, requests_column=args.column)  # before the database is touched
    store = open_db(args)
    try:
        with as_flags({"app": "APP"}):
            known_app(store, args.app)
        hours = ingest_traffic(store, args.app, traffic)
    finally:
        store.close()
    sys.stdout.write(f"{args.app}: stored {hours} hours from {args.traffic}\n")
    return 0
