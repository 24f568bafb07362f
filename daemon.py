"""The head-node daemon's tick: load -> plan -> check -> save, with the clock as an argument.

Today a tick plans one scenario file with a policy and writes the stamped plan file;
the daemon issue wraps this same ``run_once`` in APScheduler, reads live state and
forecasts instead of a file, and saves to SQL through ``storage/``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

from scheduler.policies import PolicyName, SolveOptions, plan
from scheduler.scenario_io import load_scenario, write_json_atomic

log = logging.getLogger(__name__)


def run_once(
    scenario_path: Path,
    out_dir: Path,
    now: datetime,
    *,
    policy: PolicyName = PolicyName.FAST,
    options: SolveOptions | None = None,
) -> Path:
    """Plan the scenario as of ``now`` and write ``plan-<now>.json``; returns its path."""
    instance = load_scenario(scenario_path)
    result = plan(instance, policy, options)  # checked against the contract before it returns
    path = out_dir / f"plan-{now:%Y%m%dT%H%M%S}.json"
    write_json_atomic(path, {**result.as_dict(), "planned_at": now.isoformat()})
    log.info("planned %s with %s at %s: objective %.1f", instance.name, policy, now, result.metrics.objective)
    return path
