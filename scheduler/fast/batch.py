"""Pass 2 of the fast mode: the job orders, and each job packed at its earliest feasible start on
the aligned block that best fits the holes already there (buddy best-fit)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cache
from itertools import islice

from contract.scenario import BatchJob, Instance, block_mask, iter_gpus
from scheduler.board import Board
from scheduler.model import Placement

# Candidate blocks scored per job: enough to find a snug hole, bounded for large clusters.
MAX_BLOCK_CANDIDATES = 12


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
        placed = greedy_placement(board, job)
        if placed is None:
            continue
        placement, end = placed
        board.occupy_block(placement.first_gpu, job.gpus, placement.start_step, end)
        placements[job.id] = placement
    return placements


def greedy_placement(board: Board, job: BatchJob) -> tuple[Placement, int] | None:
    """``job`` at its earliest feasible start on ``board``, on the best-fitting free block, with
    its run's end step; None where it fits nowhere. The board is left as it is."""
    run = board.earliest_run(job, job.release_step)
    if run is None:
        return None
    start, end, starts = run
    return Placement(start_step=start, first_gpu=_best_block(board, job.gpus, start, end, starts)), end


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
