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
from scheduler.lending import Ledger, ModelFrame, frames
from scheduler.metrics import score
from scheduler.model import Allocation, Placement, batch_masks, build_grid

#: At most this many (start, pool) trials per job put back (each counts constraint 7 anew).
MAX_TRIALS_PER_JOB = 128


def weighted(instance: Instance) -> Instance:
    """``instance`` without teams (its jobs of none), each batch job's priority times its team's
    fair-share factor."""
    return replace(
        instance,
        teams=(),
        batch_jobs=tuple(
            replace(job, priority=job.priority * instance.share_factor(job), team=None)
            for job in instance.batch_jobs
        ),
        realtime_jobs=tuple(replace(job, team=None) for job in instance.realtime_jobs),
    )


def planned(
    instance: Instance,
    plan: Callable[[Instance], Allocation],
    plain: Instance | None = None,
    models: list[ModelFrame] | None = None,
) -> Allocation:
    """``plan`` (a policy that knows no teams) on the :func:`weighted` instance (``plain``, when
    given), made legal (with the lending frames ``models``, when given)."""
    return legalise(instance, plan(weighted(instance) if plain is None else plain), models)


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
    plain, models = weighted(instance), frames(instance)
    return best_of(instance, [planned(instance, plan, plain, models) for plan in [*plans, *FLOORS]])


def best_of(instance: Instance, allocations: list[Allocation]) -> Allocation:
    """The first of ``allocations`` unless a later one scores higher (by more than rounding)."""
    scored = [score(instance, build_grid(instance, a)).objective for a in allocations]
    best = 0
    for index, objective in enumerate(scored):
        if objective > scored[best] + 1e-9 * max(1.0, abs(scored[best])):
            best = index
    return allocations[best]


def legalise(
    instance: Instance, allocation: Allocation, models: list[ModelFrame] | None = None
) -> Allocation:
    """``allocation`` keeping constraint 7: jobs over their team's cap taken out where lending
    does not allow them, then put back where it does (``models``: the instance's lending frames,
    when the caller has them)."""
    models = frames(instance) if models is None else models
    if not models:
        return allocation
    ledger = Ledger(instance, models, allocation.batch)
    board = _Busy(instance, allocation)
    taken_out: list[BatchJob] = []
    while (breach := ledger.breach()) is not None:
        over = set(breach.jobs)
        victim = min(
            (job for job in instance.queued_jobs if job.id in over),
            key=lambda job: (_worth(instance, job), -ledger.placements[job.id].start_step, job.order),
        )
        board.take_out(victim, ledger.take_out(victim))
        taken_out.append(victim)
    _put_back(instance, ledger, board, taken_out)
    if taken_out:  # what was taken out may have held others back: each placed job as early as it may
        for job in sorted(
            (j for j in instance.queued_jobs if j.id in ledger.placements),
            key=lambda j: (ledger.placements[j.id].start_step, j.order),
        ):
            current = ledger.placements[job.id]
            pool = instance.pool_of_gpu(current.first_gpu)  # on its pool: another may be slower
            board.take_out(job, current)
            if not any(
                board.lowest_free(job, pool, t) is not None
                for t in range(job.release_step, current.start_step)
            ):
                board.place(job, current)  # no room earlier: constraint 7 need not be counted
                continue
            ledger.take_out(job)
            if _first_legal(instance, ledger, board, job, before=current.start_step, pools=(pool,)) is None:
                ledger.place(job, current)
                board.place(job, current)
        _put_back(instance, ledger, board, [job for job in taken_out if job.id not in ledger.placements])
    return Allocation(batch=dict(ledger.placements), realtime=allocation.realtime)


class _Busy:
    """Per step, the GPUs down, held by running work, services or the plan's queued jobs."""

    def __init__(self, instance: Instance, allocation: Allocation) -> None:
        self.instance = instance
        self._steps: dict[tuple[str, int], int] = {}  # (job, first GPU) -> its run's steps there
        self.masks = batch_masks(instance, allocation.batch)
        for held in allocation.realtime.values():
            self.masks = [b | m for b, m in zip(self.masks, held, strict=True)]

    def place(self, job: BatchJob, placement: Placement) -> None:
        block = block_mask(placement.first_gpu, job.gpus)
        for t in range(placement.start_step, self.run_end(job, placement.start_step, placement.first_gpu)):
            self.masks[t] |= block

    def take_out(self, job: BatchJob, placement: Placement) -> None:
        block = block_mask(placement.first_gpu, job.gpus)
        for t in range(placement.start_step, self.run_end(job, placement.start_step, placement.first_gpu)):
            self.masks[t] &= ~block

    def lowest_free(self, job: BatchJob, pool: Pool, start: int) -> int | None:
        """The lowest aligned block of ``pool`` free for ``job``'s whole run from ``start``."""
        taken = 0
        for t in range(start, self.run_end(job, start, pool.first_gpu)):
            taken |= self.masks[t]
        block = (1 << job.gpus) - 1
        for first in range(pool.first_gpu, pool.first_gpu + pool.gpus - job.gpus + 1, job.gpus):
            if not taken >> first & block:
                return first
        return None

    def run_end(self, job: BatchJob, start: int, first_gpu: int) -> int:
        """``instance.run_end``, its steps kept per job and first GPU."""
        steps = self._steps.get((job.id, first_gpu))
        if steps is None:
            steps = self._steps[(job.id, first_gpu)] = self.instance.run_steps(job, first_gpu)
        return min(start + steps, self.instance.horizon_steps)


def _put_back(instance: Instance, ledger: Ledger, board: _Busy, jobs: list[BatchJob]) -> None:
    """Each of ``jobs``, the most valuable first, into the plan at its earliest legal place, if any."""
    for job in sorted(jobs, key=lambda j: (-_worth(instance, j), j.order)):
        _first_legal(instance, ledger, board, job)


def _worth(instance: Instance, job: BatchJob) -> float:
    return job.priority * instance.share_factor(job) * job.gpus


def _first_legal(
    instance: Instance,
    ledger: Ledger,
    board: _Busy,
    job: BatchJob,
    *,
    before: int | None = None,
    pools: tuple[Pool, ...] | None = None,
) -> Placement | None:
    """``job`` placed at the earliest start (before ``before``, if given), then lowest aligned block
    of its pools (or ``pools``), free of everything in the plan and keeping constraint 7; None
    (nothing placed) when there is none within :data:`MAX_TRIALS_PER_JOB`."""
    trials = 0
    for start in range(job.release_step, instance.horizon_steps if before is None else before):
        for pool in instance.allowed_pools(job) if pools is None else pools:
            # The lowest free block only: constraint 7 counts a pool's GPUs, not which ones.
            first = board.lowest_free(job, pool, start)
            if first is None:
                continue
            trials += 1
            placement = Placement(start_step=start, first_gpu=first)
            if ledger.try_place(job, placement):
                board.place(job, placement)
                return placement
            if trials >= MAX_TRIALS_PER_JOB:
                return None
    return None
