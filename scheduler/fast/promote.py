"""Pass 4 of the fast mode: promote delayed jobs (a bounded large-neighbourhood search), each
promised an earlier slot, the services in the way re-planned around it, kept if it improves."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from enum import Enum
from itertools import islice
from typing import NamedTuple

from contract.scenario import BatchJob, Instance, block_mask, gpus_of, iter_gpus
from scheduler.board import Board
from scheduler.budget import Budget, WorkCosts
from scheduler.fast.batch import MAX_BLOCK_CANDIDATES
from scheduler.fast.candidate import (
    EPSILON,
    Targets,
    _Candidate,
    _in_the_way,
    _rebuild,
    _run_value,
    _start_or_horizon,
    _unpinned,
    _value_lost,
)
from scheduler.fast.need import _Need, _realtime_need, _worth_building
from scheduler.fast.realtime import InfeasiblePromiseError
from scheduler.model import Allocation, Placement, placement_masks

# Starts tried per delayed job and pass, as offsets from its earliest free start; the first
# that improves is kept. Later starts let real-time services move out of the way in time.
PROMISE_OFFSETS: tuple[int, ...] = (0, 2, 5, 9)
# A start the services cannot make room for in time (infeasible, or demand left unserved) is
# followed by the one a step later, this many times per job and round.
PROMISE_RETRIES = 1
# Blocks tried per promised start: where the one real-time uses least leaves demand unserved,
# the next may not.
BLOCKS_PER_START = 2
# A queue of at most this many jobs re-plans every service around a promise where re-planning
# only those in its way leaves more demand unserved, or none can follow their caps.
REPLAN_ALL_JOBS = 6


def _promote(
    instance: Instance,
    first: _Candidate,
    budget: Budget,
    costs: WorkCosts,
    targets: Targets,
    *,
    offsets: Sequence[int] = PROMISE_OFFSETS,
    until: float = math.inf,
) -> _Candidate:
    """Promise delayed jobs earlier slots (what each is expected to gain first), re-plan
    around them, keep what improves (:class:`_Promotion`)."""
    return _Promotion(instance, first, budget, costs, targets, offsets=offsets, until=until).run()


class _Step(Enum):
    """How trying one job's promises ended."""

    STOP = "stop"  # the budget ran out: the promotions end
    KEPT = "kept"  # a promise improved the plan (or is the round's trade)
    NONE = "none"  # no promise improved it


