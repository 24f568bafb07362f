"""Pass 1 of the fast mode: each service's swap-capped curve, held step by step from the highest
GPU ids (stacking, shedding by earliest deadline, early evacuation, compaction)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from contract.curves import swap_capped_curve
from contract.scenario import Instance, RealtimeJob, gpus_of, iter_gpus_down
from scheduler.board import BlockedSchedule, Board

UNLIMITED = 1 << 30


class InfeasiblePromiseError(Exception):
    """A promised batch block would force a real-time job to change more GPUs than its swap cap."""


def place_realtime(
    instance: Instance,
    board: Board,
    blocked: BlockedSchedule,
    services: Sequence[RealtimeJob] | None = None,
    *,
    compact_at_start: bool = False,
) -> dict[str, tuple[int, ...]]:
    """Hold each service's curve (of ``services``, default all), stacked from the highest GPU
    ids; marks the board. Without ``compact_at_start``, no service moves a GPU it held in the
    committed hour up at step 0 (compaction): that step is committed next, and the move
    restarts a replica now (the first pass is built both ways: scheduler.fast.search).

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
                compact=compact_at_start or t > 0,
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
        given_up = held_before & ~(busy[t] | taken_now | blocked.blocked_from[t])
        if given_up:
            taken_now |= _grow_into_given_up(per_service, previous, given_up, t)
        for _, _, job_id, _, holdings, _ in per_service:
            previous[job_id] = holdings[t]
        busy[t] |= taken_now
    return {job_id: tuple(masks) for job_id, masks in held.items()}


def _grow_into_given_up(
    per_service: Sequence[tuple[int, RealtimeJob, str, list[int], list[int], Sequence[int]]],
    previous: Mapping[str, int | None],
    given_up: int,
    t: int,
) -> int:
    """GPUs a service gave up at step ``t`` (free from then on) taken by the services still
    short of their curves, within their swap caps; returns those taken.
    A service does not grow into a GPU another holds until that one has decided, so without
    this the one placed first stays short beside a GPU the other frees."""
    taken = 0
    for _, job, job_id, curve, holdings, _ in per_service:
        current, before = holdings[t], previous[job_id]
        short = curve[t] - current.bit_count()
        spare = UNLIMITED if before is None else job.swap_cap - (current ^ before).bit_count()
        for gpu in iter_gpus_down(given_up & ~taken if short > 0 and spare > 0 else 0):
            current |= 1 << gpu
            taken |= 1 << gpu
            short, spare = short - 1, spare - 1
            if short == 0 or spare == 0:
                break
        holdings[t] = current
    return taken


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
    compact: bool = True,
) -> int:
    """The GPUs ``job`` holds at step ``t``, at most ``swap_cap`` changes away from ``previous``
    (without ``compact``, no held GPU is moved up into a free one).

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
        if compact and budget and room >= current & -current:  # a free GPU above the lowest held
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
    # GPUs, often a whole batch block, for the rest of the day (docs/allocator.md, "Tuning evidence").
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
