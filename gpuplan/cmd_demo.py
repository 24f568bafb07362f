"""``gpuplan demo`` (what ``make run`` runs): every policy on the bundled scenario, side by side."""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

from gpuplan.options import add_time_limit
from gpuplan.table import comparison_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", type=Path, help="scenario file (default: the bundled demo-mixed)")
    add_time_limit(parser, default=10.0, what="full mode's limit")
    parser.add_argument("--png", type=Path, metavar="GRIDS.png", help="draw the plans stacked")


def run(args: argparse.Namespace) -> int:
    from contract.scenario_io import load_scenario
    from scheduler.model import checked_time_limit_s
    from scheduler.policies import CONTRACT_POLICIES, SolveOptions, plan

    checked_time_limit_s(args.time_limit, "--time-limit")
    if args.png:
        from gpuplan.render import check_image_path

        check_image_path(args.png, "--png")
    if args.scenario:
        instance = load_scenario(args.scenario)
    else:
        bundled = resources.files("gpuplan") / "scenarios" / "demo-mixed.json"
        with resources.as_file(bundled) as path:
            instance = load_scenario(path)
    options = SolveOptions(time_limit_s=args.time_limit)
    plans = [plan(instance, name, options) for name in CONTRACT_POLICIES]
    print(
        f"scenario {instance.name}: {instance.gpus} GPUs, {instance.horizon_steps} steps, "
        f"{len(instance.batch_jobs)} batch and {len(instance.realtime_jobs)} real-time jobs"
    )
    print(comparison_table(plans))
    if args.png:
        from gpuplan.render import draw_plans

        draw_plans(instance, plans, args.png)
        print(f"grids drawn to {args.png}")
    return 0
