"""``gpuplan plan SCENARIO --policy NAME``: write the plan file (CONTRACT.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contract.errors import InputError
from gpuplan.options import add_budget_ms, add_time_limit, add_workers
from gpuplan.table import comparison_table
from scheduler.model import HOT_PATH_BUDGET_MS, PLAN_CYCLE_BUDGET_MS

POLICY_NAMES = ("fast", "full", "fifo", "fifo-backfill", "priority-backfill")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", type=Path, help="scenario file (JSON or YAML)")
    parser.add_argument("--policy", default=None, choices=POLICY_NAMES, help="default: fast")
    add_time_limit(parser, default=30.0, what="full mode's limit on the whole call (build, hint, solve)")
    add_budget_ms(
        parser,
        "--budget-ms",
        default=None,
        what=f"fast mode's wall-time budget (default: the hot path's {HOT_PATH_BUDGET_MS:g} ms; the daemon's "
        f"plan cycle uses {PLAN_CYCLE_BUDGET_MS:g})",
    )
    add_workers(parser)
    parser.add_argument("--out", type=Path, metavar="PLAN.json", help="write here instead of stdout")
    parser.add_argument("--png", type=Path, metavar="GRID.png", help="also draw the plan")
    parser.add_argument(
        "--compare",
        metavar="P1,P2,...",
        help="plan with several policies; print their metrics side by side (and stack their grids in --png)",
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
    from contract.scenario_io import load_scenario, write_json_atomic
    from gpuplan.options import MAX_WORKERS, integer_in
    from scheduler import lns
    from scheduler.model import checked_budget_ms, checked_time_limit_s
    from scheduler.policies import PolicyName, SolveOptions, plan

    time_limit_s = checked_time_limit_s(args.time_limit, "--time-limit")
    budget_ms = (
        HOT_PATH_BUDGET_MS if args.budget_ms is None else checked_budget_ms(args.budget_ms, "--budget-ms")
    )
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
        from gpuplan.render import check_image_path

        check_image_path(args.png, "--png")
    instance = load_scenario(args.scenario)
    if "fast" in names and budget_ms >= lns.MIN_BUDGET_MS:
        lns.warm_up()  # the budget is for planning, not for loading CP-SAT
    options = SolveOptions(time_limit_s=time_limit_s, workers=args.workers, budget_ms=budget_ms)
    plans = [plan(instance, PolicyName(name), options) for name in names]
    if args.png:
        from gpuplan.render import draw_plans

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
