"""The fast mode: a heuristic that is legal by construction and answers in milliseconds.

Two passes over a :class:`~scheduler.board.Board` of per-step bitmasks:

1. **Real-time as curves.** Each service gets the smallest GPU-count curve that
   covers its demand and that the swap cap can follow (ramps start early enough,
   shrinking is as fast as the cap allows). GPUs are then chosen step by step,
   highest ids first, so the services stack at the top of the cluster and give
   GPUs back in troughs; every change is charged to the swap cap, and GPUs that
   will go down are shed early enough (earliest deadline first).
2. **Batch by value.** Queued jobs go in descending priority (larger rectangles
   first among equals), each at its earliest feasible start on the aligned block
   that best fits the holes already there (buddy best-fit: prefer blocks whose
   parent block is already partly taken, and runs that fill a trough in time).
   A few job orders are tried and the best total value kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scheduler.board import Board, DownSchedule
from scheduler.model import Allocation, BatchJob, Instance, Placement, RealtimeJob, block_mask, gpus_of

UNLIMITED = 1 << 30
# Candidate blocks scored per job: enough to find a snug hole, bounded for large clusters.
MAX_BLOCK_CANDIDATES = 12


def allocate(instance: Instance) -> Allocation:
    base = Board(instance)
    realtime = place_realtime(instance, base)
    best: tuple[float, dict[str, Placement]] | None = None
    for order in _job_orders(instance):
        board = Board(instance)
        board.busy = list(base.busy)
        placements = place_batch(instance, board, order)
        value = batch_value(instance, placements)
        if best is None or value > best[0] + 1e-9:
            best = (value, placements)
    assert best is not None
    return Allocation(batch=best[1], realtime=realtime)


# --- real-time -------------------------------------------------------------------------------


def count_curve(demand: Sequence[int], swap_cap: int, running: int | None) -> list[int]:
    """The least GPU count per step, >= demand, that a swap cap of ``swap_cap`` can follow.

    Rises must start early (``c(t) >= c(t+1) - cap``) and falls are slowed
    (``c(t) >= c(t-1) - cap``); a running set of ``running`` GPUs is where it starts.
    """
    curve = list(demand)
    for t in range(len(curve) - 2, -1, -1):
        curve[t] = max(curve[t], curve[t + 1] - swap_cap)
    previous = running
    for t in range(len(curve)):
        if previous is not None:
            curve[t] = max(curve[t], previous - swap_cap)
        previous = curve[t]
    return curve


def place_realtime(instance: Instance, board: Board) -> dict[str, tuple[int, ...]]:
    """Hold each service's curve, stacked from the highest GPU ids; marks the board."""
    downs = DownSchedule(instance)
    jobs = sorted(instance.realtime_jobs, key=lambda j: -j.priority)
    curves = {}
    previous: dict[str, int | None] = {}
    for job in jobs:
        running = instance.running_realtime.get(job.id)
        previous[job.id] = running.mask if running else None
        curves[job.id] = count_curve(job.demand, job.swap_cap, running.mask.bit_count() if running else None)
    held: dict[str, list[int]] = {job.id: [] for job in instance.realtime_jobs}
    for t in range(instance.horizon_steps):
        held_before = 0
        for mask in previous.values():
            held_before |= mask or 0
        taken_now = 0
        for job in jobs:
            free = board.all_mask & ~(board.busy[t] | taken_now | held_before)
            current = _step_realtime(job, t, previous[job.id], curves[job.id], free, downs)
            taken_now |= current
            held[job.id].append(current)
        for job in jobs:
            previous[job.id] = held[job.id][t]
        board.busy[t] |= taken_now
    return {job_id: tuple(masks) for job_id, masks in held.items()}


