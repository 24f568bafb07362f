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
#: The full mode's limit when ``--time-limit`` is not given.
TIME_LIMIT_S = 30.0
#: The options that only one policy reads: given for a plan without it, they would do nothing.
POLICY_OPTIONS = {"--time-limit": "full", "--workers": "full", "--budget-ms": "fast"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", type=Path, help="scenario file (JSON or YAML)")
    parser.add_argument("--policy", default=None, choices=POLICY_NAMES, help="default: fast")
    add_time_limit(
        parser,
        default=None,
        what=f"full mode's limit on the whole call (build, hint, solve; default {TIME_LIMIT_S:g})",
    )
    add_budget_ms(
        parser,
        "--budget-ms",
        default=None,
        what=f"fast mode's wall-time budget (default: the hot path's {HOT_PATH_BUDGET_MS:g} ms; the daemon's "
        f"plan cycle uses {PLAN_CYCLE_BUDGET_MS:g})",
    )
    add_workers(parser, default=None)
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
    from gpuplan.options import DEFAULT_WORKERS, MAX_WORKERS, integer_in
    from scheduler import lns
    from scheduler.model import checked_time_limit_s, fast_budget_ms
    from scheduler.policies import PolicyName, SolveOptions, plan

    time_limit_s = checked_time_limit_s(
        TIME_LIMIT_S if args.time_limit is None else args.time_limit, "--time-limit"
    )
    budget_ms = fast_budget_ms(args.budget_ms, "--budget-ms")
    workers = integer_in(
        "--workers", DEFAULT_WORKERS if args.workers is None else args.workers, 1, MAX_WORKERS
    )
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
    _refuse_unread_options(args, names)
    if args.out:
        check_writable(args.out, "--out")
    if args.png:
        from gpuplan.render import check_image_path

        check_image_path(args.png, "--png")
    instance = load_scenario(args.scenario)
    if "fast" in names and budget_ms >= lns.MIN_BUDGET_MS:
        lns.warm_up()  # the budget is for planning, not for loading CP-SAT
    options = SolveOptions(time_limit_s=time_limit_s, workers=workers, budget_ms=budget_ms)
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


def _refuse_unread_options(args: argparse.Namespace, names: list[str]) -> None:
    """A full-mode or fast-mode option given for a plan with no such policy would do nothing:
    refuse it, as ``--compare`` refuses ``--out``."""
    given = {"--time-limit": args.time_limit, "--workers": args.workers, "--budget-ms": args.budget_ms}
    for option, value in given.items():
        policy = POLICY_OPTIONS[option]
        if value is not None and policy not in names:
            raise InputError(
                option,
                f"given only when the {policy} policy plans (here: {', '.join(names)})",
                f"{value:g}",
                hint=f"{option} is read by the {policy} mode alone; drop it, or plan with --policy {policy}.",
            )