class _Promotion:
    """Rounds of promotions from ``first``: each round promises the jobs ``targets`` ranks an
    earlier slot in turn (``offsets`` from their earliest start), re-plans around each and keeps
    what improves, until a round improves nothing or the budget (spent past ``until``) ends it.

    A trade (a promotion that leaves more real-time demand unserved) that improves waits for
    the end of its round (:meth:`keep`): a promotion that does not trade, if the round finds one,
    goes first, and the trade is then taken only if it is worth more than the plan they reached
    (docs/allocator.md, "Tuning evidence")."""

    def __init__(
        self,
        instance: Instance,
        first: _Candidate,
        budget: Budget,
        costs: WorkCosts,
        targets: Targets,
        *,
        offsets: Sequence[int],
        until: float,
    ) -> None:
        self.instance, self.budget, self.costs = instance, budget, costs
        self.targets, self.offsets, self.until = targets, offsets, until
        self.best = first
        self.promises: dict[str, Placement] = dict(first.committed)
        self.need: _Need | None = None  # computed when first asked for
        self.traded: tuple[_Candidate, dict[str, Placement]] | None = None  # the round's trade
        self.improved, self.improved_plainly = True, False  # in this round; without a trade

    def run(self) -> _Candidate:
        """The rounds, until one improves nothing or the budget runs out."""
        instance, budget, costs = self.instance, self.budget, self.costs
        while self.improved:
            traded = self.traded
            if traded is not None and (
                not self.improved_plainly or traded[0].objective > self.best.objective + EPSILON
            ):
                self.best, self.promises = traded
            self.traded, self.improved, self.improved_plainly = None, False, False
            if not budget.affords(costs.delays):
                return self.done()
            budget.charge(costs.delays)  # the fixed load's earliest starts, one run search a job
            for job in self.targets(instance, self.best):
                if self.job(job) is _Step.STOP:
                    return self.done()
        return self.done()

    def done(self) -> _Candidate:
        """The best plan, or the round's trade where it is worth more."""
        best, traded = self.best, self.traded
        return best if traded is None or traded[0].objective <= best.objective + EPSILON else traded[0]

    def job(self, job: BatchJob) -> _Step:
        """``job``'s earlier slots tried in turn (each start's blocks, a start a step later where
        the services made no room), and where none gains, its earliest start held in place."""
        instance, budget, costs = self.instance, self.budget, self.costs
        latest = _start_or_horizon(instance, self.best.allocation, job)
        if not budget.affords(costs.slots) or budget.spent > self.until:
            return _Step.STOP
        budget.charge(costs.slots)  # finding the slots reads the real-time holdings
        slots = _earlier_slots(
            instance, self.best.allocation, job, self.promises, before=latest, offsets=self.offsets
        )
        queue = list(slots)
        tried: set[int] = set()
        tried_blocks: list[int] = []  # the first GPUs tried at the latest start tried
        retries = PROMISE_RETRIES
        while queue:
            blocks = queue.pop(0)
            promise, rest = blocks[0], blocks[1:]
            if promise.start_step not in tried:
                tried_blocks = []
            tried.add(promise.start_step)
            tried_blocks.append(promise.first_gpu)
            key = (job.id, promise.start_step, promise.first_gpu, False)
            known = self.best.refuted.get(key)  # None: not tried from this plan yet
            if known is False:
                continue
            trial: _Candidate | None = None
            if known is None:  # (True: tried, and the services made no room)
                outcome = self.attempt(job, latest, promise, {})
                if outcome.stop:
                    return _Step.STOP
                trial = outcome.candidate
            # A trade is taken when the exact objective says it pays: the contract prices an
            # unserved GPU-step at (1 + rt_penalty) x priority, and the plan cycle and the
            # full mode trade at that price too.
            gains, trades = self.judge(key, trial)
            if gains and trades:
                assert trial is not None
                self.keep(trial, trades)
                if not self.step_later(job, latest, promise.start_step, trial, tried):
                    return _Step.STOP
                return _Step.KEPT
            if trial is None or trades:
                # Another block at the same start may leave the services room; else the
                # next step may be early enough to gain and late enough for them to move,
                # on the same blocks first (docs/allocator.md, "Tuning evidence").
                if rest:
                    queue.insert(0, rest)
                    continue
                later = promise.start_step + 1
                if retries and later < latest and later not in tried and budget.affords(costs.slots):
                    retries -= 1
                    budget.charge(costs.slots)
                    fixed = _promise_board(instance, job, self.promises)
                    if at_later := _blocks_at(fixed, self.best.allocation, job, later, first=tried_blocks):
                        queue.insert(0, at_later)
                continue
            if gains:
                assert trial is not None
                self.keep(trial, trades)
                return _Step.KEPT
        return self.held(job, latest, slots)

    def held(self, job: BatchJob, latest: int, slots: Sequence[Sequence[Placement]]) -> _Step:
        """Nothing gained: the earliest start again, on the block where the ranking expects the
        planned jobs it overlaps to lose least, the planned jobs beside it held in place: else the
        services in that block's way move onto their cells and push them later (docs/allocator.md,
        "Tuning evidence")."""
        instance, budget, costs = self.instance, self.budget, self.costs
        if not slots or not instance.realtime_jobs:
            return _Step.NONE
        start = slots[0][0].start_step
        gain = _value_lost(instance, job, start, latest)
        if gain <= 0 or not budget.affords(costs.slots):
            return _Step.NONE
        budget.charge(costs.slots)
        held = _held_promise(instance, self.best.allocation, job, self.promises, start)
        if held is None or held.displaced >= gain:
            return _Step.NONE
        promise, pins = held.promise, held.pins
        key = (job.id, promise.start_step, promise.first_gpu, True)
        if key in self.best.refuted:
            return _Step.NONE
        outcome = self.attempt(job, latest, promise, pins)
        if outcome.stop:
            return _Step.STOP
        trial = outcome.candidate
        gains, trades = self.judge(key, trial)
        if gains and trial is not None:
            self.keep(trial, trades)
            return _Step.KEPT
        return _Step.NONE

    def attempt(
        self, job: BatchJob, latest: int, promise: Placement, pins: Mapping[str, Placement]
    ) -> _Trial:
        """The best plan re-planned around ``promise`` (and ``pins``, the planned jobs held in
        place), if the budget affords the check and the re-plan and the check says it may improve."""
        instance, budget, costs, best = self.instance, self.budget, self.costs, self.best
        committed = {**self.promises, **pins, job.id: promise}
        if not budget.affords(costs.check):
            return _Trial(stop=True)
        budget.charge(costs.check)
        need = self.need = self.need or _realtime_need(instance)
        in_the_way = _in_the_way(instance, best.allocation, committed)
        lost = _value_lost(instance, job, promise.start_step, latest)
        if not _worth_building(instance, best, committed, in_the_way, need=need, gain=lost):
            return _Trial()
        replan = costs.replan(len(in_the_way))
        if not budget.affords(replan) or budget.spent > self.until:
            return _Trial(stop=True)
        budget.charge(replan)
        try:
            trial: _Candidate | None = _rebuild(instance, best, committed, in_the_way)
        except InfeasiblePromiseError:
            trial = None
        services = instance.realtime_jobs
        if (
            len(instance.queued_jobs) <= REPLAN_ALL_JOBS
            and len(in_the_way) < len(services)
            and (trial is None or trial.rt_shortfall > best.rt_shortfall)
            and budget.affords(costs.replan(len(services)))
        ):
            # The services kept in place may be what leaves the others no room: all re-planned.
            budget.charge(costs.replan(len(services)))
            try:
                every = _rebuild(instance, best, committed, services)
            except InfeasiblePromiseError:
                every = None
            if every is not None and (trial is None or every.objective > trial.objective):
                trial = every
        if trial is None:
            return _Trial()
        return _Trial(candidate=_unpinned(instance, trial, pins) if pins else trial)

    def judge(self, key: tuple[str, int, int, bool], trial: _Candidate | None) -> tuple[bool, bool]:
        """Whether ``trial`` improves the best plan, and whether it trades; a promise that does
        not improve is remembered with it (True: the services made no room, or it traded)."""
        best = self.best
        gains = trial is not None and trial.objective > best.objective + EPSILON
        trades = trial is not None and trial.rt_shortfall > best.rt_shortfall
        if not gains:
            best.refuted[key] = trial is None or trades
        return gains, trades

    def keep(self, trial: _Candidate, trades: bool) -> None:
        """Take ``trial``, which improves the best plan: at once when it trades nothing, else as
        the round's trade if it is worth more than the one found before."""
        if not trades:
            self.best, self.promises = trial, dict(trial.committed)
            self.improved, self.improved_plainly = True, True
        elif self.traded is None or trial.objective > self.traded[0].objective:
            self.traded, self.improved = (trial, dict(trial.committed)), True

    def step_later(self, job: BatchJob, latest: int, start: int, trade: _Candidate, tried: set[int]) -> bool:
        """After ``trade``, a promise of ``job`` at ``start`` that gains by a trade: the same job one
        step later, on the block real-time uses least there (False: the budget ran out). Not after
        a trade held in place.

        A start can be a step too early for the services in the way to move out within their
        caps: one step later they may, and no trade is needed. Tried where the step's delay costs
        the job less than the trade costs the services (docs/allocator.md, "Tuning evidence")."""
        instance, budget, costs = self.instance, self.budget, self.costs
        later = start + 1
        if (
            later >= latest
            or later in tried
            or _value_lost(instance, job, start, later) >= self.best.rt_objective - trade.rt_objective
            or not budget.affords(costs.slots)
        ):
            return True
        budget.charge(costs.slots)
        blocks = _blocks_at(_promise_board(instance, job, self.promises), self.best.allocation, job, later)
        if not blocks or (key := (job.id, later, blocks[0].first_gpu, False)) in self.best.refuted:
            return True
        outcome = self.attempt(job, latest, blocks[0], {})
        if outcome.stop:
            return False
        gains, trades = self.judge(key, outcome.candidate)
        if gains:
            assert outcome.candidate is not None
            self.keep(outcome.candidate, trades)
        return True


