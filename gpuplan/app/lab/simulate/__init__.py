"""A simulated week: the daemon's own cycle, on a simulated clock, against the usual baselines.

The simulation is the service with a fake clock, not a second implementation of it.
Each policy gets a throwaway in-memory SQLite store seeded with the cluster, the apps,
their traffic history and demand profiles, and the in-memory cluster
(:class:`~gpuplan.app.adapters.executors.simulated.SimulatedCluster`). Then, for
every ``cycle_minutes`` of simulated time (:func:`~gpuplan.app.lab.simulate.loop.run_policy`):

1. jobs whose actual duration has elapsed are reported done (``jobs.finish``), and jobs
   whose submit time has come are submitted (``jobs.submit``, with its forecast and
   hot-path replan), in time order;
2. on the hour, the hour that just ended is added to each app's stored traffic and the
   profiles recalibrate (``tick.recalibrate``): a profile never sees the hour it plans;
3. the policy's cycle runs; commits go to the executor; a job that a commit starts is
   due to end ``actual_hours`` later, whatever its forecast said. A job that overruns
   stays pinned; one that ends early frees its GPUs at the next commit.

Policies (:class:`SimPolicy`):

- ``fast``: ``tick.plan_cycle`` as the daemon runs it (with ``tick.review`` every
  ``review_every_hours`` when asked).
- ``priority-backfill``: the same cycle with the contract's priority-backfill policy
  instead of the fast mode (peak-of-forecast reservations, re-planned every cycle).
- ``commit-all``: the ablation. The same cycle plans 24 hours and then every hour of
  that plan is committed as it comes, without re-planning until it runs out. Reality
  still wins: a job that ended early leaves its cells idle, a job that overran keeps its
  GPUs and what the plan put there waits (real-time apps move toward the plan within
  their swap caps; a blocked batch start waits for the next plan).
- with the config's teams (docs/teams.md, "Simulation"), every job submitted with its team's
  token: ``fast``, ``fifo`` and ``priority-backfill`` keep quotas and lend by P90 (constraint 7);
  ``fifo-quota`` and ``priority-backfill-quota`` the same baselines with hard quotas (no lending),
  ``fifo-lend`` and ``priority-backfill-lend`` with lending and no reclaim guarantee (the plan
  knows no teams: a job takes any idle GPU).
- ``fifo``: a FIFO cluster. Each app reserves its peak GPU demand of the previous week
  all day (re-read every midnight); batch jobs start in arrival order on the lowest free
  aligned block, and the head of the queue blocks the rest (the contract's ``fifo`` on
  the hour's state, of which only the current hour is committed).

Real-time served is measured against what the actual traffic needed
(``ceil(requests / requests_per_gpu_hour)``), never against the forecast.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplan.app.core.bridge import STEP
from gpuplan.app.lab.simulate.cycles import follow_plan
from gpuplan.app.lab.simulate.loop import PolicyRun, SimOptions, run_policy
from gpuplan.app.lab.simulate.measures import (
    IllegalCommitError,
    PolicyMetrics,
    busiest_day_grid,
    hourly,
    measure,
    week_grid,
)
from gpuplan.app.lab.simulate.setup import Setup, SimPolicy, load_realtime, prepare
from scheduler.check import check_plan

__all__ = [
    "STEP",
    "PolicyRun",
    "Setup",
    "SimOptions",
    "SimPolicy",
    "SimulationReport",
    "busiest_day_grid",
    "follow_plan",
    "hourly",
    "load_realtime",
    "prepare",
    "run_policy",
    "simulate",
    "week_grid",
]

log = logging.getLogger(__name__)

# --- the whole comparison ----------------------------------------------------------------------


@dataclass(frozen=True)
class SimulationReport:
    setup: Setup
    options: SimOptions
    runs: Mapping[SimPolicy, PolicyRun]
    metrics: Mapping[SimPolicy, PolicyMetrics]

    def _app_pools(self, app_id: str) -> dict[str, Any]:
        """Where an app serves: its ``pool``, or for an app of several GPU models its ``pools``
        (pool -> requests per GPU-hour there), of which each plan chooses one; none on one pool."""
        rates = self.setup.app_rates.get(app_id)
        if self.setup.pooled and rates:
            return {"pools": dict(rates)}
        pool = self.setup.app_pool(app_id)
        return {} if pool is None else {"pool": pool.name}

    def as_json(self) -> dict[str, Any]:
        cluster: dict[str, Any] = {
            "gpus": self.setup.cluster.gpus,
            "apps": [
                {
                    "id": app.id,
                    "priority": app.priority,
                    "swap_cap": app.swap_cap,
                    "requests_per_gpu_hour": app.requests_per_gpu_hour,
                    "headroom": app.headroom,
                    **self._app_pools(app.id),
                }
                for app in self.setup.apps
            ],
        }
        if self.setup.pooled:
            cluster["pools"] = [
                {"name": p.name, "gpu_model": p.gpu_model, "gpus": p.gpus, "first_gpu": p.first_gpu}
                for p in self.setup.pools
            ]
        if self.setup.teams:
            cluster["teams"] = [
                {"name": t.name, "quota": dict(t.quota), "weight": t.weight} for t in self.setup.teams
            ]
        return {
            "cluster": cluster,
            "policies": {policy.value: m.as_json() for policy, m in self.metrics.items()},
        }


def simulate(
    setup: Setup,
    policies: Sequence[SimPolicy],
    options: SimOptions,
    *,
    progress: Callable[[int], object] = lambda hours: None,
) -> SimulationReport:
    """Every policy on the same jobs and traffic; each run's commits are checked against the contract."""

    runs: dict[SimPolicy, PolicyRun] = {}
    metrics: dict[SimPolicy, PolicyMetrics] = {}
    for policy in policies:
        log.info("simulating %s over %d hours", policy.value, setup.hours)
        run = run_policy(setup, policy, options, progress=progress)
        instance, grid = week_grid(setup, run)
        violations = check_plan(instance, grid)
        if violations:
            listing = "\n".join(str(v) for v in violations[:10])
            raise IllegalCommitError(f"{policy.value} committed illegal hours:\n{listing}")
        runs[policy] = run
        metrics[policy] = measure(setup, run)
    return SimulationReport(setup=setup, options=options, runs=runs, metrics=metrics)
