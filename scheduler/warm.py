"""Warm starts: new jobs inserted into a stored plan, and the plan repaired around them.

A submit arrives seconds or minutes after a plan cycle that spent a second near the
optimum. Re-planning the whole queue from scratch on the hot path throws that plan away;
:func:`insert` keeps it and changes only what the new jobs need (an insertion heuristic
with local repair, as in the ruin-and-recreate family: Schrimpf et al., "Record breaking
optimization results using the ruin and recreate principle", J. Comput. Phys. 2000):

1. The stored plan's real-time holdings, running work and every placed job stay put.
2. Each new job, in the order given, goes to its earliest free aligned block (the
   plain insertion: legal, since it only fills free cells).
3. While the budget lasts, earlier starts are tried on blocks that only queued batch
   jobs hold ("ruin"): those jobs leave, the new job takes the block, and they are placed
   again, highest priority first, each at its earliest free block ("recreate"). The best
   of these by the exact objective replaces the plain insertion when it scores more. A
   repair stops packing once it cannot: the jobs still to pack counted at their ceilings
   (their best value from their release) it would score no more than the best so far.
4. A job that neither fits nor gains from a repair leaves the plan as it was, and so refutes
   every later one of its shape (GPUs, steps, release step) at no higher priority, until the
   plan changes: those would try the same blocks, ruin the same jobs and gain no more
   (:class:`Refuted`). On a full plan most submits are such jobs, and they are answered
   without a search.

Legal by construction: every job is placed on an aligned block free over its whole run
of down GPUs, running work, real-time holdings and every other job, at or after its
release; the real-time holdings are the stored plan's, so the swap caps hold as they
did. The objective never falls below the stored plan's with the new jobs left out: a
new job placed anywhere adds value, and a repair is kept only when it scores more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from contract.curves import swap_capped_curve
from contract.scenario import BatchJob, Cell, Instance, block_mask, iter_gpus
from scheduler.baselines import first_fit
from scheduler.board import Board
from scheduler.budget import Budget, WorkCosts
from scheduler.check import check_plan
from scheduler.model import Allocation, Placement

EPSILON = 1e-9
#: Earlier starts tried per new job, and blocks per start (the lowest first): enough to reach
#: the front of a busy plan, bounded so that a repair costs a few packs of the displaced jobs.
MAX_STARTS = 12
MAX_BLOCKS = 4


def read_allocation(instance: Instance, grid: Sequence[Sequence[Cell]]) -> Allocation | None:
    """A stored plan's grid as decisions on ``instance``, or None when it is not a legal plan
    of it (a job the instance lacks, a running job moved, any breach of the contract)."""
    if check_plan(instance, grid):
        return None
    queued = {job.id for job in instance.queued_jobs}
    placements: dict[str, Placement] = {}
    realtime = {job.id: [0] * instance.horizon_steps for job in instance.realtime_jobs}
    for gpu, row in enumerate(grid):
        for t, cell in enumerate(row):
            if cell in queued:
                placed = placements.get(cell)
                if (
                    placed is None
                    or t < placed.start_step
                    or (t == placed.start_step and gpu < placed.first_gpu)
                ):
                    placements[cell] = Placement(start_step=t, first_gpu=gpu)
            elif cell in realtime:
                realtime[cell][t] |= 1 << gpu
    return Allocation(batch=placements, realtime={job_id: tuple(m) for job_id, m in realtime.items()})


def trimmed_realtime(instance: Instance, allocation: Allocation, *, kept_steps: int = 0) -> Allocation:
    """``allocation`` with each service holding no more than its need: at each step the least
    count the swap cap lets it follow over its demand (:func:`swap_capped_curve`, from its
    running set), out of the GPUs it holds there (those it kept the step before first). A plan
    on a quiet queue may hold a service's daily peak all day (the baselines' reservation wins
    the tie at equal objective); a job inserted into it would start behind GPUs nothing needs.
    The GPUs given back are those that free the widest aligned block (:func:`_given_back`).
    Served demand, and so the objective, is unchanged; a service whose trimmed holdings would
    break its swap cap keeps its own.

    ``kept_steps``: the first steps stay as they are (committed hours: decided already), and
    the curve starts from what each service holds in the last of them."""
    running = instance.running_realtime
    realtime = dict(allocation.realtime)
    others = _others_taken(instance, allocation)
    for job in instance.realtime_jobs:
        masks = realtime.get(job.id)
        if masks is None:
            continue
        kept_steps = min(kept_steps, len(masks))
        start = running[job.id].mask if job.id in running else None
        if kept_steps:
            start = masks[kept_steps - 1]
        curve = swap_capped_curve(
            job.demand[kept_steps:], job.swap_cap, None if start is None else start.bit_count()
        )
        trimmed: list[int] = list(masks[:kept_steps])
        previous = start
        for t, (mask, want) in enumerate(zip(masks[kept_steps:], curve, strict=True), start=kept_steps):
            if mask.bit_count() <= want:
                kept = mask
            else:
                stay = mask & (previous or 0)
                if stay.bit_count() >= want:
                    back = _given_back(stay, stay.bit_count() - want, others[t] & ~mask, instance.gpus)
                    kept = stay & ~back
                else:  # growing: of the GPUs it may take, those whose return frees the least room
                    other = mask & ~stay
                    left = other.bit_count() - (want - stay.bit_count())
                    kept = mask & ~_given_back(other, left, (others[t] & ~mask) | stay, instance.gpus)
            trimmed.append(kept)
            previous = kept
        if _within_cap(trimmed[kept_steps:], start, job.swap_cap):
            realtime[job.id] = tuple(trimmed)
    return Allocation(batch=dict(allocation.batch), realtime=realtime)


def _others_taken(instance: Instance, allocation: Allocation) -> list[int]:
    """Per step, the GPUs down, running or planned for batch work, or held by any service."""
    board = Board(instance)
    for job_id, placement in allocation.batch.items():
        job = _batch(instance.jobs_by_id[job_id])
        end = job.end_step(placement.start_step, instance.horizon_steps)
        board.occupy(block_mask(placement.first_gpu, job.gpus), placement.start_step, end)
    taken = list(board.busy)
    for masks in allocation.realtime.values():
        for t, mask in enumerate(masks):
            taken[t] |= mask
    return taken


def _given_back(held: int, count: int, taken: int, gpus: int) -> int:
    """``count`` of the GPUs ``held`` to give back, one at a time, each found down the buddy
    tree of aligned blocks: into the half that holds no GPU ``taken`` by anything else, then
    the one with the fewest of ``held`` still kept (the nearest to free), the higher on a tie.
    What is given back joins what is free already into blocks a batch job can take."""
    given = 0
    for _ in range(min(count, held.bit_count())):
        first, size = 0, 1
        while size < gpus:
            size <<= 1
        while size > 1:
            size >>= 1
            halves = [h for h in (first + size, first) if h < gpus and held & ~given & block_mask(h, size)]
            first = min(
                halves,
                key=lambda h: (
                    bool(taken & block_mask(h, size)),
                    (held & ~given & block_mask(h, size)).bit_count(),
                ),
            )
        given |= 1 << first
    return given


def _within_cap(masks: Sequence[int], running: int | None, cap: int) -> bool:
    previous = running
    for mask in masks:
        if previous is not None and (mask ^ previous).bit_count() > cap:
            return False
        previous = mask
    return True


class Refuted:
    """The shapes that found no place in one plan: (GPUs, steps, release step) -> the highest
    priority of a job of that shape that neither fitted nor gained from a repair. A job of
    such a shape at no higher priority, with no promise, would do no better (the same starts
    and blocks, the same jobs ruined and packed again, a value no higher at every start), so
    it is left out without a search. Valid while the plan is the one it was built on, for
    inserts with the same budgets; under a wall-clock budget a repair may reach a few more
    blocks than the one it stands for."""

    def __init__(self) -> None:
        self._priority: dict[tuple[int, int, int], float] = {}

    @staticmethod
    def _shape(job: BatchJob) -> tuple[int, int, int]:
        return (job.gpus, job.duration_steps, job.release_step)

    def refutes(self, job: BatchJob) -> bool:
        top = self._priority.get(self._shape(job))
        return job.promise_step is None and top is not None and job.priority <= top

    def add(self, job: BatchJob) -> None:
        if job.promise_step is None:
            shape = self._shape(job)
            self._priority[shape] = max(job.priority, self._priority.get(shape, job.priority))

    def clear(self) -> None:
        self._priority.clear()


@dataclass(frozen=True, slots=True)
class _Placed:
    job: BatchJob
    placement: Placement
    mask: int
    end: int


def insert(
    instance: Instance,
    base: Allocation,
    new_ids: Sequence[str],
    budgets: Callable[[], Budget] | None = None,
    *,
    placed_as: Callable[[BatchJob, Placement], BatchJob | None] | None = None,
    refuted: Refuted | None = None,
) -> Allocation:
    """``base`` (a legal plan of ``instance`` without the jobs ``new_ids``) with those jobs
    placed, in the order given, each repaired within a budget of its own from ``budgets``
    (None: no searching, the plain insertion only). Inserting several jobs at once is
    inserting them one by one: each sees the plan the one before left.

    ``placed_as``: called with each new job once it is placed; a job it returns (the same job
    with a promise, say) stands for it in the repairs of the jobs after it.

    ``refuted``: the shapes ``base`` has no place for (:class:`Refuted`), used and kept up to
    date here: on return it holds those of the plan returned (pass it on with that plan)."""
    jobs = instance.jobs_by_id
    new_jobs = [_batch(jobs[i]) for i in new_ids]
    costs = WorkCosts.of(instance)
    fixed = Board(instance)  # down GPUs and running work
    for masks in base.realtime.values():
        for t, mask in enumerate(masks):
            fixed.busy[t] |= mask
    placed = {
        job_id: _placed(instance, _batch(jobs[job_id]), p)
        for job_id, p in base.batch.items()
        if job_id not in new_ids
    }
    refuted = Refuted() if refuted is None else refuted
    ceilings = _Ceilings(instance)
    for job in new_jobs:
        if job.id in instance.running_batch:
            raise ValueError(f"{job.id} is not a queued batch job of {instance.name!r}")
        if refuted.refutes(job):
            continue
        before = placed
        placed = _insert_one(
            instance,
            fixed,
            placed,
            job,
            budget=None if budgets is None else budgets(),
            costs=costs,
            ceilings=ceilings,
        )
        if job.id not in placed and placed is before:
            refuted.add(job)
        else:
            refuted.clear()
        now_as = (
            None if placed_as is None or job.id not in placed else placed_as(job, placed[job.id].placement)
        )
        if now_as is not None:
            placed[job.id] = _placed(instance, now_as, placed[job.id].placement)
    return Allocation(
        batch={job_id: p.placement for job_id, p in placed.items()}, realtime=dict(base.realtime)
    )


def _batch(job: object) -> BatchJob:
    if not isinstance(job, BatchJob):
        raise TypeError(f"{job!r} is not a batch job")
    return job


def _placed(instance: Instance, job: BatchJob, placement: Placement) -> _Placed:
    return _Placed(
        job,
        placement,
        block_mask(placement.first_gpu, job.gpus),
        job.end_step(placement.start_step, instance.horizon_steps),
    )


def _value(instance: Instance, job: BatchJob, start: int | None) -> float:
    """What ``job`` adds to the objective started at ``start`` (None: left out)."""
    if start is None:
        return -instance.promise_cost(job, None)
    return _output(instance, job, start) - instance.promise_cost(job, start)


def _output(instance: Instance, job: BatchJob, start: int) -> float:
    """The weighted output of ``job`` started at ``start``, before its promise's cost."""
    end = job.end_step(start, instance.horizon_steps)
    return job.priority * job.gpus * sum(instance.weights[start:end])


