"""The contract's baselines: FIFO, FIFO with backfill, priority order with backfill; and
for a cluster of pools, fastest-free.

They model the usual scheduler: each real-time service reserves its daily peak all
day (highest free GPU ids of its pool), and batch jobs take the first aligned block that
fits. On a cluster of pools a job goes to the allowed pool where it can start soonest
(the first such pool in the cluster's order); fastest-free (arrival order, backfilling)
takes, among the pools where it can start soonest, the one where it runs fastest: the
rule a person applies. On one pool fastest-free is fifo-backfill.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from contract.scenario import BatchJob, Instance, RealtimeJob, gpus_of
from scheduler import pools
from scheduler.board import BlockedSchedule, Board
from scheduler.model import Allocation, Placement


def fifo(instance: Instance) -> Allocation:
    if instance.pooled:
        return _pooled(instance, _fifo_order(instance), in_order=True, fastest=False)
    return _first_fit(instance, _reserved(instance), _fifo_order(instance), in_order=True)


def fifo_backfill(instance: Instance) -> Allocation:
    if instance.pooled:
        return _pooled(instance, _fifo_order(instance), in_order=False, fastest=False)
    return _first_fit(instance, _reserved(instance), _fifo_order(instance), in_order=False)


def priority_backfill(instance: Instance) -> Allocation:
    if instance.pooled:
        return _pooled(instance, _priority_order(instance), in_order=False, fastest=False)
    return _first_fit(instance, _reserved(instance), _priority_order(instance), in_order=False)


def fastest_free(instance: Instance) -> Allocation:
    """Arrival order, backfilling; each job on the fastest of its pools that has room for it
    soonest. On one pool: fifo-backfill."""
    if not instance.pooled:
        return fifo_backfill(instance)
    return _pooled(instance, _fifo_order(instance), in_order=False, fastest=True)


def _pooled(instance: Instance, jobs: Iterable[BatchJob], *, in_order: bool, fastest: bool) -> Allocation:
    """First fit over pools: one board per pool (its services' reservations made), each job
    on the allowed pool where it starts soonest (the fastest or the first of those)."""
    queued = instance.queued_jobs
    subs, boards = {}, {}
    for pool in instance.pools:
        sub = pools.sub_instance(instance, pool, [j.id for j in queued if pool in instance.allowed_pools(j)])
        busy, realtime = _reserved(sub)
        board = Board(sub)
        board.busy = list(busy)
        subs[pool.name], boards[pool.name] = (sub, realtime), board
    placements: dict[str, dict[str, Placement]] = {pool.name: {} for pool in instance.pools}
    key: Callable[[tuple[int, int, int, str]], tuple[int, ...]] = (
        (lambda run: (run[0], run[1], run[2])) if fastest else (lambda run: (run[0], run[2]))
    )
    earliest = 0
    for job in jobs:
        runs = []
        for index, pool in enumerate(instance.allowed_pools(job)):
            sub_job = subs[pool.name][0].jobs_by_id[job.id]
            assert isinstance(sub_job, BatchJob)
            run = boards[pool.name].earliest_run(sub_job, max(job.release_step, earliest))
            if run is not None:
                runs.append((run[0], sub_job.duration_steps, index, pool.name, sub_job, run))
        if not runs:
            continue
        start, _, _, name, sub_job, (_, end, starts) = min(runs, key=lambda r: key(r[:4]))
        first_gpu = (starts & -starts).bit_length() - 1
        boards[name].occupy_block(first_gpu, sub_job.gpus, start, end)
        placements[name][job.id] = Placement(start_step=start, first_gpu=first_gpu)
        if in_order:
            earliest = start
    return pools.merge(
        instance,
        {name: Allocation(batch=placements[name], realtime=realtime) for name, (_, realtime) in subs.items()},
    )


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
