"""``gpuplan status``: what runs now, the queue with planned starts, the last plan run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.options import add_at, add_db, at_of, open_db, print_json

if TYPE_CHECKING:
    from gpuplan.app.views.status import Status


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_db(parser)
    add_at(parser, "the time to report as")
    parser.add_argument("--team", metavar="TEAM", help="only the jobs this team submitted")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="the daemon's config: with cluster.pools, each pool's GPUs and each job's pool; "
        "with teams, each team's quota, use, loans and share",
    )
    parser.add_argument(
        "--pool", metavar="NAME", help="only that pool of --config's cluster.pools: its count and its rows"
    )
    parser.add_argument("--json", action="store_true", help="print the status as JSON")


def run(args: argparse.Namespace) -> int:
    from contract.scenario import DEFAULT_HALF_LIFE_DAYS
    from gpuplan.app.core.config import load_config
    from gpuplan.app.views.status import checked_pool, status
    from gpuplan.table import format_table, gpu_ranges

    config = None if args.config is None else load_config(args.config)
    pools = () if config is None else config.pools
    checked_pool(args.pool, pools, "--pool")
    store = open_db(args)
    try:
        now = status(
            store,
            at_of(args),
            team=args.team,
            pools=pools,
            teams=() if config is None else config.teams,
            half_life_days=DEFAULT_HALF_LIFE_DAYS if config is None else config.half_life_days,
        ).of_pool(args.pool)
    finally:
        store.close()
    if args.at is not None:
        _check_not_before(now)
    if args.json:
        print_json(now.as_dict())
        return 0
    say = sys.stdout.write
    say(f"status at {now.at.isoformat()}\n\n")
    if now.pools is not None:
        say("pools:\n")
        columns = ["pool", "gpu_model", "gpus", "batch", "realtime", "down", "free"]
        say(format_table(columns, [[p[c] for c in columns] for p in now.pools]) + "\n\n")
    if now.teams is not None:
        _say_teams(now.teams)
    pooled = ["pool"] if now.pools is not None else []

    def pool_of(row: dict[str, object]) -> list[object]:
        return [row["pool"] or "-"] if pooled else []

    say("running:\n")
    say(
        format_table(
            ["job", "kind", *pooled, "gpus", "since", "time limit"],
            [
                [r["job"], r["kind"], *pool_of(r), gpu_ranges(r["gpus"]), r["since"], _limit_text(r)]
                for r in now.running
            ],
        )
        + "\n"
    )
    say("\nqueue:\n")
    say(
        format_table(
            ["job", *pooled, "gpus", "priority", "planned_start", "reason"],
            [
                [
                    q["job"],
                    *pool_of(q),
                    "-" if q["gpus"] is None else q["gpus"],
                    f"{q['priority']:g}",
                    q["planned_start"] or "-",
                    q["reason"] or "",
                ]
                for q in now.queue
            ],
        )
        + "\n"
    )
    last = now.last_run
    say("\nlast run: " + ("none" if last is None else " ".join(f"{k}={v}" for k, v in last.items())) + "\n")
    if now.leader is not None:
        say(f"leader: {now.leader['host']} pid {now.leader['pid']}\n")
    gpu_map = now.gpu_map
    if gpu_map is not None:
        say(
            f"\ngpu map (Slurm partition {gpu_map['partition']}, read {gpu_map['read_at']}; "
            "GPU id = first + IDX):\n"
        )
        say(
            format_table(
                ["node", "first", "gpus"],
                [[n["node"], n["first"], gpu_ranges(n["gpus"])] for n in gpu_map["nodes"]],
            )
            + "\n"
        )
    return 0


def _check_not_before(now: Status) -> None:
    """Refuse an ``--at`` before what the status shows: a job running since later, or the last
    run made later. The status is what is stored now, never the past."""
    from contract.errors import InputError
    from contract.times import parse_time

    events = [(parse_time(row["since"], "since"), f"{row['job']} running since") for row in now.running]
    if now.last_run is not None:
        events.append((parse_time(now.last_run["created_at"], "created_at"), "the last plan run made at"))
    if not events:
        return
    latest, what = max(events)
    if now.at < latest:
        raise InputError(
            "--at",
            f"a time at or after the stored state it reports ({what} {latest.isoformat()})",
            now.at.isoformat(),
            hint="`gpuplan status` shows what the database holds now, not an earlier state.",
        )


def _limit_text(row: dict[str, object]) -> str:
    """A running job's time limit, marked once it is past (apps have none)."""
    limit = row.get("time_limit")
    if limit is None:
        return ""
    return f"{limit} OVERRUN: stop it or report it with `gpuplan done`" if row.get("overrun") else str(limit)


def _say_teams(teams: list[dict[str, Any]]) -> None:
    """The teams' rows: one line a team (its queue and share), then one a team and GPU model."""
    from gpuplan.table import format_table

    say = sys.stdout.write
    half_life = teams[0]["share"]["half_life_days"] if teams else 0
    say(f"teams (use decayed with a {half_life:g}-day half-life):\n")
    columns = [
        "team",
        "weight",
        "queued jobs",
        "queued gpus",
        "gpu-hours",
        "use share",
        "weight share",
        "factor",
    ]
    rows = [
        [
            t["team"],
            f"{t['weight']:g}",
            t["queued"]["jobs"],
            t["queued"]["gpus"],
            f"{t['share']['gpu_hours']:g}",
            f"{t['share']['used']:.1%}",
            f"{t['share']['weight']:.1%}",
            f"{t['share']['factor']:.3f}",
        ]
        for t in teams
    ]
    say(format_table(columns, rows) + "\n\n")
    columns = ["team", "gpu_model", "quota", "in use", "lent", "borrowed"]
    rows = [
        [t["team"], model, quota, t["in_use"][model], t["lent"][model], t["borrowed"][model]]
        for t in teams
        for model, quota in t["quota"].items()
    ]
    say(format_table(columns, rows) + "\n\n")
