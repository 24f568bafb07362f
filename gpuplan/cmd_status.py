"""``gpuplan status``: what runs now, the queue with planned starts, the last plan run."""

from __future__ import annotations

import argparse
import sys

from gpuplan.options import add_at, add_db, at_of, open_db, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_db(parser)
    add_at(parser, "the time to report as")
    parser.add_argument("--team", metavar="TEAM", help="only the jobs this team submitted")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from gpuplan.app.status import status
    from gpuplan.table import format_table, gpu_ranges

    store = open_db(args)
    try:
        now = status(store, at_of(args), team=args.team)
    finally:
        store.close()
    if args.json:
        print_json(now.as_dict())
        return 0
    say = sys.stdout.write
    say(f"status at {now.at.isoformat()}\n\nrunning:\n")
    say(
        format_table(
            ["job", "kind", "gpus", "since", "time limit"],
            [[r["job"], r["kind"], gpu_ranges(r["gpus"]), r["since"], _limit_text(r)] for r in now.running],
        )
        + "\n"
    )
    say("\nqueue:\n")
    say(
        format_table(
            ["job", "planned_start", "reason"],
            [[q["job"], q["planned_start"] or "-", q["reason"] or ""] for q in now.queue],
        )
        + "\n"
    )
    last = now.last_run
    say("\nlast run: " + ("none" if last is None else " ".join(f"{k}={v}" for k, v in last.items())) + "\n")
    if now.leader is not None:
        say(f"leader: {now.leader['host']} pid {now.leader['pid']}\n")
    return 0


def _limit_text(row: dict[str, object]) -> str:
    """A running job's time limit, marked once it is past (apps have none)."""
    limit = row.get("time_limit")
    if limit is None:
        return ""
    return f"{limit} OVERRUN: stop it or report it with `gpuplan done`" if row.get("overrun") else str(limit)
