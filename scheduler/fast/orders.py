"""Every job order of a small queue, by branch and bound, on a plan's fixed real-time holdings.

With a handful of long jobs the question a greedy order gets wrong is which job to give up
(or to start late): a 4-GPU job packed first can take the only block that would have run two
1-GPU jobs all day. A depth-first search over the orders, each node the greedy pack's
placement of one more job (so every leaf is a packing :func:`scheduler.fast.candidate._pack`
reproduces from its order), finds the best order within the budget.

- A node's children are the remaining jobs each placed at its earliest run on the node's
  board; a job that fits nowhere there fits nowhere deeper (the board only fills), so it
  leaves the subtree.
- A run's value only falls with its start (the weights decay), and deeper boards only start
  a job later, so a node's value plus its children's values bounds its subtree: a node that
  cannot beat the best packing found is cut.
- Prefixes that reach the same placements in another order are searched once.

Each placement is charged :attr:`scheduler.budget.WorkCosts.place`; the search stops where
the budget does not afford the next node's children, with the best order found so far.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract.scenario import BatchJob, Instance
from scheduler.board import Board
from scheduler.budget import Budget, WorkCosts
from scheduler.fast.batch import batch_value, greedy_placement
from scheduler.fast.candidate import EPSILON, _Candidate, _with_batch
from scheduler.model import Placement

# Queues up to this many jobs (not promised) are searched: 7! orders at most, most cut.
MAX_JOBS = 6
# The most of the budget left the search may spend (tuning split of benchmarks/small_queues.py;
# docs/benchmarks.md, "Small queues of long jobs").
ORDER_SHARE = 0.5

_Child = tuple[float, BatchJob, Placement, int]  # (run value, job, placement, end step)


def best_order(
    instance: Instance,
    candidate: _Candidate,
    budget: Budget,
    costs: WorkCosts,
    *,
    keep: float = 0.0,
) -> _Candidate:
    """``candidate`` with the best packing of its queue found by branch and bound on its
    real-time holdings and promises, if better (its order reproduces the packing), spending
    at most :data:`ORDER_SHARE` of the budget left and leaving ``keep`` units of it."""
    jobs = [job for job in candidate.order if job.id not in candidate.committed]
    if instance.has_promises or not 2 <= len(jobs) <= MAX_JOBS:
        return candidate
    search = _OrderSearch(instance, candidate, budget, costs)
    left = budget.units - budget.spent
    search.until = budget.spent + min(ORDER_SHARE * left, left - keep)
    search.node(list(candidate.busy_before_batch), [], 0.0, jobs)
    if search.best is None:
        return candidate
    order = [*search.best, *(job for job in jobs if job not in search.best)]
    placements = dict(candidate.committed)
    placements.update(search.placements)
    return _with_batch(instance, candidate, batch_value(instance, placements), placements, order)


class _OrderSearch:
    """The depth-first search's state: the best packing found and the prefixes seen."""

    def __init__(self, instance: Instance, candidate: _Candidate, budget: Budget, costs: WorkCosts) -> None:
        self.instance, self.budget, self.costs = instance, budget, costs
        self.board = Board(instance)
        self.weights = instance.weights
        # the candidate's own packing is the incumbent: only a better one is kept
        packed, committed = candidate.allocation.batch, candidate.committed
        self.bound = batch_value(instance, packed) - batch_value(instance, committed)
        self.best: list[BatchJob] | None = None
        self.placements: dict[str, Placement] = {}
        self.seen: set[frozenset[tuple[str, Placement]]] = set()
        self.stopped = False
        self.until = budget.units

    def children(self, busy: list[int], jobs: Sequence[BatchJob]) -> list[_Child]:
        """Each of ``jobs`` at its earliest run on ``busy`` (the ones that fit), the most valuable first."""
        board, weights = self.board, self.weights
        board.busy = busy
        found = []
        for job in jobs:
            placed = greedy_placement(board, job)
            if placed is None:
                continue
            placement, end = placed
            value = job.priority * job.gpus * sum(weights[placement.start_step : end])
            found.append((value, job, placement, end))
        found.sort(key=lambda child: -child[0])
        return found

    def node(
        self, busy: list[int], path: list[tuple[BatchJob, Placement]], value: float, jobs: list[BatchJob]
    ) -> None:
        """The subtree below ``path`` (of batch value ``value``), ``jobs`` left to place."""
        if self.stopped:
            return
        cost = self.costs.place * len(jobs)
        if self.budget.spent + cost > self.until or not self.budget.affords(cost):
            self.stopped = True
            return
        self.budget.charge(cost)
        children = self.children(busy, jobs)
        if value + sum(child[0] for child in children) <= self.bound + EPSILON:
            return
        if not children or len(children) == 1:
            for child_value, job, placement, _ in children:
                path, value = [*path, (job, placement)], value + child_value
            if value > self.bound + EPSILON:
                self.bound = value
                self.best = [job for job, _ in path]
                self.placements = {job.id: placement for job, placement in path}
            return
        fits = [child[1] for child in children]
        for child_value, job, placement, end in children:
            key = frozenset((j.id, p) for j, p in [*path, (job, placement)])
            if key in self.seen:
                continue
            self.seen.add(key)
            below = list(busy)
            mask = ((1 << job.gpus) - 1) << placement.first_gpu
            for t in range(placement.start_step, end):
                below[t] |= mask
            rest = [other for other in fits if other is not job]
            self.node(below, [*path, (job, placement)], value + child_value, rest)
            if self.stopped:
                return
