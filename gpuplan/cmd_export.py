"""``gpuplan export [RUN_ID|latest] --out DIR``: a stored run as scenario.json, plan.json, run.json."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuplan.options import add_db, open_db

#: The run lookup's field under this command's name.
FLAGS = {"run_id": "RUN_ID"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_id", nargs="?", default="latest", metavar="RUN_ID|latest", help="the run (default latest)"
    )
    add_db(parser)
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="folder to write the three files to"
    )


def run(args: argparse.Namespace) -> int:
    from contract.errors import InputError
    from gpuplan.app.views.status import export_run, find_run

    if args.out.exists() and not args.out.is_dir():
        raise InputError("--out", "a folder (new or existing)", str(args.out))
    store = open_db(args)
    try:
        run_ = find_run(store, args.run_id)
    finally:
        store.close()
    for path in export_run(run_, args.out):
        sys.stdout.write(f"wrote {path}\n")
    return 0
