"""The fast mode's entry points: :func:`allocate` (the passes in budget order, the floors and
settling) and :func:`allocate_at_least_hot_path`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from contract.scenario import BatchJob, Instance
from scheduler import baselines
from scheduler.budget import Budget, WorkCosts
from scheduler.churn import settle
from scheduler.fast.batch import _job_orders, _worth_at_earliest, batch_value
from scheduler.fast.candidate import (
    EPSILON,
    _Candidate,
    _pack,
    _run_value,
    _start_or_horizon,
    _with_batch,
    objective,
)
from scheduler.fast.gains import NET_GAIN_JOBS, ServicesLoss, _by_priority, expected_gains, most_gain
from scheduler.fast.mirror import _unmirror, mirrored
from scheduler.fast.orders import MAX_JOBS, best_order
from scheduler.fast.promote import PROMISE_OFFSETS, _promote
from scheduler.fast.search import _far_moves, _first_pass, _other_orders, _reorder, _search
from scheduler.metrics import moves, realtime_objective
from scheduler.model import HOT_PATH_BUDGET_MS, Allocation

# Job orders every first pass packs (the rest are tried while the budget lasts): priority
# with larger rectangles first, and each job's value from its earliest start
# (docs/allocator.md, "Tuning evidence").
FIRST_ORDERS = 2


# A delayed job whose promotion is expected to gain more than this share of the first pass's
# objective is promoted before the other job orders (and before the mirror image's first pass
# when the budget does not afford both): at 2 ms, the searches otherwise reach it too late.
EARLY_GAIN = 0.2
# The share where the budget affords the promotion beside the first pass's other job orders and
# the mirror image's first pass: it takes the budget of the later searches only
# (docs/allocator.md, "Tuning evidence").
EARLY_GAIN_AFFORDED = 0.05
# The share on a small queue, whose ranking counts what the services must lose
# (:data:`scheduler.fast.gains.NET_GAIN_JOBS`).
EARLY_GAIN_SMALL = 0.07


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

    original = instance
    orders = _job_orders(instance, worth)
    promotion = costs.delays + costs.slots + costs.check + costs.replan(len(instance.realtime_jobs))
    instance, first, flipped = _oriented_first_pass(instance, orders, budget, costs, promotion)
    # A small queue's best order on the first pass's holdings (scheduler.fast.orders), leaving
    # the budget the steps after it would have had: the first pass's other orders and one
    # promotion, and the mirror image's first pass where it was afforded beside them.
    keep = (FIRST_ORDERS - 1) * costs.pack + promotion
    if flipped is not None and budget.affords(keep + costs.build + costs.pack):
        keep += costs.build + costs.pack
    first = best_order(instance, first, budget, costs, keep=keep)
    # A promotion expected to gain much goes first (EARLY_GAIN). Where the budget does not afford
    # it and the first pass's other orders both (1 ms, or a slower machine), before those orders:
    # a job no packing places (as wide as a cluster the services never leave) gets in only by a
    # promotion, and the other orders still pack the plan without it, the better kept. Else after
    # the mirror image's first pass where the budget affords both: a large gain found early beats
    # a better orientation found late (docs/allocator.md, "Tuning evidence").
    before_orders = not budget.affords((FIRST_ORDERS - 1) * costs.pack + promotion)
    promoted = _early_promotions(instance, first, budget, costs, worth, loss=loss) if before_orders else first
    first = _other_orders(instance, first, orders[1:FIRST_ORDERS], budget, costs)
    settled = not _trade_settling(budget, costs, orders_left=len(orders) - FIRST_ORDERS)
    starts = [(instance, orders, max(first, promoted, key=lambda candidate: candidate.objective))]
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
            (
                flipped,
                flipped_orders,
                _first_pass(flipped, flipped_orders[:FIRST_ORDERS], budget, costs, keep=promotion),
            )
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
    if chosen.instance is not original:
        chosen = _Scored(original, _unmirror(original, chosen.allocation), chosen.objective)
    if settled or budget.affords(costs.settle):
        chosen = _Scored(original, settle(original, chosen.allocation))
    return _best([chosen, *floors]).allocation


def _oriented_first_pass(
    instance: Instance,
    orders: Sequence[Sequence[BatchJob]],
    budget: Budget,
    costs: WorkCosts,
    promotion: float,
) -> tuple[Instance, _Candidate, Instance | None]:
    """The first pass's first job order, the orientation it was packed in, and the other
    orientation the later steps may try (None where there is none, or it was tried here).

    Where the budget does not afford the mirror image's first pass beside the first pass's
    other orders and one promotion (1 ms of work, or a slower machine), the later steps spend
    it on a promotion of the first orientation and the mirror image is never packed. So where
    the mirror image is likely the better (:func:`_mirror_likely_better`), both orientations'
    first orders are packed here and the later steps search the better one only
    (docs/benchmarks.md, "Small queues of long jobs").
    """
    flipped = mirrored(instance)
    first = _first_pass(
        instance, orders[:1], budget, costs, keep=costs.build + FIRST_ORDERS * costs.pack + promotion
    )
    if (
        flipped is None
        or not _mirror_likely_better(instance)
        or budget.affords(costs.build + FIRST_ORDERS * costs.pack + promotion)
    ):
        return instance, first, flipped
    other = _first_pass(flipped, orders[:1], budget, costs, keep=promotion)
    if other.objective > first.objective + EPSILON:
        return flipped, other, None
    return instance, first, None


def _mirror_likely_better(instance: Instance) -> bool:
    """Whether the mirror image likely packs better, for a queue longer than the order search
    takes (:data:`scheduler.fast.orders.MAX_JOBS`; a shorter one has its best order searched):
    the services stack at the top, so where running batch jobs hold more cells in the lower
    half of the cluster than in the upper, by half a horizon of one GPU or more, the mirror
    image stacks the services beside them and leaves the other half's wide blocks free."""
    if len(instance.queued_jobs) <= MAX_JOBS:
        return False
    half = instance.gpus // 2
    lower = upper = 0
    for running in instance.running_batch.values():
        cells = min(running.remaining_steps, instance.horizon_steps)
        for gpu in range(running.first_gpu, running.first_gpu + running.gpus):
            if gpu < half:
                lower += cells
            else:
                upper += cells
    return lower - upper >= instance.horizon_steps / 2


