"""The contract's baselines: FIFO, FIFO with backfill, priority order with backfill.

They model the usual scheduler: each real-time service reserves its daily peak all
day (highest free GPU ids), and batch jobs take the first aligned block that fits.
"""

from __future__ import annotations

from collections.abc import Iterable

from contract.scenario import BatchJob, Instance, RealtimeJob, gpus_of
from scheduler.board import BlockedSchedule, Board
from scheduler.model import Allocation, Placement


def fifo(instance: Instance) -> Allocation:
    return _first_fit(instance, _reserved(instance), _fifo_order(instance), in_order=True)


def fifo_backfill(instance: Instance) -> Allocation:
    return _first_fit(instance, _reserved(instance), _fifo_order(instance), in_order=False)


def priority_backfill(instance: Instance) -> Allocation:
    return _first_fit(instance, _reserved(instance), _priority_order(instance), in_order=False)


def all_three(instance: Instance) -> tuple[Allocation, Allocation, Allocation]:
    """fifo, fifo-backfill and priority-backfill, the reservations made once for all three."""
    reserved = _reserved(instance)
    return (
        _first_fit(instance, reserved, _fifo_order(instance), in_order=True),
        _first_fit(instance, reserved, _fifo_order(instance), in_order=False),
        _first_fit(instance, reserved, _priority_order(instance), in_order=False),
    )


def _fifo_order(instance: Instance) -> list[BatchJob]:
    return sorted(instance.queued_jobs, key=lambda j: j.order)


def _priority_order(instance: Instance) -> list[BatchJob]:
    return sorted(instance.queued_jobs, key=lambda j: (-j.priority, j.order))


def _reserved(instance: Instance) -> tuple[list[int], dict[str, tuple[int, ...]]]:
    """The busy GPUs per step once the services' reservations are made, and their holdings."""
    board = Board(instance)
    realtime = _peak_reservations(instance, board)
    return board.busy, realtime


def _first_fit(
    instance: Instance,
    reserved: tuple[list[int], dict[str, tuple[int, ...]]],
    jobs: Iterable[BatchJob],
    *,
    in_order: bool,
) -> Allocation:
    board = Board(instance)
    busy, realtime = reserved
    board.busy = list(busy)
    placements: dict[str, Placement] = {}
    earliest = 0  # FIFO: no job starts before the previous placed job's start
    for job in jobs:
        placed = first_fit(board, job, max(job.release_step, earliest))
        if placed is None:
            continue  # fits nowhere in the horizon: the next job is placed as if this one had not come
        placements[job.id] = placed
        if in_order:
            earliest = placed.start_step
    return Allocation(batch=placements, realtime=realtime)


def first_fit(board: Board, job: BatchJob, not_before: int) -> Placement | None:
    """Earliest start, then lowest aligned block free over the whole run; marks it taken."""
    run = board.earliest_run(job, not_before)
    if run is None:
        return None
    start, end, starts = run
    first_gpu = (starts & -starts).bit_length() - 1
    board.occupy_block(first_gpu, job.gpus, start, end)
    return Placement(start_step=start, first_gpu=first_gpu)


def _peak_reservations(instance: Instance, board: Board) -> dict[str, tuple[int, ...]]:
    """Static ``max(demand)`` reservations, closed to batch jobs for the whole horizon."""
    never_free = 0
    for t in range(instance.horizon_steps):
        never_free |= board.busy[t]
    for running_set in instance.running_realtime.values():
        never_free |= running_set.mask
    downs = BlockedSchedule.of_down_windows(instance)
    held_by_job: dict[str, tuple[int, ...]] = {}
    for job in instance.realtime_jobs:
        running = instance.running_realtime.get(job.id)
        peak = max(job.demand, default=0)
        reserved = 0
        if running is not None:
            for gpu in sorted(running.gpus, reverse=True)[:peak]:
                reserved |= 1 << gpu
        for gpu in range(instance.gpus - 1, -1, -1):
            if reserved.bit_count() >= peak:
                break
            if not (never_free >> gpu & 1) and not (reserved >> gpu & 1):
                reserved |= 1 << gpu
        never_free |= reserved
        held = _follow_reservation(instance, downs, job, running.mask if running else None, reserved)
        held_by_job[job.id] = held
        for t, mask in enumerate(held):
            board.busy[t] |= mask | reserved
    return held_by_job


def _follow_reservation(
    instance: Instance, downs: BlockedSchedule, job: RealtimeJob, running: int | None, reserved: int
) -> tuple[int, ...]:
    """Held GPUs per step: the running set at step 0, then toward the reservation by swap_cap a step."""
    held: list[int] = []
    previous = running
    horizon = instance.horizon_steps
    for t in range(horizon):
        up = ~instance.down_masks[t]
        if previous is None:
            current = reserved & up
        else:
            forced = downs.must_drop(previous, t, job.swap_cap)
            current = previous & ~forced
            budget = job.swap_cap - forced.bit_count()
            if t > 0 or running is None:
                current, budget = _add_highest(
                    current, reserved & up & ~current, budget, downs=downs, t=t, swap_cap=job.swap_cap
                )
                current = _drop_lowest(current, current & ~reserved, budget)
        held.append(current)
        if current == reserved and not reserved & downs.blocked_from[t + 1]:
            # Settled on the reservation, and none of it goes down later: nothing is forced
            # out, added or dropped at any later step.
            held.extend([reserved] * (horizon - t - 1))
            break
        previous = current
    return tuple(held)


def _add_highest(
    current: int, candidates: int, budget: int, *, downs: BlockedSchedule, t: int, swap_cap: int
) -> tuple[int, int]:
    """Add reserved GPUs, highest first, skipping any it could not leave in time before it goes down."""
    for gpu in reversed(gpus_of(candidates)):
        if budget <= 0:
            break
        bit = 1 << gpu
        if downs.ever_down & bit and not downs.still_reachable(current | bit, t, swap_cap):
            continue
        current |= bit
        budget -= 1
    return current, budget


def _drop_lowest(current: int, candidates: int, budget: int) -> int:
    for gpu in gpus_of(candidates)[: max(budget, 0)]:
        current &= ~(1 << gpu)
    return current
