"""Real-time churn as a cost of its own: the fewest GPU moves around a plan's batch work.

Every GPU a service gains or loses is a replica stopped or started on a real cluster, so at
equal value the plan with fewer moves is the better one (the tie-break of the objective;
the objective itself is unchanged). :func:`settle` keeps a plan's batch placements and
re-plans the services around them, step by step, so that each one:

1. keeps every GPU it held a step before that is still free (nothing takes it);
2. gives a GPU back when a batch block or a down window takes it (earliest deadline
   first, as :meth:`BlockedSchedule.must_drop` says), and, in the second of two tries,
   when it holds more than its demand and the swap-capped curve of what the plan served
   (the first try keeps idle GPUs that nothing else takes: fewer moves);
3. when it must grow, takes the free GPUs that stay free longest, highest ids first
   (so it need not move again soon, and the stack stays at the top).

The re-planned holdings serve at least what the plan served at every step, so the
objective never falls; the result is kept only if it moves fewer GPUs (or scores more).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import chain

from contract.curves import swap_capped_curve
from contract.scenario import Instance, iter_gpus_down
from scheduler.board import BlockedSchedule
from scheduler.metrics import moves, realtime_objective
from scheduler.model import Allocation, batch_masks

EPSILON = 1e-9
NEVER = 1 << 30


def settle(instance: Instance, allocation: Allocation) -> Allocation:
    """``allocation`` with the services re-planned for the fewest moves, when that is at
    least as good by the contract's score and moves fewer GPUs; else ``allocation`` itself."""
    if not instance.realtime_jobs:
        return allocation
    best, best_score = allocation.realtime, realtime_objective(instance, allocation.realtime)
    best_moves = moves(instance, best)
    blocked = batch_masks(instance, allocation.batch)
    schedule = BlockedSchedule(blocked)
    floor = _served_curves(instance, allocation)
    for give_back_idle in (False, True):
        realtime = _sticky_realtime(instance, floor, blocked, schedule, give_back_idle=give_back_idle)
        if realtime is None:
            continue
        score, moved = realtime_objective(instance, realtime), moves(instance, realtime)
        if score > best_score + EPSILON or (score >= best_score - EPSILON and moved < best_moves):
            best, best_score, best_moves = realtime, score, moved
    return allocation if best is allocation.realtime else Allocation(batch=allocation.batch, realtime=best)


def _by_blocking(schedule: BlockedSchedule, gpus: int, step: int) -> Iterator[int]:
    """``gpus``, the one blocked latest from ``step`` on first (sorted only when asked for)."""
    yield from sorted(iter_gpus_down(gpus), key=lambda g: -(schedule.next_down(g, step) or NEVER))


def _served_curves(instance: Instance, allocation: Allocation) -> dict[str, list[int]]:
    """Per service, the swap-capped curve of what ``allocation`` serves it (the least count
    each step that covers it and that the cap can follow)."""
    running = instance.running_realtime
    return {
        job.id: swap_capped_curve(
            [min(m.bit_count(), d) for m, d in zip(allocation.realtime[job.id], job.demand, strict=True)],
            job.swap_cap,
            running[job.id].mask.bit_count() if job.id in running else None,
        )
        for job in instance.realtime_jobs
    }


def _sticky_realtime(
    instance: Instance,
    floor: Mapping[str, Sequence[int]],
    blocked: Sequence[int],
    schedule: BlockedSchedule,
    *,
    give_back_idle: bool,
) -> dict[str, tuple[int, ...]] | None:
    """The services' holdings by rules 1-3 around the plan's batch work, or None where a swap
    cap cannot follow (the plan then keeps its own holdings). ``floor``: per service, the
    swap-capped curve of what the plan serves (:func:`_served_curves`). Without
    ``give_back_idle``, a service keeps idle GPUs nothing else takes (fewer moves; more GPUs
    held)."""
    jobs = sorted(instance.realtime_jobs, key=lambda j: -j.priority)
    running = instance.running_realtime
    previous: dict[str, int | None] = {
        job.id: running[job.id].mask if job.id in running else None for job in jobs
    }
    held: dict[str, list[int]] = {job.id: [] for job in jobs}
    everyone = instance.all_gpus_mask
    for t in range(instance.horizon_steps):
        # Rule 1 for all first (their sets from a step before are disjoint), then each in turn.
        kept: dict[str, int] = {}
        budgets: dict[str, int] = {}
        for job in jobs:
            before = previous[job.id]
            if before is None:
                kept[job.id], budgets[job.id] = 0, NEVER
                continue
            forced = schedule.must_drop(before, t, job.swap_cap)
            if forced.bit_count() > job.swap_cap:
                return None
            kept[job.id] = before & ~forced
            budgets[job.id] = job.swap_cap - forced.bit_count()
        # Rule 2 for all before rule 3 for any: a GPU one service gives back is free for
        # another's growth in the same step.
        for job in jobs if give_back_idle else ():
            current, budget = kept[job.id], budgets[job.id]
            high = max(floor[job.id][t], job.demand[t])
            if current.bit_count() > high:
                # Idle GPUs beyond what is served and needed for a ramp go back, those
                # blocked soonest first, then the lowest ids.
                order = sorted(
                    iter_gpus_down(current), key=lambda g: (schedule.next_down(g, t + 1) or NEVER, g)
                )
                for gpu in order[: min(current.bit_count() - high, budget)]:
                    current &= ~(1 << gpu)
                    budget -= 1
                kept[job.id], budgets[job.id] = current, budget
        taken = blocked[t]
        for mask in kept.values():
            taken |= mask
        for job in jobs:
            current, budget = kept[job.id], budgets[job.id]
            low = floor[job.id][t]
            if current.bit_count() < low:
                # Rule 3: the free GPUs that stay free longest, highest ids first: first
                # those never blocked later (no sort needed), then the others by when.
                free = everyone & ~taken
                blocked_later = free & ~schedule.never_blocked_after(t + 1)
                candidates = chain(
                    iter_gpus_down(free & ~blocked_later), _by_blocking(schedule, blocked_later, t + 1)
                )
                for gpu in candidates:
                    if current.bit_count() >= low or budget == 0:
                        break
                    bit = 1 << gpu
                    if blocked_later & bit and not schedule.still_reachable(current | bit, t, job.swap_cap):
                        continue
                    current |= bit
                    budget -= 1
                if current.bit_count() < low:
                    return None
            taken |= current
            held[job.id].append(current)
            previous[job.id] = current
    return {job.id: tuple(held[job.id]) for job in instance.realtime_jobs}
