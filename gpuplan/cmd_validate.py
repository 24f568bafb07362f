"""``gpuplan validate SCENARIO PLAN.json``: exit 0 when legal, else 1 and one line per violation."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", type=Path)
    parser.add_argument("plan", type=Path, metavar="PLAN.json")


def run(args: argparse.Namespace) -> int:
    from scheduler.check import check_plan
    from scheduler.metrics import score
    from scheduler.scenario_io import load_scenario, read_plan_grid

    instance = load_scenario(args.scenario)
    grid = read_plan_grid(args.plan)
    violations = check_plan(instance, grid)
    for violation in violations:
        print(violation)
    if violations:
        return 1
    m = score(instance, grid)
    print(
        f"legal: utilization {m.utilization:.4f}, value {m.value:.3f}, penalty {m.penalty:.3f}, "
        f"objective {m.objective:.3f}, rt_coverage {m.rt_coverage:.4f}, "
        f"completed {m.completed}, unscheduled {m.unscheduled}"
    )
    return 0