def _step_realtime(
    job: RealtimeJob, t: int, previous: int | None, curve: list[int], free: int, downs: DownSchedule
) -> int:
    """The GPUs ``job`` holds at step ``t``, at most ``swap_cap`` changes away from ``previous``.

    ``free`` are the GPUs nobody holds at ``t`` or held at ``t - 1`` (so adding one never
    forces another service to give it up).
    """
    if previous is None:
        current, budget = 0, UNLIMITED
    else:
        forced = downs.must_drop(previous, t, job.swap_cap)
        current = previous & ~forced
        budget = job.swap_cap - forced.bit_count()
    want = curve[t]
    have = current.bit_count()
    if have > want and budget > 0:
        # Shed the GPUs that go down soonest, then the lowest ids: the stack stays at the top.
        order = sorted(gpus_of(current), key=lambda g: (downs.next_down(g, t + 1) or UNLIMITED, g))
        for gpu in order[: min(have - want, budget)]:
            current &= ~(1 << gpu)
    elif have < want and budget > 0:
        level_end = _level_end(curve, t, have + 1)
        room = min(want - have, budget)
        for gpu in reversed(gpus_of(free & ~current)):
            if room == 0:
                break
            bit = 1 << gpu
            if downs.ever_down & bit and not (
                downs.up_through(gpu, t, level_end)
                and downs.still_reachable(current | bit, t, job.swap_cap)
            ):
                continue
            current |= bit
            room -= 1
    return current


def _level_end(curve: list[int], t: int, level: int) -> int:
    """First step after ``t`` where the curve drops below ``level``: when a GPU added now is freed."""
    for u in range(t + 1, len(curve)):
        if curve[u] < level:
            return u
    return len(curve)


# --- batch -----------------------------------------------------------------------------------


def _job_orders(instance: Instance) -> list[list[BatchJob]]:
    """Job orders to try: priority first always (a GPU-step of a higher priority is worth more)."""
    keys: list[Callable[[BatchJob], tuple[float, ...]]] = [
        lambda j: (-j.priority, -j.gpus * j.duration_steps, j.order),
        lambda j: (-j.priority, -j.gpus, -j.duration_steps, j.order),
        lambda j: (-j.priority, j.release_step, j.order),
    ]
    orders: list[list[BatchJob]] = []
    for key in keys:
        order = sorted(instance.queued_jobs, key=key)
        if order not in orders:
            orders.append(order)
    return orders


def batch_value(instance: Instance, placements: dict[str, Placement]) -> float:
    weights = instance.weights
    jobs = instance.jobs_by_id
    total = 0.0
    for job_id, placement in placements.items():
        job = jobs[job_id]
        assert isinstance(job, BatchJob)
        end = job.end_step(placement.start_step, instance.horizon_steps)
        total += job.priority * job.gpus * sum(weights[placement.start_step : end])
    return total


def place_batch(instance: Instance, board: Board, jobs: Sequence[BatchJob]) -> dict[str, Placement]:
    placements: dict[str, Placement] = {}
    for job in jobs:
        for start in range(job.release_step, board.horizon):
            end = job.end_step(start, board.horizon)
            starts = board.free_starts(job.gpus, start, end)
            if starts:
                first_gpu = _best_block(board, job.gpus, start, end, starts)
                board.occupy_block(first_gpu, job.gpus, start, end)
                placements[job.id] = Placement(start_step=start, first_gpu=first_gpu)
                break
    return placements


def _best_block(board: Board, block_gpus: int, start: int, end: int, starts: int) -> int:
    """Buddy best-fit: the free block whose surroundings are already most taken."""
    candidates = gpus_of(starts)
    if len(candidates) == 1:
        return candidates[0]
    busy = board.busy
    best_gpu, best_score = candidates[0], -1
    for first_gpu in candidates[:MAX_BLOCK_CANDIDATES]:
        score = 0
        span = block_gpus * 2
        weight = 4
        while span <= board.gpus and weight:
            ancestor = block_mask(first_gpu - first_gpu % span, span)
            score += weight * sum((busy[t] & ancestor).bit_count() for t in range(start, end))
            span *= 2
            weight //= 2
        mask = block_mask(first_gpu, block_gpus)
        # Fill troughs: taken cells right before and right after the run on this block.
        if start > 0:
            score += 2 * (busy[start - 1] & mask).bit_count()
        if end < board.horizon:
            score += 2 * (busy[end] & mask).bit_count()
        if score > best_score:
            best_gpu, best_score = first_gpu, score
    return best_gpu
