"""The seven one-pool scenarios' plans, one JSON line each: to compare two trees byte for byte.

    PYTHONPATH=TREE python -m benchmarks.one_pool_plans > TREE.jsonl   # once per tree, then cmp

Each of ``benchmarks/[1-7]-*.json`` is planned by fast, fifo, priority-backfill and
fastest-free on the hot path's budget, and by fast on the simulation cycle's 150 ms without
CP-SAT, every budget counted in work (``wall_clock=False``), so the lines depend on the code
only. A one-pool cluster must plan as before whatever the pools code does (docs/pools.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from contract.scenario_io import load_scenario
from scheduler.policies import PolicyName, SolveOptions, plan

SCENARIOS = Path(__file__).resolve().parent
HOT_PATH = (PolicyName.FAST, PolicyName.FIFO, PolicyName.PRIORITY_BACKFILL, PolicyName.FASTEST_FREE)
CYCLE_BUDGET_MS = 150.0


def main() -> int:
    for path in sorted(SCENARIOS.glob("[1-7]-*.json")):
        instance = load_scenario(path)
        runs = [(policy, SolveOptions(wall_clock=False)) for policy in HOT_PATH]
        runs.append(
            (PolicyName.FAST, SolveOptions(budget_ms=CYCLE_BUDGET_MS, wall_clock=False, cp_sat=False))
        )
        for policy, options in runs:
            planned = plan(instance, policy, options)
            line = {
                "scenario": path.name,
                "policy": policy.value,
                "budget_ms": options.budget_ms,
                "grid": planned.grid,
                "metrics": repr(planned.metrics),
            }
            print(json.dumps(line, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