class _Trial(NamedTuple):
    """A promise's re-plan: ``stop`` when the budget ran out first; else the candidate, None when
    it was not built (it could not pay) or the services could not follow their caps."""

    stop: bool = False
    candidate: _Candidate | None = None


class _Held(NamedTuple):
    """A promise with the planned jobs beside it held in place, and what the planned jobs it
    overlaps are expected to lose (pushed to its end)."""

    promise: Placement
    pins: dict[str, Placement]
    displaced: float


def _held_promise(
    instance: Instance, allocation: Allocation, job: BatchJob, promises: Mapping[str, Placement], start: int
) -> _Held | None:
    """``job`` at ``start`` on the free block where the planned jobs it overlaps lose least when
    pushed to its end (the block :func:`expected_gains` ranks it by; the fewest real-time
    GPU-steps among equals), with the other planned jobs that run beside it held in place; None
    where no service holds GPUs of that block (a re-pack, tried already) or no job is beside it."""
    fixed = _promise_board(instance, job, promises)
    horizon = instance.horizon_steps
    end = job.end_step(start, horizon)
    jobs = instance.jobs_by_id
    beside: list[tuple[str, Placement, int, float]] = []  # (id, placement, its GPUs, value lost)
    for job_id, placed in allocation.batch.items():
        other = jobs[job_id]
        assert isinstance(other, BatchJob)
        if job_id == job.id or job_id in promises:
            continue
        if placed.start_step < end and other.end_step(placed.start_step, horizon) > start:
            lost = _run_value(instance, other, placed.start_step) - _run_value(instance, other, end)
            beside.append((job_id, placed, block_mask(placed.first_gpu, other.gpus), lost))
    ranked = []
    for first_gpu in islice(iter_gpus(fixed.free_starts(job.gpus, start, end)), MAX_BLOCK_CANDIDATES):
        mask = block_mask(first_gpu, job.gpus)
        displaced = sum(lost for *_, taken, lost in beside if taken & mask)
        ranked.append((displaced, _realtime_cells(allocation, first_gpu, job.gpus, start, end), first_gpu))
    if not ranked:
        return None
    displaced, services, first_gpu = min(ranked)
    mask = block_mask(first_gpu, job.gpus)
    pins = {job_id: placed for job_id, placed, taken, _ in beside if not taken & mask}
    if not services or not pins:
        return None
    return _Held(Placement(start_step=start, first_gpu=first_gpu), pins, displaced)