def _trade_settling(budget: Budget, costs: WorkCosts, *, orders_left: int) -> bool:
    """Whether settling's reservation goes to the job orders left (released, then; else kept).

    Settling buys the objective's tie-break, the fewest real-time moves at equal value. Where
    the first pass leaves no budget for another job order and the reservation affords two,
    they are worth more (docs/allocator.md, "Tuning evidence"). Settling then runs if the budget still
    affords it.
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
    first pass's other job orders and the mirror image's first pass), else
    :data:`EARLY_GAIN_SMALL` on a small queue (the first job its ranking, net of the services'
    loss, puts above the threshold by its own gain). ``worth``: each
    job's run value from its earliest start on the fixed load (:func:`_worth_at_earliest`), an
    upper bound on what its promotion gains; where none is above the threshold, nothing is
    ranked or charged. ``loss``: :class:`ServicesLoss` (None without services)."""
    small = len(instance.queued_jobs) <= NET_GAIN_JOBS
    threshold = (EARLY_GAIN_AFFORDED if afforded else EARLY_GAIN_SMALL if small else EARLY_GAIN) * abs(
        first.objective
    )
    if all(
        worth[job.id] - _run_value(instance, job, _start_or_horizon(instance, first.allocation, job))
        <= threshold
        for job in instance.queued_jobs
    ):
        return first

    def large(instance: Instance, candidate: _Candidate) -> list[BatchJob]:
        ranked = expected_gains(instance, candidate.allocation, loss, rt_objective=candidate.rt_objective)
        return [expected.job for expected in ranked if expected.gain > threshold][:1]

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
    and end below what a smaller budget finds (docs/allocator.md, "Tuning evidence"); callers
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
