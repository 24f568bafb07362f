"""Teams in the fast mode and the baselines: plan as without teams, at each job's fair-share
worth, then make the plan keep constraint 7 (:mod:`scheduler.lending`) by construction.

1. :func:`weighted`: the instance without its teams, each batch job's priority times its team's
   fair-share factor (:meth:`~contract.scenario.Instance.share_factor`), so the objective the
   planner maximises is the teams' (docs/teams.md, "Fair share").
2. :func:`legalise`: while some step breaches constraint 7, the least valuable queued job over
   its team's cap there leaves the plan (taking a job out never breaks constraints 1-6, and
   never raises what any team holds beyond its cap); then each job taken out, the most valuable
   first, goes back at the earliest start and lowest aligned block of its pools that is free and
   keeps constraint 7; then, if any was taken out, each placed job, the earliest first, moves to
   the earliest start before its own on its pool that keeps every constraint (earlier is worth
   more), and what is still out is tried again.

Without teams nothing here runs: the callers plan as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from contract.scenario import BatchJob, Instance, Pool, block_mask
from scheduler import baselines
from scheduler.lending import ModelFrame, excesses, frames
from scheduler.metrics import score
from scheduler.model import Allocation, Placement, batch_masks, build_grid

#: At most this many (start, pool) trials per job put back (each counts constraint 7 anew).
MAX_TRIALS_PER_JOB = 128


def weighted(instance: Instance) -> Instance:
    """``instance`` without teams, each batch job's priority times its team's fair-share factor."""
    return replace(
        instance,
        teams=(),
        batch_jobs=tuple(
            replace(job, priority=job.priority * instance.share_factor(job)) for job in instance.batch_jobs
        ),
    )


def planned(instance: Instance, plan: Callable[[Instance], Allocation]) -> Allocation:
    """``plan`` (a policy that knows no teams) on the :func:`weighted` instance, made legal."""
    return legalise(instance, plan(weighted(instance)))


#: The baselines no fast plan scores below; with teams each is repaired as the fast plan is
#: (the repair may keep less of one plan than of another).
FLOORS: tuple[Callable[[Instance], Allocation], ...] = (
    baselines.fifo,
    baselines.fifo_backfill,
    baselines.priority_backfill,
)


def planned_best(instance: Instance, plans: list[Callable[[Instance], Allocation]]) -> Allocation:
    """The best (:func:`best_of`, the first at a tie) of ``plans`` and :data:`FLOORS`, each
    :func:`planned`."""
    return best_of(instance, [planned(instance, plan) for plan in [*plans, *FLOORS]])


def best_of(instance: Instance, allocations: list[Allocation]) -> Allocation:
    """The first of ``allocations`` unless a later one scores higher (by more than rounding)."""
    scored = [score(instance, build_grid(instance, a)).objective for a in allocations]
    best = 0
    for index, objective in enumerate(scored):
        if objective > scored[best] + 1e-9 * max(1.0, abs(scored[best])):
            best = index
    return allocations[best]


def legalise(instance: Instance, allocation: Allocation) -> Allocation:
    """``allocation`` keeping constraint 7: jobs over their team's cap taken out where lending
    does not allow them, then put back where it does."""
    models = frames(instance)
    if not models:
        return allocation
    batch = dict(allocation.batch)
    taken_out: list[BatchJob] = []
    while True:
        breaches = excesses(instance, batch, models)
        if not breaches:
            break
        candidates = [job for job in instance.queued_jobs if job.id in breaches[0].jobs and job.id in batch]
        victim = min(
            candidates, key=lambda job: (_worth(instance, job), -batch[job.id].start_step, job.order)
        )
        del batch[victim.id]
        taken_out.append(victim)
    _put_back(instance, allocation, batch, taken_out, models)
    if taken_out:  # what was taken out may have held others back: each placed job as early as it may
        for job in sorted(
            (j for j in instance.queued_jobs if j.id in batch),
            key=lambda j: (batch[j.id].start_step, j.order),
        ):
            current = batch.pop(job.id)
            pool = instance.pool_of_gpu(current.first_gpu)  # on its pool: another may be slower
            earlier = _first_legal(
                instance, allocation, batch, job, models, before=current.start_step, pools=(pool,)
            )
            batch[job.id] = current if earlier is None else earlier
        _put_back(instance, allocation, batch, [job for job in taken_out if job.id not in batch], models)
    return Allocation(batch=batch, realtime=allocation.realtime)


def _put_back(
    instance: Instance,
    allocation: Allocation,
    batch: dict[str, Placement],
    jobs: list[BatchJob],
    models: list[ModelFrame],
) -> None:
    """Each of ``jobs``, the most valuable first, into ``batch`` at its earliest legal place, if any."""
    for job in sorted(jobs, key=lambda j: (-_worth(instance, j), j.order)):
        placement = _first_legal(instance, allocation, batch, job, models)
        if placement is not None:
            batch[job.id] = placement


def _worth(instance: Instance, job: BatchJob) -> float:
    return job.priority * instance.share_factor(job) * job.gpus


def _first_legal(
    instance: Instance,
    allocation: Allocation,
    batch: dict[str, Placement],
    job: BatchJob,
    models: list[ModelFrame],
    *,
    before: int | None = None,
    pools: tuple[Pool, ...] | None = None,
) -> Placement | None:
    """The earliest start (before ``before``, if given), then lowest aligned block of ``job``'s
    pools (or ``pools``), free of everything in the plan and keeping constraint 7; None when there is none
    (within :data:`MAX_TRIALS_PER_JOB`)."""
    busy = batch_masks(instance, batch)
    for held in allocation.realtime.values():
        busy = [b | m for b, m in zip(busy, held, strict=True)]
    trials = 0
    for start in range(job.release_step, instance.horizon_steps if before is None else before):
        for pool in instance.allowed_pools(job) if pools is None else pools:
            # The lowest free block only: constraint 7 counts a pool's GPUs, not which ones.
            first = next(
                (
                    first
                    for first in range(pool.first_gpu, pool.end_gpu - job.gpus + 1, job.gpus)
                    if not any(
                        busy[t] & block_mask(first, job.gpus)
                        for t in range(start, instance.run_end(job, start, first))
                    )
                ),
                None,
            )
            if first is None:
                continue
            trials += 1
            placement = Placement(start_step=start, first_gpu=first)
            if not excesses(instance, {**batch, job.id: placement}, models):
                return placement
            if trials >= MAX_TRIALS_PER_JOB:
                return None
    return None
