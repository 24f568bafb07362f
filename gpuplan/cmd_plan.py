"""``gpuplan plan SCENARIO --policy NAME``: write the plan file (CONTRACT.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contract.errors import InputError
from gpuplan.table import comparison_table

POLICY_NAMES = ("fast", "full", "fifo", "fifo-backfill", "priority-backfill")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", type=Path, help="scenario file (JSON or YAML)")
    parser.add_argument("--policy", default=None, choices=POLICY_NAMES, help="default: fast")
    parser.add_argument(
        "--time-limit", type=float, default=30.0, metavar="SECONDS", help="full mode's limit (0 < S <= 3600)"
    )
    parser.add_argument("--workers", type=int, default=2, help="CP-SAT workers in full mode (1-64)")
    parser.add_argument("--out", type=Path, metavar="PLAN.json", help="write here instead of stdout")
    parser.add_argument("--png", type=Path, metavar="GRID.png", help="also draw the plan")
    parser.add_argument(
        "--compare",
        metavar="P1,P2,...",
        help="plan with several policies; print their metrics side by side (and stack their grids in "
        "--png); not with --policy or --out",
    )


def parse_policies(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in POLICY_NAMES:
            raise InputError("--compare", f"a comma-separated list of {list(POLICY_NAMES)}", name)
    if not names:
        raise InputError("--compare", "at least one policy name", text)
    return names


def run(args: argparse.Namespace) -> int:
    from contract.files import check_writable
    from gpuplan.options import MAX_WORKERS, integer_in, time_limit
    from scheduler.policies import PolicyName, SolveOptions, plan
    from scheduler.scenario_io import load_scenario, write_json_atomic

    time_limit(args.time_limit)
    integer_in("--workers", args.workers, 1, MAX_WORKERS)
    if args.compare:
        # A comparison is a table, not a plan file; one plan per file keeps the format one.
        for option, value in (("--policy", args.policy), ("--out", args.out)):
            if value is not None:
                raise InputError(
                    option,
                    "absent with --compare",
                    str(value),
                    hint="--compare prints a table; run `gpuplan plan --policy P --out F` for a plan file.",
                )
    names = parse_policies(args.compare) if args.compare else [args.policy or "fast"]
    if args.out:
        check_writable(args.out, "--out")
    if args.png:
        from scheduler.render import check_image_path

        check_image_path(args.png, "--png")
    instance = load_scenario(args.scenario)
    options = SolveOptions(time_limit_s=args.time_limit, workers=args.workers)
    plans = [plan(instance, PolicyName(name), options) for name in names]
    if args.png:
        from scheduler.render import draw_plans

        draw_plans(instance, plans, args.png)
    if args.compare:
        print(comparison_table(plans))
        return 0
    payload = plans[0].as_dict()
    if args.out:
        write_json_atomic(args.out, payload, "--out")
    else:
        json.dump(payload, sys.stdout)
        sys.stdout.write("\n")
    return 0