def _realtime_cells(allocation: Allocation, first_gpu: int, gpus: int, start: int, end: int) -> int:
    """Real-time GPU-steps inside block ``[first_gpu, first_gpu + gpus)`` over ``[start, end)``."""
    mask = block_mask(first_gpu, gpus)
    return sum(
        (held[t] & mask).bit_count() for held in allocation.realtime.values() for t in range(start, end)
    )


def _earlier_slots(
    instance: Instance,
    allocation: Allocation,
    job: BatchJob,
    promises: Mapping[str, Placement],
    *,
    before: int,
    offsets: Sequence[int] = PROMISE_OFFSETS,
) -> list[list[Placement]]:
    """Starts before ``before`` that running jobs, down GPUs and the other promises leave
    ``job`` (the earliest, then ``offsets`` later), each with the blocks real-time uses least
    there (:func:`_blocks_at`)."""
    fixed = _promise_board(instance, job, promises)
    slots: list[list[Placement]] = []
    earliest: int | None = None
    for start in range(job.release_step, min(before, instance.horizon_steps)):
        if earliest is not None and start - earliest not in offsets:
            continue
        blocks = _blocks_at(fixed, allocation, job, start)
        if blocks:
            earliest = start if earliest is None else earliest
            slots.append(blocks)
    return slots


def _promise_board(instance: Instance, job: BatchJob, promises: Mapping[str, Placement]) -> Board:
    """Down GPUs, running jobs and the promises other than ``job``'s."""
    fixed = Board(instance)
    others = {job_id: p for job_id, p in promises.items() if job_id != job.id}
    fixed.busy = [
        busy | mask for busy, mask in zip(fixed.busy, placement_masks(instance, others), strict=True)
    ]
    return fixed


def _blocks_at(
    fixed: Board, allocation: Allocation, job: BatchJob, start: int, first: Sequence[int] = ()
) -> list[Placement]:
    """``job`` from ``start`` on the free blocks of ``fixed`` that real-time uses least (the
    fewest GPU-steps to move first; at most :data:`BLOCKS_PER_START`), the blocks at ``first``
    (first GPUs) before the others."""
    end = job.end_step(start, fixed.horizon)
    starts = fixed.free_starts(job.gpus, start, end)
    moved = sorted(
        (a not in first, _realtime_cells(allocation, a, job.gpus, start, end), a) for a in gpus_of(starts)
    )
    return [Placement(start_step=start, first_gpu=a) for *_, a in moved[:BLOCKS_PER_START]]
