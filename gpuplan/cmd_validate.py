"""``gpuplan validate SCENARIO PLAN.json``: exit 0 when legal, else 1 and one line per violation.

A legal plan whose stored ``metrics`` disagree with the ones recomputed from its grid
is still legal (exit 0), but each disagreeing metric gets a ``warning:`` line: the
file's numbers should not be trusted over the grid's.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

#: Stored metrics are floats written by gpuplan or by hand; closer than this agrees.
METRIC_TOLERANCE = 1e-6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", type=Path, metavar="SCENARIO", help="the scenario file (JSON or YAML)")
    parser.add_argument("plan", type=Path, metavar="PLAN.json", help="the plan file to check against it")


def run(args: argparse.Namespace) -> int:
    from contract.scenario_io import load_scenario, read_plan
    from scheduler.check import check_plan
    from scheduler.metrics import score

    instance = load_scenario(args.scenario)
    stored = read_plan(args.plan)
    violations = check_plan(instance, stored.grid)
    for violation in violations:
        print(violation)
    if violations:
        return 1
    m = score(instance, stored.grid)
    print(
        f"legal: utilization {m.utilization:.4f}, value {m.value:.3f}, penalty {m.penalty:.3f}, "
        f"objective {m.objective:.3f}, rt_coverage {m.rt_coverage:.4f}, "
        f"completed {m.completed}, unscheduled {m.unscheduled}, rt_moves {m.rt_moves}"
    )
    recomputed = m.as_dict()
    for name, value in (stored.metrics or {}).items():
        if not math.isclose(value, recomputed[name], rel_tol=METRIC_TOLERANCE, abs_tol=METRIC_TOLERANCE):
            print(f"warning: stored metric {name} is {value:g}; the grid gives {recomputed[name]:g}")
    return 0