class _Ceilings(dict[str, float]):
    """Job id -> the most :func:`_value` can give that job at any start from its release, or
    left out, as computed: its highest output (a promise costs nothing or more, and subtracting
    it never rounds up), or nothing. Made when first asked for; a job's promise, the one thing
    a placement changes, does not enter it."""

    def __init__(self, instance: Instance) -> None:
        super().__init__()
        self.instance = instance

    def __missing__(self, job_id: str) -> float:
        job = _batch(self.instance.jobs_by_id[job_id])
        starts = range(job.release_step, self.instance.horizon_steps)
        ceiling = self[job_id] = max([0.0, *(_output(self.instance, job, start) for start in starts)])
        return ceiling


def _board(fixed: Board, placed: Mapping[str, _Placed], instance: Instance) -> Board:
    board = Board(instance)
    board.busy = list(fixed.busy)
    for p in placed.values():
        board.occupy(p.mask, p.placement.start_step, p.end)
    return board


def _copy(board: Board, instance: Instance) -> Board:
    copy = Board(instance)
    copy.busy = list(board.busy)
    return copy


def _insert_one(
    instance: Instance,
    fixed: Board,
    placed: dict[str, _Placed],
    job: BatchJob,
    *,
    budget: Budget | None,
    costs: WorkCosts,
    ceilings: _Ceilings,
) -> dict[str, _Placed]:
    """``placed`` with ``job`` in: the plain insertion, or the best repair that beats it."""
    full = _board(fixed, placed, instance)  # every cell of the plan so far
    plain = first_fit(_copy(full, instance), job, job.release_step)
    best = placed  # ``placed`` itself while nothing beats leaving the job out
    if plain is not None:
        best = {**placed, job.id: _placed(instance, job, plain)}
    best_gain = _value(instance, job, None if plain is None else plain.start_step)
    if budget is None:
        return best
    latest = instance.horizon_steps if plain is None else plain.start_step
    tried = 0
    for start in range(job.release_step, latest):
        if tried >= MAX_STARTS:
            break
        end = job.end_step(start, instance.horizon_steps)
        free_of_fixed = fixed.free_starts(job.gpus, start, end)
        if not free_of_fixed:
            continue
        tried += 1
        for first_gpu in list(iter_gpus(free_of_fixed))[:MAX_BLOCKS]:
            mask = block_mask(first_gpu, job.gpus)
            ruined = [
                p for p in placed.values() if p.mask & mask and p.placement.start_step < end and start < p.end
            ]
            step_cost = costs.slots + costs.pack * (len(ruined) + 1) / max(1, len(instance.queued_jobs))
            if not budget.affords(step_cost):
                return best
            budget.charge(step_cost)
            repacked = sorted(ruined, key=lambda p: (-p.job.priority, p.job.order))
            trial = _copy(full, instance)
            for p in ruined:  # cells never overlap: clearing a job's block frees exactly its cells
                for t in range(p.placement.start_step, p.end):
                    trial.busy[t] &= ~p.mask
            trial.occupy(mask, start, end)
            moved = {job.id: _placed(instance, job, Placement(start_step=start, first_gpu=first_gpu))}
            was = [_value(instance, p.job, p.placement.start_step) for p in repacked]
            gain = _value(instance, job, start)
            for i, other in enumerate(repacked):
                if _ceiling(gain, repacked[i:], was[i:], ceilings) <= best_gain + EPSILON:
                    break  # this repair cannot beat the best: the jobs left are not packed
                again = first_fit(trial, other.job, other.job.release_step)
                if again is not None:
                    moved[other.job.id] = _placed(instance, other.job, again)
                gain += _value(instance, other.job, None if again is None else again.start_step)
                gain -= was[i]
            else:
                if gain > best_gain + EPSILON:
                    gone = {p.job.id for p in ruined}
                    kept = {job_id: p for job_id, p in placed.items() if job_id not in gone}
                    best, best_gain = {**kept, **moved}, gain
    return best


def _ceiling(gain: float, rest: Sequence[_Placed], was: Sequence[float], ceilings: _Ceilings) -> float:
    """No less than the gain of a repair that has reached ``gain`` with the jobs ``rest`` (whose
    values in the plan were ``was``) still to pack: each counted at its ceiling, in the order
    and with the operations of the gain itself. Rounding is monotone, so an operand no smaller
    never makes the result smaller."""
    for other, value in zip(rest, was, strict=True):
        gain += ceilings[other.job.id]
        gain -= value
    return gain
