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
   free below; at step 0, the step committed next, only where that gains more than the
   replicas it restarts cost (the first pass built both ways). Every change is charged to
   the swap cap; earliest-deadline-first shedding guarantees no step ever needs more
   changes than the cap.
2. **Batch by value.** Queued jobs are packed greedily in a few orders (priority
   first with larger rectangles first among equals; value per step; widest first),
   each job at its earliest feasible start on the aligned block that best fits the
   holes already there (buddy best-fit: prefer blocks whose parent block is already
   partly taken, and runs that fill a trough in time). The best order wins, then a
   local search moves jobs forward in it (to the front or one place earlier; later, to
   any earlier place).
3. **Both orientations.** Passes 1-2 also run on the cluster upside down (where job
   sizes divide the cluster, so blocks stay aligned); the better first pass is kept. Where
   the budget affords no promotion beside the mirror image's first pass and running batch
   work sits low in the cluster, the mirror image's first order is packed right after the
   first's, before any promotion, and only the better orientation is searched.
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

The package follows the passes: :mod:`.entry` (:func:`allocate`, the budget's order of the
passes), :mod:`.realtime` (1), :mod:`.batch` (2), :mod:`.mirror` (3), :mod:`.promote` (4) with
:mod:`.gains` (which jobs first) and :mod:`.need` (which promises are worth building),
:mod:`.search` (the job orders and the rounds), and :mod:`.candidate` (a plan being built and
re-built around promises). The tuning evidence behind the constants is in docs/allocator.md.
"""

from scheduler.fast.batch import MAX_BLOCK_CANDIDATES, batch_value, place_batch
from scheduler.fast.candidate import EPSILON, Targets, objective
from scheduler.fast.entry import (
    EARLY_GAIN,
    EARLY_GAIN_AFFORDED,
    FIRST_ORDERS,
    allocate,
    allocate_at_least_hot_path,
    best_of,
)
from scheduler.fast.gains import ServicesLoss, expected_gains, most_delayed, most_gain
from scheduler.fast.mirror import mirrored
from scheduler.fast.need import free_counts
from scheduler.fast.promote import BLOCKS_PER_START, PROMISE_OFFSETS, PROMISE_RETRIES
from scheduler.fast.realtime import UNLIMITED, InfeasiblePromiseError, place_realtime
from scheduler.fast.search import PROMOTION_SHARE, OrderMoves

__all__ = [
    "BLOCKS_PER_START",
    "EARLY_GAIN",
    "EARLY_GAIN_AFFORDED",
    "EPSILON",
    "FIRST_ORDERS",
    "MAX_BLOCK_CANDIDATES",
    "PROMISE_OFFSETS",
    "PROMISE_RETRIES",
    "PROMOTION_SHARE",
    "UNLIMITED",
    "InfeasiblePromiseError",
    "OrderMoves",
    "ServicesLoss",
    "Targets",
    "allocate",
    "allocate_at_least_hot_path",
    "batch_value",
    "best_of",
    "expected_gains",
    "free_counts",
    "mirrored",
    "most_delayed",
    "most_gain",
    "objective",
    "place_batch",
    "place_realtime",
]
