"""Services that may serve on several pools: one pool per service per plan, chosen by value.

A service with ``demand_by_pool`` (docs/contract.md, "Pools") serves on one of its pools
for the whole plan, with its demand there, each served GPU-step worth its priority times
its worth there (:meth:`~contract.scenario.RealtimeJob.worth_on`). Once each such service
has its pool, the instance is one of one-pool services (:meth:`Instance.serving_on`), which
every policy plans as it always has. The choice, a coordinate ascent:

1. every service starts on its default pool (its running set's, else where it needs the
   fewest GPU-steps: the pool a person would put it on);
2. each service not pinned by a running set, by priority, is tried on each other of its
   pools; a trial plans the whole instance (``objective``) and is kept when it scores higher;
3. the instance of the best choice is returned.

A running service stays on its pool: moving it would stop every replica within the swap cap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from contract.scenario import Instance

log = logging.getLogger(__name__)


def chosen(instance: Instance, objective: Callable[[Instance], float]) -> Instance:
    """``instance`` with each service of several pools on the pool where the plan
    ``objective`` finds the most value (its default where none is better)."""
    choice = {
        job.id: job.pool or instance.pools[0].name for job in instance.realtime_jobs if job.demand_by_pool
    }
    best = instance.serving_on(choice)
    best_score = objective(best)
    for job in sorted(instance.realtime_jobs, key=lambda j: -j.priority):
        running = instance.running_realtime.get(job.id)
        if job.demand_by_pool is None or (running is not None and running.gpus):
            continue  # a service holding GPUs serves on their pool
        for pool in job.demand_by_pool:
            if pool == choice[job.id]:
                continue
            trial = {**choice, job.id: pool}
            candidate = instance.serving_on(trial)
            candidate_score = objective(candidate)
            if candidate_score > best_score + 1e-9:
                choice, best, best_score = trial, candidate, candidate_score
    log.debug("services on pools: %s", choice)
    return best
