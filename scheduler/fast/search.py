"""The fast mode's job-order passes and searches: a first pass's orders, the order search's
moves, and the rounds of promotions and order search from a first pass."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from contract.scenario import BatchJob, Instance
from scheduler.budget import Budget, WorkCosts
from scheduler.fast.candidate import EPSILON, Targets, _build, _Candidate, _pack, _with_batch, restarts_cost
from scheduler.fast.promote import PROMISE_OFFSETS, _promote

# The largest share of the budget the first pass's build without compaction at step 0 may take
# (a tight budget spends it on the searches: docs/benchmarks.md, "Real-time moves").
STICKY_SHARE = 0.05

# The share of the budget left that one round of promotions may spend before the order search.
PROMOTION_SHARE = 0.5


def _first_pass(
    instance: Instance,
    orders: Sequence[Sequence[BatchJob]],
    budget: Budget,
    costs: WorkCosts,
    *,
    keep: float = 0.0,
) -> _Candidate:
    """Real-time, then the best packing of ``orders``: it completes unless the wall clock
    has run out before an order after the first (a large cluster on a tight budget).

    Where the services' compaction swaps GPUs at step 0 and the budget affords another build
    beside ``keep`` (the steps after it), at most :data:`STICKY_SHARE` of it, the real-time is
    built again without compaction at step 0, and that plan kept unless compaction gains more
    than the replicas it restarts cost (:func:`restarts_cost`): step 0 is committed next, and
    a move planned later is decided again by the next hour's plan (docs/benchmarks.md,
    "Real-time moves").
    """
    best = _build(instance, {}, orders[:1], compact_at_start=True)
    budget.charge(costs.build)
    restarts = restarts_cost(instance, best.allocation)
    if restarts > 0 and costs.build <= STICKY_SHARE * budget.units and budget.affords(costs.build + keep):
        budget.charge(costs.build)
        sticky = _build(instance, {}, orders[:1])
        if (
            best.objective - restarts
            <= sticky.objective - restarts_cost(instance, sticky.allocation) + EPSILON
        ):
            best = sticky
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
