"""The fast mode: a heuristic that is legal by construction and answers in milliseconds.

It is anytime (:func:`allocate` takes a :class:`~scheduler.budget.Budget`). Always, to
completion: the contract's three baselines (the floors: no plan scores below fifo,
fifo-backfill or priority-backfill), the first pass, and at the end the real-time
settling of :mod:`scheduler.churn` (the fewest GPU moves at equal value; where the first
pass leaves no budget for another job order, its reservation may go to two more of them).
Between them, while the budget affords each next step: the mirror image's first pass, the
other job orders, then rounds of promotions (4, the largest expected gain first, at most
half of what is left per round) and the order search (end of 2) until a round brings
nothing; with budget left, the same from the other orientation, then with promotions in
priority order, then the order search's wider moves. Every candidate is compared by the
exact objective.

Passes over a :class:`~scheduler.board.Board` of per-step bitmasks:

1. **Real-time as curves.** Each service gets the smallest GPU-count curve that
   covers its demand and that the swap cap can follow (ramps start early enough,
   shrinking is as fast as the cap allows). GPUs are then chosen step by step,
   highest ids first, so the services stack at the top of the cluster and give
   GPUs back in troughs. Spare swap budget replaces GPUs that will go down (or are
   promised to a batch job) early, one in before one out, and moves a service's
   lowest GPU up into a free higher one (compaction), so whole aligned blocks stay
   free below. Every change is charged to the swap cap; earliest-deadline-first
   shedding guarantees no step ever needs more changes than the cap.
2. **Batch by value.** Queued jobs are packed greedily in a few orders (priority
   first with larger rectangles first among equals; value per step; widest first),
   each job at its earliest feasible start on the aligned block that best fits the
   holes already there (buddy best-fit: prefer blocks whose parent block is already
   partly taken, and runs that fill a trough in time). The best order wins, then a
   local search moves jobs forward in it (to the front or one place earlier; later, to
   any earlier place).
3. **Both orientations.** Passes 1-2 also run on the cluster upside down (where job
   sizes divide the cluster, so blocks stay aligned); the better first pass is kept.
4. **Promote delayed jobs** (a bounded large-neighbourhood search): the batch jobs that
   the plan starts later than the cluster's fixed load allows, the one a promotion is
   expected to gain most from first, are each promised their earliest slot (in later rounds
   also one a few steps later) on the block real-time uses least (then the next one), the
   real-time services in the way are re-planned around the promise (they move GPUs ahead of
   time within their swap caps), the rest is re-packed, and the change is kept only if the
   exact objective improves; where nothing gains at a job's earliest start, that start is tried
   again with the planned jobs beside it held in place (the services in the way then cannot
   push them back). A promotion may leave real-time demand unserved (a trade) when
   that pays at the contract's price; a trade waits for the end of its round, where it is
   taken if it is worth more than the plan the round's promotions without one reached.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from itertools import accumulate, islice
from typing import NamedTuple

from contract.curves import swap_capped_curve
from contract.scenario import BatchJob, Instance, RealtimeJob, block_mask, gpus_of, iter_gpus, iter_gpus_down
from scheduler import baselines
from scheduler.board import BlockedSchedule, Board
from scheduler.budget import Budget, WorkCosts
from scheduler.churn import settle
from scheduler.metrics import moves, realtime_objective
from scheduler.model import HOT_PATH_BUDGET_MS, Allocation, Placement, batch_masks, placement_masks

UNLIMITED = 1 << 30
# Candidate blocks scored per job: enough to find a snug hole, bounded for large clusters.
MAX_BLOCK_CANDIDATES = 12
# Starts tried per delayed job and pass, as offsets from its earliest free start; the first
# that improves is kept. Later starts let real-time services move out of the way in time.
PROMISE_OFFSETS: tuple[int, ...] = (0, 2, 5, 9)
# A start the services cannot make room for in time (infeasible, or demand left unserved) is
# followed by the one a step later, this many times per job and round.
PROMISE_RETRIES = 1
# Blocks tried per promised start: where the one real-time uses least leaves demand unserved,
# the next may not.
BLOCKS_PER_START = 2
EPSILON = 1e-9
# Job orders every first pass packs (the rest are tried while the budget lasts): priority
# with larger rectangles first, and each job's value from its earliest start. Over the 58
# first passes of 33 sampled scenarios (issue 11), the first two orders then tried packed
# best in 33 and 35 (ties counted for each); the value-at-earliest-start order replaced the
# second on the wide tuning split (40 scenarios, 2 ms: mean 0.9759 -> 0.9788).
FIRST_ORDERS = 2
# The share of the budget left that one round of promotions may spend before the order search.
PROMOTION_SHARE = 0.5
# A delayed job whose promotion is expected to gain more than this share of the first pass's
# objective is promoted before the other job orders (and before the mirror image's first pass
# when the budget does not afford both): at 2 ms, the searches otherwise reach it too late.
EARLY_GAIN = 0.2
# The share where the budget affords the promotion beside the first pass's other job orders and
# the mirror image's first pass: it takes the budget of the later searches only (on the widened
# tuning set, work-only, against 0.2 there too: 2 ms 29 better and 19 worse, the worst 0.872 ->
# 0.934; 1 ms 11 and 8; 1.5 ms 18 and 21; 4 ms 16 and 20; docs/allocator.md).
EARLY_GAIN_AFFORDED = 0.05


class InfeasiblePromiseError(Exception):
    """A promised batch block would force a real-time job to change more GPUs than its swap cap."""


@dataclass(frozen=True, slots=True)
class _Candidate:
    objective: float
    allocation: Allocation
    order: Sequence[BatchJob]  # the batch order that produced it
    rt_objective: float  # the real-time holdings' share of the objective (a re-pack keeps it)
    rt_shortfall: int  # demanded real-time GPU-steps left unserved
    committed: Mapping[str, Placement]  # promised placements it was built around
    busy_before_batch: tuple[int, ...]  # per step: down, running, promised and real-time GPUs
    # Promises (job, start, first GPU, planned jobs held in place) tried from this plan that did
    # not improve it (True: the services could not make room, or it traded at a loss; another
    # block or a later start may do better).
    refuted: dict[tuple[str, int, int, bool], bool] = field(default_factory=dict, compare=False)


def allocate(instance: Instance, budget: Budget | None = None) -> Allocation:
    """The best plan found within ``budget`` (default: the hot path's).

    The first pass (real-time curves, the first job orders, and the three baselines as
    floors) always completes, and so does the last step, :func:`scheduler.churn.settle`,
    unless the first pass leaves it the only step afforded (:func:`_trade_settling`).
    Between them, while the budget affords each next step: the same on the mirror image,
    the other job orders on the better orientation, and the searches.
    """
    budget = budget or Budget(HOT_PATH_BUDGET_MS)
    costs = WorkCosts.of(instance)
    baseline_plans = baselines.all_three(instance)
    reserved_value = realtime_objective(instance, baseline_plans[0].realtime)  # one set of reservations
    floors = [_Scored(instance, f, reserved_value + batch_value(instance, f.batch)) for f in baseline_plans]
    # The floors (three packs on one set of reservations), as measured; settling at the end
    # is kept back from the work and the wall clock both.
    budget.charge(costs.floors)
    budget.reserve(costs.settle)
    worth = _worth_at_earliest(instance)  # the mirror image's is the same
    loss = ServicesLoss(instance) if instance.realtime_jobs else None  # the mirror image's is the same

    def gains(instance: Instance, candidate: _Candidate) -> list[BatchJob]:
        return most_gain(instance, candidate.allocation, loss, rt_objective=candidate.rt_objective)

    def by_priority(instance: Instance, candidate: _Candidate) -> list[BatchJob]:
        return _by_priority(instance, candidate.allocation)

    orders = _job_orders(instance, worth)
    first = _first_pass(instance, orders[:1], budget, costs)
    # A promotion expected to gain much goes first (EARLY_GAIN). Where the budget does not afford
    # it and the first pass's other orders both (1 ms, or a slower machine), before those orders:
    # a job no packing places (as wide as a cluster the services never leave) gets in only by a
    # promotion, and the other orders still pack the plan without it, the better kept (tuning,
    # 1 ms: 3 scenarios better, 1 worse, the worst 0.42 -> 0.78). Else after the mirror image's
    # first pass where the budget affords both: a large gain found early beats a better
    # orientation found late (tuning, 2 ms: 9 scenarios better, 5 worse, the worst 0.43 -> 0.77).
    promotion = costs.delays + costs.slots + costs.check + costs.replan(len(instance.realtime_jobs))
    before_orders = not budget.affords((FIRST_ORDERS - 1) * costs.pack + promotion)
    promoted = _early_promotions(instance, first, budget, costs, worth, loss=loss) if before_orders else first
    first = _other_orders(instance, first, orders[1:FIRST_ORDERS], budget, costs)
    settled = not _trade_settling(budget, costs, orders_left=len(orders) - FIRST_ORDERS)
    starts = [(instance, orders, max(first, promoted, key=lambda candidate: candidate.objective))]
    flipped = mirrored(instance)
    mirror_first = flipped is not None and budget.affords(costs.build + costs.pack + promotion)
    if not mirror_first and not before_orders:
        starts[0] = (
            instance,
            orders,
            _early_promotions(
                instance,
                starts[0][2],
                budget,
                costs,
                worth,
                loss=loss,
                afforded=flipped is None,  # no mirror image's first pass to take the budget of
            ),
        )
    if flipped is not None and budget.affords(costs.build + costs.pack):
        flipped_orders = _job_orders(flipped, worth)
        starts.append(
            (flipped, flipped_orders, _first_pass(flipped, flipped_orders[:FIRST_ORDERS], budget, costs))
        )
        starts.sort(key=lambda start: -start[2].objective)  # the better orientation first
    oriented, orders, best = starts[0]
    if mirror_first:
        best = _early_promotions(oriented, best, budget, costs, worth, loss=loss, afforded=True)
    for order in orders[FIRST_ORDERS:]:
        if not budget.affords(costs.pack):
            break
        budget.charge(costs.pack)
        best = _with_batch(
            oriented, best, *_pack(oriented, best.busy_before_batch, best.committed, order), order
        )
    starts[0] = (oriented, orders, best)
    # The searches from the better first pass; with budget left when they end, again from
    # the other orientation's, then with promotions in priority order instead; last, the
    # order search's wider moves on the best of them.
    found: list[tuple[Instance, _Candidate]] = []
    for (oriented, _, start), targets in [*((s, gains) for s in starts), (starts[0], by_priority)]:
        if found and not budget.affords(costs.build):
            break
        found.append((oriented, _search(oriented, start, budget, costs, targets)))
    oriented, searched = max(found, key=lambda f: f[1].objective)
    every_start = tuple(range(oriented.horizon_steps))
    while budget.affords(costs.pack):
        wider = _reorder(oriented, searched, budget, costs, _far_moves)
        if wider is searched:
            # No early stop while the budget lasts and a move is untried: every earlier start
            # of each delayed job, not only the few offsets the rounds try.
            wider = _promote(oriented, searched, budget, costs, gains, offsets=every_start)
            if wider is searched:
                break
        searched = _search(oriented, wider, budget, costs, gains)
    # The searches' plans are compared in their own orientation (a mirror image has the same
    # objective and moves): only the one chosen is turned back and settled.
    chosen = _best([_Scored(o, c.allocation, c.objective) for o, c in [*found, (oriented, searched)]])
    if chosen.instance is not instance:
        chosen = _Scored(instance, _unmirror(instance, chosen.allocation), chosen.objective)
    if settled or budget.affords(costs.settle):
        chosen = _Scored(instance, settle(instance, chosen.allocation))
    return _best([chosen, *floors]).allocation


def _trade_settling(budget: Budget, costs: WorkCosts, *, orders_left: int) -> bool:
    """Whether settling's reservation goes to the job orders left (released, then; else kept).

    Settling buys the objective's tie-break, the fewest real-time moves at equal value. Where
    the first pass leaves no budget for another job order and the reservation affords two,
    they are worth more: on the widened tuning set at 1 ms of work, 20 scenarios better and
    none worse (`wide-large-72` +21.7%, `uniform-priority` seed 1 +5.4%), for 6.7% more
    moves at that budget; from 1.5 ms on, the same plans. Settling then runs if the budget
    still affords it.
    """
    if orders_left <= 0 or budget.affords(costs.pack):
        return False
    budget.release(costs.settle)
    if budget.affords(2 * costs.pack):
        return True
    budget.reserve(costs.settle)
    return False


def _early_promotions(
    instance: Instance,
    first: _Candidate,
    budget: Budget,
    costs: WorkCosts,
    worth: Mapping[str, float],
    *,
    loss: ServicesLoss | None,
    afforded: bool = False,
) -> _Candidate:
    """``first`` with the promotions of the delayed jobs that are expected to gain more than
    :data:`EARLY_GAIN` of its objective (the largest first), if any improves it; more than
    :data:`EARLY_GAIN_AFFORDED` where ``afforded`` (the budget affords the promotion beside the
    first pass's other job orders and the mirror image's first pass). ``worth``: each
    job's run value from its earliest start on the fixed load (:func:`_worth_at_earliest`), an
    upper bound on what its promotion gains; where none is above the threshold, nothing is
    ranked or charged. ``loss``: :class:`ServicesLoss` (None without services)."""
    threshold = (EARLY_GAIN_AFFORDED if afforded else EARLY_GAIN) * abs(first.objective)
    if all(
        worth[job.id] - _run_value(instance, job, _start_or_horizon(instance, first.allocation, job))
        <= threshold
        for job in instance.queued_jobs
    ):
        return first

    def large(instance: Instance, candidate: _Candidate) -> list[BatchJob]:
        ranked = expected_gains(instance, candidate.allocation, loss, rt_objective=candidate.rt_objective)
        return [job for gain, job in ranked[:1] if gain > threshold]

    return _promote(instance, first, budget, costs, large, offsets=PROMISE_OFFSETS[:1])


class _Scored:
    """An allocation of ``instance`` with its objective, and its real-time moves once asked for
    (only a tie needs them)."""

    __slots__ = ("_moves", "allocation", "instance", "objective")

    def __init__(self, instance: Instance, allocation: Allocation, value: float | None = None) -> None:
        self.instance, self.allocation = instance, allocation
        self.objective = objective(instance, allocation) if value is None else value
        self._moves: int | None = None

    @property
    def moves(self) -> int:
        if self._moves is None:
            self._moves = moves(self.instance, self.allocation.realtime)
        return self._moves


def _best(scored: Sequence[_Scored]) -> _Scored:
    """The highest objective; at equal objective, the fewest real-time moves (the objective's
    tie-break), then the first."""
    best = scored[0]
    for other in scored[1:]:
        if other.allocation is best.allocation:
            continue
        if other.objective > best.objective + EPSILON or (
            other.objective >= best.objective - EPSILON and other.moves < best.moves
        ):
            best = other
    return best


def best_of(instance: Instance, allocations: Sequence[Allocation]) -> Allocation:
    """The allocation of the highest objective; at equal objective, the one with the fewest
    real-time moves (the objective's tie-break), then the first."""
    return _best([_Scored(instance, allocation) for allocation in allocations]).allocation


def allocate_at_least_hot_path(instance: Instance, budget: Budget) -> Allocation:
    """The best of the plans within ``budget`` and within a few smaller budgets: the hot
    path's, then twice it, four times, ... up to an eighth of ``budget``.

    More budget can take the searches down another path (the mirror image, another order)
    and end below what a smaller budget finds (on the widened tuning set,
    `wide-oversubscribed-79`'s plan at 4 ms of work is 6% above its plan at 100 ms); callers
    with a larger budget (the plan cycle, the full mode's hint) must never answer worse than
    the hot path would have, nor than the next few budgets, which cost at most a quarter of
    ``budget`` more (on the wall clock they come out of it). A run that afforded every step it
    asked for ends the doubling, and ``budget``'s own run with it: a larger budget would take
    the same path to the same plan.
    """
    run = budget.sibling(HOT_PATH_BUDGET_MS)
    hot = allocate(instance, run)
    doubled = []
    while run.refused and 2 * run.budget_ms <= budget.budget_ms / 8:
        run = budget.sibling(2 * run.budget_ms)
        doubled.append(allocate(instance, run))
    # Unless a first pass alone outlasted ``budget`` (a large cluster): allocate would do it
    # again and nothing more, past the budget a second time.
    own = []
    if run.refused and run.spent < budget.units and (budget.work_only or budget.remaining_s() > 0):
        own.append(allocate(instance, budget))
    return best_of(instance, [hot, *own, *doubled])  # ties: the hot path, then ``budget``'s run


def objective(instance: Instance, allocation: Allocation) -> float:
    """The contract's objective of ``allocation`` up to a constant (running jobs' value is
    left out), without building the grid: for comparing plans of one instance."""
    return realtime_objective(instance, allocation.realtime) + batch_value(instance, allocation.batch)


def _first_pass(
    instance: Instance, orders: Sequence[Sequence[BatchJob]], budget: Budget, costs: WorkCosts
) -> _Candidate:
    """Real-time, then the best packing of ``orders``: it completes unless the wall clock
    has run out before an order after the first (a large cluster on a tight budget)."""
    best = _build(instance, {}, orders[:1])
    budget.charge(costs.build)
    return _other_orders(instance, best, orders[1:], budget, costs)


def _other_orders(
    instance: Instance,
    best: _Candidate,
    orders: Sequence[Sequence[BatchJob]],
    budget: Budget,
    costs: WorkCosts,
) -> _Candidate:
    """``best`` with the best packing of ``orders`` on its real-time holdings (no promises), if
    better: a first pass's orders after its first, unless the wall clock has run out."""
    for order in orders:
        if budget.overdue():
            break
        budget.charge(costs.pack)
        best = _with_batch(instance, best, *_pack(instance, best.busy_before_batch, {}, order), order)
    return best


def _with_batch(
    instance: Instance,
    candidate: _Candidate,
    value: float,
    placements: dict[str, Placement],
    order: Sequence[BatchJob],
) -> _Candidate:
    """``candidate`` with the batch packing ``placements`` (of batch value ``value``), if it is better."""
    if candidate.rt_objective + value <= candidate.objective + EPSILON:
        return candidate
    return replace(
        candidate,
        objective=candidate.rt_objective + value,
        allocation=Allocation(batch=placements, realtime=candidate.allocation.realtime),
        order=order,
        refuted={},
    )


def mirrored(instance: Instance) -> Instance | None:
    """The cluster seen upside down (GPU ``g`` -> ``gpus - 1 - g``), or None where an aligned
    block would not stay aligned (a job size that does not divide the cluster) or where
    nothing is fixed in place (then the mirror is the same problem).

    Services stack at the top and batch fills from the bottom; when running work or
    down GPUs make the other way round pack better, the mirror finds it.
    """
    g = instance.gpus
    if any(g % job.gpus for job in instance.batch_jobs):
        return None
    if not (instance.running_batch or instance.running_realtime or instance.down):
        return None  # nothing fixed in place: the mirror image is the same problem
    return replace(
        instance,
        running_batch={
            job_id: replace(r, first_gpu=g - r.first_gpu - r.gpus)
            for job_id, r in instance.running_batch.items()
        },
        running_realtime={
            job_id: replace(r, gpus=frozenset(g - 1 - gpu for gpu in r.gpus))
            for job_id, r in instance.running_realtime.items()
        },
        down=tuple(replace(w, gpu=g - 1 - w.gpu) for w in instance.down),
    )


def _unmirror(instance: Instance, allocation: Allocation) -> Allocation:
    """An allocation for ``mirrored(instance)`` in ``instance``'s GPU ids."""
    g = instance.gpus
    sizes = {job.id: job.gpus for job in instance.batch_jobs}
    return Allocation(
        batch={
            job_id: Placement(start_step=p.start_step, first_gpu=g - p.first_gpu - sizes[job_id])
            for job_id, p in allocation.batch.items()
        },
        realtime={
            job_id: tuple(int(format(mask, f"0{g}b")[::-1], 2) for mask in masks)
            for job_id, masks in allocation.realtime.items()
        },
    )


Targets = Callable[[Instance, "_Candidate"], list[BatchJob]]


def _search(
    instance: Instance, first: _Candidate, budget: Budget, costs: WorkCosts, targets: Targets
) -> _Candidate:
    """From a first pass, while the budget affords each step: promotions of ``targets``,
    then the order search (each job to the front or one place earlier), again while
    either improves."""
    best = first
    offsets: tuple[int, ...] = PROMISE_OFFSETS[:1]  # the first round: each job's earliest slot only
    while True:
        before = best.objective
        # Promotions cost a real-time re-plan each: a round gets a share of what is left, so
        # that the order search (a pack a move) always has its turn.
        share = budget.spent + PROMOTION_SHARE * (budget.units - budget.spent)
        best = _promote(instance, best, budget, costs, targets, offsets=offsets, until=share)
        best = _reorder(instance, best, budget, costs, _near_moves)
        if best.objective <= before + EPSILON and offsets == PROMISE_OFFSETS:
            return best
        offsets = PROMISE_OFFSETS


def _value_lost(instance: Instance, job: BatchJob, earliest: int, start: int) -> float:
    """What starting ``job`` at ``start`` instead of ``earliest`` costs (its whole run's value
    at the earlier start minus at the later one, cut at the horizon)."""
    return _run_value(instance, job, earliest) - _run_value(instance, job, start)


def _run_value(instance: Instance, job: BatchJob, start: int) -> float:
    """``job``'s run from ``start`` on, cut at the horizon (0 from the horizon on)."""
    horizon = instance.horizon_steps
    if start >= horizon:
        return 0.0
    return job.priority * job.gpus * sum(instance.weights[start : job.end_step(start, horizon)])


def most_delayed(instance: Instance, allocation: Allocation) -> list[BatchJob]:
    """Queued jobs that start later than the fixed load (down GPUs, running jobs) allows, the
    one whose delay costs the most value first."""
    delayed = [
        (-_value_lost(instance, job, run[0], start), job.order, job)
        for job, run, start in _delays(instance, allocation)
    ]
    return [job for *_, job in sorted(delayed, key=lambda d: (d[0], d[1]))]


def most_gain(
    instance: Instance,
    allocation: Allocation,
    loss: ServicesLoss | None = None,
    *,
    rt_objective: float | None = None,
) -> list[BatchJob]:
    """The jobs of :func:`most_delayed`, the one a promotion to its earliest start is expected
    to gain the most first: its own delay's cost saved, less the delay of the planned jobs
    whose cells it would take, each pushed to start when it ends (on the block of the earliest
    run where that is least, of the first :data:`MAX_BLOCK_CANDIDATES`).

    A job the services cannot make room for at less than that gain (what they must lose at
    least with its block taken, :class:`ServicesLoss`, beyond what they lose in
    ``allocation``, whose services' objective is ``rt_objective``) is ranked by the best of the later
    starts the promotions try (:data:`PROMISE_OFFSETS`), where it may pay, and after every
    other job where none does: its promotion would be tried and refuted first, and at 2 ms
    that spends the budget of the jobs after it. ``loss`` and ``rt_objective`` are computed
    here unless given (the fast mode builds ``loss`` once a plan)."""
    return [job for _, job in expected_gains(instance, allocation, loss, rt_objective=rt_objective)]


def expected_gains(
    instance: Instance,
    allocation: Allocation,
    loss: ServicesLoss | None = None,
    *,
    rt_objective: float | None = None,
) -> list[tuple[float, BatchJob]]:
    """:func:`most_gain`'s ranking with each job's expected gain, the largest first."""
    horizon = instance.horizon_steps
    worth = list(accumulate(instance.weights, initial=0.0))  # worth[t]: the weights before t
    jobs = instance.jobs_by_id

    def run_value(job: BatchJob, start: int) -> float:
        if start >= horizon:
            return 0.0
        return job.priority * job.gpus * (worth[job.end_step(start, horizon)] - worth[start])

    # Per planned job: its id, start, end, first GPU, GPUs, duration and value per weight.
    planned = []
    for job_id, placed in allocation.batch.items():
        other = jobs[job_id]
        assert isinstance(other, BatchJob)
        begin = placed.start_step
        planned.append(
            (
                job_id,
                begin,
                other.end_step(begin, horizon),
                placed.first_gpu,
                other.gpus,
                other.duration_steps,
                other.priority * other.gpus,
            )
        )
    ranked = []
    if loss is None and instance.realtime_jobs:
        loss = ServicesLoss(instance)
    lost_now: float | None = None  # what the services lose in ``allocation``, when first needed

    def services_lose(gpus: int, begin: int, end: int) -> float:
        """What the services must lose at least beyond what they lose now."""
        nonlocal lost_now
        assert loss is not None
        least = loss(gpus, begin, end)
        if least <= 0:
            return 0.0
        if lost_now is None:
            served = rt_objective
            if served is None:
                served = realtime_objective(instance, allocation.realtime)
            lost_now = loss.served_all - served
        return max(0.0, least - lost_now)

    for job, (earliest, end, starts), start in _delays(instance, allocation):
        size = job.gpus
        displaced: dict[int, float] = {}  # per aligned block of ``size`` GPUs
        for job_id, begin, finish, first, gpus, duration, rate in planned:
            if begin >= end or finish <= earliest or job_id == job.id:
                continue
            # Its value lost, pushed to start at ``end`` (nothing from the horizon on).
            lost = rate * (worth[finish] - worth[begin])
            if end < horizon:
                lost -= rate * (worth[min(end + duration, horizon)] - worth[end])
            for block in range(first - first % size, first + gpus, size):
                displaced[block] = displaced.get(block, 0.0) + lost
        least = (
            min(displaced.get(a, 0.0) for a in islice(iter_gpus(starts), MAX_BLOCK_CANDIDATES))
            if displaced
            else 0.0
        )
        kept = run_value(job, start) + least  # what the promotion gives up
        gain = run_value(job, earliest) - kept
        hopeless = False
        if loss is not None and gain <= (at_earliest := services_lose(size, earliest, end)):
            # The services cannot make room at its earliest start for less than it gains there.
            gain = 0.0
            for offset in PROMISE_OFFSETS[1:]:
                if (later := earliest + offset) >= start:
                    break
                later_gain = run_value(job, later) - kept
                gain = max(gain, later_gain - services_lose(size, later, job.end_step(later, horizon)))
            if gain <= 0:
                gain, hopeless = gain - at_earliest, True
        ranked.append((hopeless, -gain, job.order, job))
    return [(-gain, job) for _, gain, _, job in sorted(ranked, key=lambda r: r[:3])]


class ServicesLoss:
    """What the services must lose at least when a block of ``gpus`` GPUs is taken over steps
    ``[begin, end)``: per step, their summed demand beyond the GPUs that the fixed load and the
    block leave, at the cheapest service's cost (the figure :func:`_may_pay` filters trades
    by). A lookup into prefix sums, one per block size asked for, each built when first asked
    for; the mirror image's are the same."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.sums: dict[int, list[float]] = {}

    @cached_property
    def served_all(self) -> float:
        """The services' objective with all their demand served."""
        return _served_all(self.instance)

    @cached_property
    def _beyond(self) -> list[int]:
        """Per step, the demand beyond the GPUs the fixed load leaves (negative: room to spare)."""
        instance = self.instance
        return [
            want - instance.gpus + (down | running).bit_count()
            for want, down, running in zip(
                instance.realtime_demand, instance.down_masks, instance.running_masks, strict=True
            )
        ]

    def __call__(self, gpus: int, begin: int, end: int) -> float:
        if (excess := self.sums.get(gpus)) is None:
            instance = self.instance
            cheapest = _unserved_cost(instance)
            excess = self.sums[gpus] = list(
                accumulate(
                    (
                        cheapest * w * (b + gpus) if b + gpus > 0 else 0.0
                        for w, b in zip(instance.weights, self._beyond, strict=True)
                    ),
                    initial=0.0,
                )
            )
        return excess[end] - excess[begin]


def _delays(instance: Instance, allocation: Allocation) -> list[tuple[BatchJob, tuple[int, int, int], int]]:
    """Per queued job that starts later than the fixed load allows: the job, its earliest run
    on the fixed load (:meth:`Board.earliest_run`) and its start (the horizon when unplaced)."""
    fixed = Board(instance)
    delayed = []
    for job in instance.queued_jobs:
        run = fixed.earliest_run(job, job.release_step)
        if run is None:
            continue
        start = _start_or_horizon(instance, allocation, job)
        if start > run[0]:
            delayed.append((job, run, start))
    return delayed


def _by_priority(instance: Instance, allocation: Allocation) -> list[BatchJob]:
    """Queued jobs that start after their release (or not at all), highest priority first."""
    horizon = instance.horizon_steps
    return [
        job
        for job in sorted(instance.queued_jobs, key=lambda j: (-j.priority, j.order))
        if ((p := allocation.batch.get(job.id)) is None and job.release_step < horizon)
        or (p is not None and p.start_step > job.release_step)
    ]


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
    around them, keep what improves."""
    best = first
    promises: dict[str, Placement] = dict(first.committed)
    need: _Need | None = None  # computed when first asked for
    # A trade (a promotion that leaves more real-time demand unserved) that improves waits for
    # the end of its round: a promotion that does not trade, if the round finds one, goes first,
    # and the trade is then taken only if it is worth more than the plan they reached (always
    # taking them lost 9% of a 4 ms plan to a promotion that gained 0.1%).
    traded: tuple[_Candidate, dict[str, Placement]] | None = None

    def done() -> _Candidate:
        return best if traded is None or traded[0].objective <= best.objective + EPSILON else traded[0]

    def attempt(job: BatchJob, latest: int, promise: Placement, pins: Mapping[str, Placement]) -> _Trial:
        """``best`` re-planned around ``promise`` (and ``pins``, the planned jobs held in place),
        if the budget affords the check and the re-plan and the check says it may improve."""
        nonlocal need
        committed = {**promises, **pins, job.id: promise}
        if not budget.affords(costs.check):
            return _Trial(stop=True)
        budget.charge(costs.check)
        need = need or _realtime_need(instance)
        in_the_way = _in_the_way(instance, best.allocation, committed)
        lost = _value_lost(instance, job, promise.start_step, latest)
        if not _worth_building(instance, best, committed, in_the_way, need=need, gain=lost):
            return _Trial()
        replan = costs.replan(len(in_the_way))
        if not budget.affords(replan) or budget.spent > until:
            return _Trial(stop=True)
        budget.charge(replan)
        try:
            trial = _rebuild(instance, best, committed, in_the_way)
        except InfeasiblePromiseError:
            return _Trial()
        return _Trial(candidate=_unpinned(instance, trial, pins) if pins else trial)

    def judge(key: tuple[str, int, int, bool], trial: _Candidate | None) -> tuple[bool, bool]:
        """Whether ``trial`` improves ``best``, and whether it trades; a promise that does not
        improve is remembered with ``best`` (True: the services made no room, or it traded)."""
        gains = trial is not None and trial.objective > best.objective + EPSILON
        trades = trial is not None and trial.rt_shortfall > best.rt_shortfall
        if not gains:
            best.refuted[key] = trial is None or trades
        return gains, trades

    improved, improved_plainly = True, False

    def keep(trial: _Candidate, trades: bool) -> None:
        """Take ``trial``, which improves ``best``: at once when it trades nothing, else as the
        round's trade if it is worth more than the one found before."""
        nonlocal best, promises, traded, improved, improved_plainly
        if not trades:
            best, promises, improved, improved_plainly = trial, dict(trial.committed), True, True
        elif traded is None or trial.objective > traded[0].objective:
            traded, improved = (trial, dict(trial.committed)), True

    def step_later(job: BatchJob, latest: int, start: int, trade: _Candidate, tried: set[int]) -> bool:
        """After ``trade``, a promise of ``job`` at ``start`` that gains by a trade: the same job one
        step later, on the block real-time uses least there (False: the budget ran out). Not after
        a trade held in place (tuning, 4 ms: `wide-large-70` -1.5%, nothing better).

        A start can be a step too early for the services in the way to move out within their
        caps: one step later they may, and no trade is needed (on tuning seed 60 of
        `wide-oversubscribed`, 12% more at 2 ms). Tried where the step's delay costs the job less
        than the trade costs the services."""
        later = start + 1
        if (
            later >= latest
            or later in tried
            or _value_lost(instance, job, start, later) >= best.rt_objective - trade.rt_objective
            or not budget.affords(costs.slots)
        ):
            return True
        budget.charge(costs.slots)
        blocks = _blocks_at(_promise_board(instance, job, promises), best.allocation, job, later)
        if not blocks or (key := (job.id, later, blocks[0].first_gpu, False)) in best.refuted:
            return True
        outcome = attempt(job, latest, blocks[0], {})
        if outcome.stop:
            return False
        gains, trades = judge(key, outcome.candidate)
        if gains:
            assert outcome.candidate is not None
            keep(outcome.candidate, trades)
        return True

    while improved:
        if traded is not None and (not improved_plainly or traded[0].objective > best.objective + EPSILON):
            best, promises = traded
        traded, improved, improved_plainly = None, False, False
        if not budget.affords(costs.delays):
            return done()
        budget.charge(costs.delays)  # the fixed load's earliest starts, one run search a job
        for job in targets(instance, best):
            latest = _start_or_horizon(instance, best.allocation, job)
            if not budget.affords(costs.slots) or budget.spent > until:
                return done()
            budget.charge(costs.slots)  # finding the slots reads the real-time holdings
            slots = _earlier_slots(instance, best.allocation, job, promises, before=latest, offsets=offsets)
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
                known = best.refuted.get(key)  # None: not tried from this plan yet
                if known is False:
                    continue
                trial: _Candidate | None = None
                if known is None:  # (True: tried, and the services made no room)
                    outcome = attempt(job, latest, promise, {})
                    if outcome.stop:
                        return done()
                    trial = outcome.candidate
                # A trade is taken when the exact objective says it pays: the contract prices an
                # unserved GPU-step at (1 + rt_penalty) x priority, and the plan cycle and the
                # full mode trade at that price too.
                gains, trades = judge(key, trial)
                if gains and trades:
                    assert trial is not None
                    keep(trial, trades)
                    if not step_later(job, latest, promise.start_step, trial, tried):
                        return done()
                    break
                if trial is None or trades:
                    # Another block at the same start may leave the services room; else the
                    # next step may be early enough to gain and late enough for them to move,
                    # on the same blocks first (on the held-out `wide-oversubscribed-90003`, a
                    # 22-hour job a step after the service it displaces has moved: +12% at 2 ms).
                    if rest:
                        queue.insert(0, rest)
                        continue
                    later = promise.start_step + 1
                    if retries and later < latest and later not in tried and budget.affords(costs.slots):
                        retries -= 1
                        budget.charge(costs.slots)
                        fixed = _promise_board(instance, job, promises)
                        if at_later := _blocks_at(fixed, best.allocation, job, later, first=tried_blocks):
                            queue.insert(0, at_later)
                    continue
                if gains:
                    assert trial is not None
                    keep(trial, trades)
                    break
            else:
                # Nothing gained: the earliest start again, on the block where the ranking expects
                # the planned jobs it overlaps to lose least, the planned jobs beside it held in
                # place: else the services in that block's way move onto their cells and push
                # them later (on `long-blockers-30`, a 19-hour job worth more than the service).
                if not slots or not instance.realtime_jobs:
                    continue
                start = slots[0][0].start_step
                gain = _value_lost(instance, job, start, latest)
                if gain <= 0 or not budget.affords(costs.slots):
                    continue
                budget.charge(costs.slots)
                held = _held_promise(instance, best.allocation, job, promises, start)
                if held is None or held.displaced >= gain:
                    continue
                promise, pins = held.promise, held.pins
                key = (job.id, promise.start_step, promise.first_gpu, True)
                if key in best.refuted:
                    continue
                outcome = attempt(job, latest, promise, pins)
                if outcome.stop:
                    return done()
                trial = outcome.candidate
                gains, trades = judge(key, trial)
                if gains and trial is not None:
                    keep(trial, trades)
    return done()


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


def _unpinned(instance: Instance, candidate: _Candidate, pins: Mapping[str, Placement]) -> _Candidate:
    """``candidate``, built with ``pins`` among its promises, with them free to move again in
    later searches (its plan keeps them where they are)."""
    pinned = placement_masks(instance, pins)
    return replace(
        candidate,
        committed={job_id: p for job_id, p in candidate.committed.items() if job_id not in pins},
        busy_before_batch=tuple(
            busy & ~mask for busy, mask in zip(candidate.busy_before_batch, pinned, strict=True)
        ),
    )


def _worth_building(
    instance: Instance,
    best: _Candidate,
    committed: Mapping[str, Placement],
    in_the_way: Sequence[RealtimeJob],
    *,
    need: _Need,
    gain: float,
) -> bool:
    """Whether ``best`` re-planned around the ``committed`` promises may improve it: no service
    is in their way, or the GPUs they leave may hold the real-time demand ``best`` serves, or
    else it is a trade that may pay (:func:`_may_pay`, with ``gain`` the promoted job's own).
    Otherwise the re-plan would leave more demand unserved than ``best`` at a loss."""
    if not in_the_way:
        return True
    taken = batch_masks(instance, committed)
    free = free_counts(instance, taken)
    return _shortfall_floor(instance, taken, free, need) <= best.rt_shortfall or _may_pay(
        instance, free, need, best, gain
    )


def _start_or_horizon(instance: Instance, allocation: Allocation, job: BatchJob) -> int:
    """``job``'s start in ``allocation``, or the horizon when it is not placed."""
    current = allocation.batch.get(job.id)
    return instance.horizon_steps if current is None else current.start_step


def _in_the_way(
    instance: Instance, allocation: Allocation, committed: Mapping[str, Placement]
) -> tuple[RealtimeJob, ...]:
    """The services that hold GPUs of the ``committed`` blocks in ``allocation``."""
    promised = placement_masks(instance, committed)
    return tuple(
        service
        for service in instance.realtime_jobs
        if any(held & mask for held, mask in zip(allocation.realtime[service.id], promised, strict=True))
    )


def _rebuild(
    instance: Instance,
    candidate: _Candidate,
    committed: Mapping[str, Placement],
    in_the_way: Sequence[RealtimeJob],
) -> _Candidate:
    """``candidate`` around the ``committed`` blocks: the services ``in_the_way`` of them
    re-planned (:func:`place_realtime`), the others keeping their GPUs, and every other batch
    job re-packed in ``candidate``'s order. With every service in the way, this is
    :func:`_build`; with none, a re-pack."""
    if len(in_the_way) == len(instance.realtime_jobs):
        return _build(instance, committed, [candidate.order])
    board = Board(instance)
    promised = placement_masks(instance, committed)
    realtime = dict(candidate.allocation.realtime)
    replanned = {service.id for service in in_the_way}
    kept = [0] * instance.horizon_steps
    for service_id, masks in realtime.items():
        if service_id not in replanned:
            kept = [k | m for k, m in zip(kept, masks, strict=True)]
    board.busy = [b | p | k for b, p, k in zip(board.busy, promised, kept, strict=True)]
    if in_the_way:
        # The kept services' GPUs are as good as down for the re-planned ones: left in time.
        blocked = [d | p | k for d, p, k in zip(instance.down_masks, promised, kept, strict=True)]
        realtime.update(place_realtime(instance, board, BlockedSchedule(blocked), in_the_way))
    value, placements = _pack(instance, board.busy, committed, candidate.order)
    rt_objective = realtime_objective(instance, realtime)
    return _Candidate(
        objective=rt_objective + value,
        allocation=Allocation(batch=placements, realtime=realtime),
        rt_objective=rt_objective,
        order=candidate.order,
        rt_shortfall=_shortfall(instance, realtime),
        committed=committed,
        busy_before_batch=tuple(board.busy),
    )


def free_counts(instance: Instance, taken: Sequence[int]) -> list[int]:
    """Per step, the GPUs that ``taken`` (per-step masks) leaves."""
    return [instance.gpus - mask.bit_count() for mask in taken]


def _shortfall_floor(instance: Instance, taken: Sequence[int], free: Sequence[int], need: _Need) -> int:
    """A lower bound on the real-time GPU-steps a plan around promised blocks leaves unserved
    (or, where it is larger, a sign that no plan can follow the swap caps), the largest of:
    per step, the services' demand beyond the GPUs that down windows, running jobs and the
    promises leave, summed; the most their least curves go beyond those GPUs at any one step
    (a service below its curve at a step is short of demand by as much at a later one, or has
    shed faster than its cap allows); and, summed over the services running at step 0, what
    each cannot reach from its running GPUs (every one the blocks take at step 0 is a change
    of its cap, and it grows by at most its cap a step). ``taken``: per step, the GPUs the
    promises take with the fixed load (:func:`~scheduler.model.batch_masks`), ``free`` the GPUs
    they leave; ``need``: :func:`_realtime_need`."""
    demand, curves = need.demand, need.curves
    unserved = sum(max(0, need - room) for need, room in zip(demand, free, strict=True))
    short = 0
    for service in instance.realtime_jobs:
        running = instance.running_realtime.get(service.id)
        if running is None:
            continue
        cap = service.swap_cap
        forced = (running.mask & taken[0]).bit_count()
        reach = running.mask.bit_count() - forced + max(0, cap - forced)
        for t, (want, room) in enumerate(zip(service.demand, free, strict=True)):
            short += max(0, want - min(reach + cap * t, room))
    return max(unserved, short, *(need - room for need, room in zip(curves, free, strict=True)))


class _Need(NamedTuple):
    """The services' demand and least swap-capped curves per step, summed; their objective
    with all demand served; and the least an unserved GPU-step costs before its step's weight
    (the value it would have earned and its penalty, for the cheapest service)."""

    demand: Sequence[int]
    curves: list[int]
    served_all: float
    cheapest: float


def _realtime_need(instance: Instance) -> _Need:
    curves = [0] * instance.horizon_steps
    for job in instance.realtime_jobs:
        running = instance.running_realtime.get(job.id)
        curve = swap_capped_curve(job.demand, job.swap_cap, running.mask.bit_count() if running else None)
        curves = [total + step for total, step in zip(curves, curve, strict=True)]
    return _Need(instance.realtime_demand, curves, _served_all(instance), _unserved_cost(instance))


def _served_all(instance: Instance) -> float:
    """The services' objective with all their demand served."""
    served_all = 0.0
    for job in instance.realtime_jobs:
        for weight, want in zip(instance.weights, job.demand, strict=True):
            served_all += job.priority * weight * want
    return served_all


def _unserved_cost(instance: Instance) -> float:
    """The least an unserved GPU-step costs before its step's weight: the value it would have
    earned and its penalty, for the cheapest service (0 without services)."""
    return min((job.priority for job in instance.realtime_jobs), default=0.0) * (1 + instance.rt_penalty)


def _may_pay(instance: Instance, free: Sequence[int], need: _Need, best: _Candidate, gain: float) -> bool:
    """Whether a promotion that must leave more real-time demand unserved than ``best`` could
    pay for it with ``gain``, the promoted job's own: the least the services would then lose
    (per step, the demand beyond the GPUs the promises and the fixed load leave, at the
    cheapest service's cost) beyond what they lose in ``best`` is below it. Re-packing the
    other jobs can gain more, so this is a filter on which trades to build, not a bound."""
    weights = instance.weights
    least_loss = need.cheapest * sum(
        w * max(0, d - room) for w, d, room in zip(weights, need.demand, free, strict=True)
    )
    lost_now = need.served_all - best.rt_objective
    return gain > least_loss - lost_now + EPSILON


def _build(
    instance: Instance, committed: Mapping[str, Placement], orders: Sequence[Sequence[BatchJob]]
) -> _Candidate:
    """Real-time around the committed blocks, then every other batch job greedily, in the
    best of ``orders``."""
    board = Board(instance)
    promised = placement_masks(instance, committed)
    blocked = [down | mask for down, mask in zip(instance.down_masks, promised, strict=True)]
    board.busy = [busy | mask for busy, mask in zip(board.busy, promised, strict=True)]
    realtime = place_realtime(instance, board, BlockedSchedule(blocked))
    packed = [(*_pack(instance, board.busy, committed, order), order) for order in orders]
    value, placements, order = max(packed, key=lambda p: p[0])
    rt_objective = realtime_objective(instance, realtime)
    return _Candidate(
        objective=rt_objective + value,
        allocation=Allocation(batch=placements, realtime=realtime),
        rt_objective=rt_objective,
        order=order,
        rt_shortfall=_shortfall(instance, realtime),
        committed=committed,
        busy_before_batch=tuple(board.busy),
    )


def _shortfall(instance: Instance, realtime: Mapping[str, Sequence[int]]) -> int:
    """Demanded real-time GPU-steps that ``realtime`` leaves unserved."""
    return sum(
        max(0, need - mask.bit_count())
        for job in instance.realtime_jobs
        for need, mask in zip(job.demand, realtime[job.id], strict=True)
    )


OrderMoves = Callable[[Sequence[BatchJob]], Iterator[list[BatchJob]]]


def _near_moves(order: Sequence[BatchJob]) -> Iterator[list[BatchJob]]:
    """Each job to the front, or one place earlier."""
    for i in range(1, len(order)):
        yield [order[i], *order[:i], *order[i + 1 :]]
        if i > 1:
            yield [*order[: i - 1], order[i], order[i - 1], *order[i + 1 :]]


def _far_moves(order: Sequence[BatchJob]) -> Iterator[list[BatchJob]]:
    """Each job to every earlier place that :func:`_near_moves` does not try."""
    for i in range(2, len(order)):
        for j in range(1, i - 1):
            yield [*order[:j], order[i], *order[j:i], *order[i + 1 :]]


def _reorder(
    instance: Instance, candidate: _Candidate, budget: Budget, costs: WorkCosts, moves_of: OrderMoves
) -> _Candidate:
    """Local search over the batch order (real-time stays as it is): the first of
    ``moves_of(order)`` that improves is taken, until none does."""
    busy, committed = candidate.busy_before_batch, candidate.committed
    best = candidate
    improved = True
    while improved:
        improved = False
        for trial_order in moves_of(best.order):
            if not budget.affords(costs.pack):
                return best
            budget.charge(costs.pack)
            trial = _with_batch(instance, best, *_pack(instance, busy, committed, trial_order), trial_order)
            if trial is not best:
                best, improved = trial, True
                break
    return best


def _pack(
    instance: Instance, busy: Sequence[int], committed: Mapping[str, Placement], order: Sequence[BatchJob]
) -> tuple[float, dict[str, Placement]]:
    """Batch value and placements of packing ``order`` greedily on top of ``busy``."""
    trial = Board(instance)
    trial.busy = list(busy)
    placements = {**committed, **place_batch(trial, [j for j in order if j.id not in committed])}
    return batch_value(instance, placements), placements


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


# --- real-time -------------------------------------------------------------------------------


def place_realtime(
    instance: Instance, board: Board, blocked: BlockedSchedule, services: Sequence[RealtimeJob] | None = None
) -> dict[str, tuple[int, ...]]:
    """Hold each service's curve (of ``services``, default all), stacked from the highest GPU
    ids; marks the board.

    Raises :class:`InfeasiblePromiseError` when a blocked schedule (down windows and promised
    batch blocks) would need more changes in one step than a job's swap cap.
    """
    jobs = sorted(instance.realtime_jobs if services is None else services, key=lambda j: -j.priority)
    curves = {}
    previous: dict[str, int | None] = {}
    for job in jobs:
        running = instance.running_realtime.get(job.id)
        previous[job.id] = running.mask if running else None
        curves[job.id] = swap_capped_curve(
            job.demand, job.swap_cap, running.mask.bit_count() if running else None
        )
    held: dict[str, list[int]] = {job.id: [] for job in jobs}
    # Per service what each step reads (this loop runs for every service and step).
    per_service = [(i, job, job.id, curves[job.id], held[job.id], job.demand) for i, job in enumerate(jobs)]
    all_mask, busy = board.all_mask, board.busy
    for t in range(instance.horizon_steps):
        # A GPU a service held a step before stays its own until the service has decided on
        # this step; one it gives up is free for the services after it to grow into (not to
        # move into: that would be churn that buys nothing).
        undecided = 0
        for mask in previous.values():
            undecided |= mask or 0
        held_before = undecided
        taken_now = 0
        stolen: dict[str, int] = {}  # GPUs a service loses this step to a higher-priority one
        for i, job, job_id, curve, holdings, demand in per_service:
            before = previous[job_id]
            lost = stolen.get(job_id, 0)
            undecided &= ~(before or 0)
            grow_into = all_mask & ~(busy[t] | taken_now | undecided | (before or 0))
            current = _step_realtime(
                job,
                t,
                previous=None if before is None else before & ~lost,
                lost=lost.bit_count(),
                curve=curve,
                free=grow_into & ~held_before,
                grow_into=grow_into,
                downs=blocked,
            )
            if before is not None and current.bit_count() < demand[t]:
                current = _take_from_lower(
                    job,
                    t,
                    current,
                    before=before,
                    others=jobs[i + 1 :],
                    previous=previous,
                    stolen=stolen,
                    busy=busy[t],
                    downs=blocked,
                )
            taken_now |= current
            holdings.append(current)
        for _, _, job_id, _, holdings, _ in per_service:
            previous[job_id] = holdings[t]
        busy[t] |= taken_now
    return {job_id: tuple(masks) for job_id, masks in held.items()}


def _take_from_lower(
    job: RealtimeJob,
    t: int,
    current: int,
    *,
    before: int,
    others: Sequence[RealtimeJob],
    previous: Mapping[str, int | None],
    stolen: dict[str, int],
    busy: int,
    downs: BlockedSchedule,
) -> int:
    """``current`` grown toward ``job``'s demand with GPUs that services of lower priority
    held a step before (idle ones first, then the lowest priority's), within both swap caps:
    a shortfall costs in proportion to priority, so the lower service should bear it.
    The GPUs taken are recorded in ``stolen`` for the services placed after ``job``."""
    spare = job.swap_cap - (current ^ before).bit_count()
    need = job.demand[t] - current.bit_count()

    def idle_first(victim: RealtimeJob) -> tuple[bool, float]:
        held = (previous[victim.id] or 0) & ~stolen.get(victim.id, 0)
        return held.bit_count() <= victim.demand[t], victim.priority

    for victim in sorted((v for v in others if v.priority < job.priority), key=idle_first):
        held_before = previous[victim.id]
        if need <= 0 or spare <= 0:
            break
        if held_before is None:
            continue
        taken = stolen.get(victim.id, 0)
        room = (
            victim.swap_cap - downs.must_drop(held_before, t, victim.swap_cap).bit_count() - taken.bit_count()
        )
        for gpu in iter_gpus_down(held_before & ~taken & ~busy & ~downs.ever_down):
            if need <= 0 or spare <= 0 or room <= 0:
                break
            current |= 1 << gpu
            taken |= 1 << gpu
            need, spare, room = need - 1, spare - 1, room - 1
        stolen[victim.id] = taken
    return current


def _step_realtime(
    job: RealtimeJob,
    t: int,
    *,
    previous: int | None,
    lost: int = 0,
    curve: list[int],
    free: int,
    grow_into: int | None = None,
    downs: BlockedSchedule,
) -> int:
    """The GPUs ``job`` holds at step ``t``, at most ``swap_cap`` changes away from ``previous``.

    ``free`` are the GPUs nobody holds at ``t`` or held at ``t - 1`` (so adding one never
    forces another service to give it up); ``grow_into`` (default ``free``) are those it may
    add to reach its curve, GPUs others gave up at ``t`` included. ``previous`` is without the ``lost`` GPUs a
    service of higher priority took at ``t`` (each one change of the cap).
    """
    if previous is None:
        current, budget = 0, UNLIMITED
    else:
        forced = downs.must_drop(previous, t, job.swap_cap)
        if forced.bit_count() > job.swap_cap:
            raise InfeasiblePromiseError(job.id)
        current = previous & ~forced
        budget = job.swap_cap - forced.bit_count() - lost
    want = curve[t]
    have = current.bit_count()
    if have > want and budget > 0:
        # Shed the GPUs that go down soonest, then the lowest ids: the stack stays at the top.
        order = sorted(gpus_of(current), key=lambda g: (downs.next_down(g, t + 1) or UNLIMITED, g))
        for gpu in order[: min(have - want, budget)]:
            current &= ~(1 << gpu)
            budget -= 1
    elif have < want and budget > 0:
        level_end = _level_end(curve, t, have + 1)
        room = min(want - have, budget)
        candidates = (free if grow_into is None else grow_into) & ~current
        for gpu in iter_gpus_down(candidates):
            if room == 0:
                break
            bit = 1 << gpu
            if downs.ever_down & bit and not (
                downs.up_through(gpu, t, level_end) and downs.still_reachable(current | bit, t, job.swap_cap)
            ):
                continue
            current |= bit
            room -= 1
            budget -= 1
        # Still short: GPUs taken away (down, or promised) before the level ends, for as
        # long as they are up, if they can still be shed in time; demand is served meanwhile.
        for gpu in iter_gpus_down(candidates & downs.ever_down & ~current if room else 0):
            if room == 0:
                break
            bit = 1 << gpu
            if downs.still_reachable(current | bit, t, job.swap_cap):
                current |= bit
                room -= 1
                budget -= 1
    if previous is not None and budget > 0:
        # GPUs that stay up (and unpromised) for the rest of the horizon: a GPU whose down
        # window is over is as good as one never down (treating it as doomed all day pushed
        # the services down into the batch blocks). Both moves are tried only where they
        # can do something (this runs for every service and step).
        room = free & ~downs.blocked_from[t] & ~current  # free, never blocked later, not held
        doomed = current & downs.blocked_from[t + 1]  # held, and taken away later
        if room and doomed:
            current, budget = _evacuate_early(current, doomed, room, budget, t, downs=downs, cap=job.swap_cap)
            room &= ~current
        if budget and room >= current & -current:  # a free GPU above the lowest held
            current = _compact(current, room, budget)
    return current


def _evacuate_early(
    current: int, doomed_gpus: int, room: int, budget: int, t: int, *, downs: BlockedSchedule, cap: int
) -> tuple[int, int]:
    """Spend spare swap budget replacing held GPUs that will be taken away later.

    Leaving a GPU at the last moment (the earliest-deadline rule) spends the whole cap
    on drops and leaves none for replacements; moving early enough, one GPU in before one
    out, keeps demand covered. ``doomed_gpus``: the held GPUs blocked at some later step;
    ``room``: the GPUs free now, never blocked later and not held; ``cap`` is the service's
    swap cap.
    """
    doomed = sorted((d, g) for g in gpus_of(doomed_gpus) if (d := downs.next_down(g, t + 1)) is not None)
    # Just in time: the i-th GPU to go (by deadline) is replaced once the changes that the
    # first i replacements need (one in, one out each) no longer fit in the cap's steps before
    # it goes. Moving at the first spare change instead (16 hours early, say) took the safe
    # GPUs, often a whole batch block, for the rest of the day (tuning split, 2 ms: 59 of 210
    # scenarios better, 10 worse).
    doomed = [(d, g) for i, (d, g) in enumerate(doomed, start=1) if d - t <= -(-2 * i // max(cap, 1))]
    for (_, gpu), replacement in zip(doomed, iter_gpus_down(room), strict=False):
        if budget == 0:
            break
        current |= 1 << replacement
        budget -= 1
        if budget:
            current &= ~(1 << gpu)  # with one change to spare, the doomed GPU is shed next step
            budget -= 1
    return current, budget


def _compact(current: int, room: int, budget: int) -> int:
    """Spend spare swap budget moving the lowest held GPU up to a higher one of ``room``
    (free, not held).

    The services then stay packed at the top and leave whole aligned blocks below for
    batch work. With two changes to spare the move is done now; with one, the new GPU
    is added now and the low one is shed next step (the lowest id goes first), so
    demand stays covered throughout.
    """
    for gpu in iter_gpus_down(room):
        if budget == 0 or not current:
            break
        lowest = current & -current
        if 1 << gpu < lowest:
            break
        current |= 1 << gpu
        if budget >= 2:
            current &= ~lowest
            budget -= 2
        else:
            budget -= 1
    return current


def _level_end(curve: list[int], t: int, level: int) -> int:
    """First step after ``t`` where the curve drops below ``level``: when a GPU added now is freed."""
    for u in range(t + 1, len(curve)):
        if curve[u] < level:
            return u
    return len(curve)


# --- batch -----------------------------------------------------------------------------------


def _job_orders(instance: Instance, worth: Mapping[str, float] | None = None) -> list[list[BatchJob]]:
    """Job orders to try; the best packing of them wins (each order suits other mixes).
    ``worth``: :func:`_worth_at_earliest`, computed when not given."""
    worth = _worth_at_earliest(instance) if worth is None else worth
    keys: list[Callable[[BatchJob], tuple[float, ...]]] = [
        lambda j: (-j.priority, -j.gpus * j.duration_steps, j.order),
        # what a job's whole run is worth from the earliest start the fixed load allows:
        # where the decay is steep, a job that can start now beats a larger later one
        lambda j: (-worth[j.id], j.order),
        lambda j: (-j.priority, -j.gpus, -j.duration_steps, j.order),
        lambda j: (-j.priority, j.release_step, j.order),
        # value per step first: wide jobs of a good priority before narrow urgent ones
        lambda j: (-j.priority * j.gpus, -j.duration_steps, j.order),
        # widest first (first-fit decreasing): keeps room for the blocks hardest to place
        lambda j: (-j.gpus, -j.priority, -j.duration_steps, j.order),
    ]
    if instance.has_promises:
        # promised jobs first, in the order of their promises: each keeps its start if it can
        keys.insert(
            0,
            lambda j: (j.promise_step is None, j.promise_step or 0, -j.priority, j.order),
        )
    orders: list[list[BatchJob]] = []
    for key in keys:
        order = sorted(instance.queued_jobs, key=key)
        if order not in orders:
            orders.append(order)
    return orders


def _worth_at_earliest(instance: Instance) -> dict[str, float]:
    """Per queued job, its run's value from the earliest start that down GPUs, running jobs
    and its release allow (0 when it fits nowhere)."""
    fixed = Board(instance)
    weights = instance.weights
    worth = {}
    for job in instance.queued_jobs:
        run = fixed.earliest_run(job, job.release_step)
        worth[job.id] = 0.0 if run is None else job.priority * job.gpus * sum(weights[run[0] : run[1]])
    return worth


def batch_value(instance: Instance, placements: Mapping[str, Placement]) -> float:
    """The placed jobs' value, less what delays past promises cost (the jobs left out included)."""
    weights = instance.weights
    jobs = instance.jobs_by_id
    total = 0.0
    for job_id, placement in placements.items():
        job = jobs[job_id]
        assert isinstance(job, BatchJob)
        start = placement.start_step  # (the slice stops at the horizon, as the run does)
        total += job.priority * job.gpus * sum(weights[start : start + job.duration_steps])
    if instance.has_promises:
        for job in instance.queued_jobs:
            placed = placements.get(job.id)
            total -= instance.promise_cost(job, None if placed is None else placed.start_step)
    return total


def place_batch(board: Board, jobs: Sequence[BatchJob]) -> dict[str, Placement]:
    """Each job in turn at its earliest feasible start, on the best-fitting free block."""
    placements: dict[str, Placement] = {}
    for job in jobs:
        run = board.earliest_run(job, job.release_step)
        if run is None:
            continue
        start, end, starts = run
        first_gpu = _best_block(board, job.gpus, start, end, starts)
        board.occupy_block(first_gpu, job.gpus, start, end)
        placements[job.id] = Placement(start_step=start, first_gpu=first_gpu)
    return placements


def _best_block(board: Board, block_gpus: int, start: int, end: int, starts: int) -> int:
    """Buddy best-fit: the free block whose surroundings are already most taken.

    The surroundings are the block's parent, grandparent and great-grandparent aligned
    blocks (weights 4, 2, 1), seen over the run as GPUs ever taken plus GPUs always taken;
    cells taken right before and right after the run on the block itself count too
    (filling a trough in time).
    """
    if not starts & (starts - 1):  # a single candidate
        return starts.bit_length() - 1
    busy = board.busy
    ever = 0
    always = board.all_mask
    for taken in busy[start:end]:
        ever |= taken
        always &= taken
    before = busy[start - 1] if start > 0 else 0
    after = busy[end] if end < board.horizon else 0
    surroundings = _surroundings(board.gpus, block_gpus)
    best_gpu, best_score = -1, -1
    for first_gpu in islice(iter_gpus(starts), MAX_BLOCK_CANDIDATES):
        own, ancestors = surroundings[first_gpu]
        score = 2 * ((before & own).bit_count() + (after & own).bit_count())
        for weight, ancestor in ancestors:
            score += weight * ((ever & ancestor).bit_count() + (always & ancestor).bit_count())
        if score > best_score:
            best_gpu, best_score = first_gpu, score
    return best_gpu


@cache
def _surroundings(cluster_gpus: int, block_gpus: int) -> dict[int, tuple[int, tuple[tuple[int, int], ...]]]:
    """:func:`_best_block`'s masks, by the first GPU of each aligned block of ``block_gpus``: the
    block's own, and its parent, grandparent and great-grandparent aligned blocks inside the
    cluster with their weights."""
    table = {}
    for first_gpu in range(0, cluster_gpus - block_gpus + 1, block_gpus):
        ancestors = []
        span, weight = block_gpus * 2, 4
        while span <= cluster_gpus and weight:
            ancestors.append((weight, block_mask(first_gpu - first_gpu % span, span)))
            span *= 2
            weight //= 2
        table[first_gpu] = (block_mask(first_gpu, block_gpus), tuple(ancestors))
    return table
