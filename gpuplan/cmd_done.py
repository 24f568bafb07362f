"""``gpuplan done JOB_ID``: a job finished; it enters the job history and frees its GPUs."""

from __future__ import annotations

import argparse
import sys

from gpuplan.app.cycle.finish import OUTCOMES
from gpuplan.options import add_at, add_db, at_of, open_db

#: The finish use case's fields under this command's names.
FLAGS = {"job_id": "JOB_ID", "outcome": "--outcome"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB_ID", help="the id the job was submitted with")
    add_db(parser)
    add_at(parser, "when it ended")
    parser.add_argument(
        "--outcome",
        choices=list(OUTCOMES),
        default="ok",
        help="how it ended (default ok; a job that never started ends failed or cancelled)",
    )


def run(args: argparse.Namespace) -> int:
    from gpuplan.app.cycle.finish import finish

    at = at_of(args)
    store = open_db(args)
    try:
        job = finish(store, args.job, at, OUTCOMES[args.outcome])
    finally:
        store.close()
    sys.stdout.write(f"{job.id}: {job.state.value} at {at.isoformat()} ({args.outcome})\n")
    return 0
