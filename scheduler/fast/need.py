"""The filters a promotion passes before it is built: what the services need per step, and
whether a plan around promised blocks may serve it, or else may pay for what it leaves unserved."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from contract.curves import swap_capped_curve
from contract.scenario import Instance, RealtimeJob
from scheduler.fast.candidate import EPSILON, _Candidate
from scheduler.model import Placement, batch_masks


def _worth_building(
    instance: Instance,
    best: _Candidate,
    committed: Mapping[str, Placement],
    in_the_way: Sequence[RealtimeJob],
    *,
    need: _Need,
    gain: float,
) -> bool:
    """Whether ``best`` re-planned around the ``committed`` promises may improve it: no service
    is in their way, or the GPUs they leave may hold the real-time demand ``best`` serves, or
    else it is a trade that may pay (:func:`_may_pay`, with ``gain`` the promoted job's own).
    Otherwise the re-plan would leave more demand unserved than ``best`` at a loss."""
    if not in_the_way:
        return True
    taken = batch_masks(instance, committed)
    free = free_counts(instance, taken)
    return _shortfall_floor(instance, taken, free, need) <= best.rt_shortfall or _may_pay(
        instance, free, need, best, gain
    )


def free_counts(instance: Instance, taken: Sequence[int]) -> list[int]:
    """Per step, the GPUs that ``taken`` (per-step masks) leaves."""
    return [instance.gpus - mask.bit_count() for mask in taken]


def _shortfall_floor(instance: Instance, taken: Sequence[int], free: Sequence[int], need: _Need) -> int:
    """A lower bound on the real-time GPU-steps a plan around promised blocks leaves unserved
    (or, where it is larger, a sign that no plan can follow the swap caps), the largest of:
    per step, the services' demand beyond the GPUs that down windows, running jobs and the
    promises leave, summed; the most their least curves go beyond those GPUs at any one step
    (a service below its curve at a step is short of demand by as much at a later one, or has
    shed faster than its cap allows); and, summed over the services running at step 0, what
    each cannot reach from its running GPUs (every one the blocks take at step 0 is a change
    of its cap, and it grows by at most its cap a step). ``taken``: per step, the GPUs the
    promises take with the fixed load (:func:`~scheduler.model.batch_masks`), ``free`` the GPUs
    they leave; ``need``: :func:`_realtime_need`."""
    demand, curves = need.demand, need.curves
    unserved = sum(max(0, need - room) for need, room in zip(demand, free, strict=True))
    short = 0
    for service in instance.realtime_jobs:
        running = instance.running_realtime.get(service.id)
        if running is None:
            continue
        cap = service.swap_cap
        forced = (running.mask & taken[0]).bit_count()
        reach = running.mask.bit_count() - forced + max(0, cap - forced)
        for t, (want, room) in enumerate(zip(service.demand, free, strict=True)):
            short += max(0, want - min(reach + cap * t, room))
    return max(unserved, short, *(need - room for need, room in zip(curves, free, strict=True)))


class _Need(NamedTuple):
    """The services' demand and least swap-capped curves per step, summed; their objective
    with all demand served; and the least an unserved GPU-step costs before its step's weight
    (the value it would have earned and its penalty, for the cheapest service)."""

    demand: Sequence[int]
    curves: list[int]
    served_all: float
    cheapest: float


def _realtime_need(instance: Instance) -> _Need:
    curves = [0] * instance.horizon_steps
    for job in instance.realtime_jobs:
        running = instance.running_realtime.get(job.id)
        curve = swap_capped_curve(job.demand, job.swap_cap, running.mask.bit_count() if running else None)
        curves = [total + step for total, step in zip(curves, curve, strict=True)]
    return _Need(instance.realtime_demand, curves, _served_all(instance), _unserved_cost(instance))


def _served_all(instance: Instance) -> float:
    """The services' objective with all their demand served."""
    served_all = 0.0
    for job in instance.realtime_jobs:
        for weight, want in zip(instance.weights, job.demand, strict=True):
            served_all += job.priority * weight * want
    return served_all


def _unserved_cost(instance: Instance) -> float:
    """The least an unserved GPU-step costs before its step's weight: the value it would have
    earned and its penalty, for the cheapest service (0 without services)."""
    return min((job.priority for job in instance.realtime_jobs), default=0.0) * (1 + instance.rt_penalty)


def _may_pay(instance: Instance, free: Sequence[int], need: _Need, best: _Candidate, gain: float) -> bool:
    """Whether a promotion that must leave more real-time demand unserved than ``best`` could
    pay for it with ``gain``, the promoted job's own: the least the services would then lose
    (per step, the demand beyond the GPUs the promises and the fixed load leave, at the
    cheapest service's cost) beyond what they lose in ``best`` is below it. Re-packing the
    other jobs can gain more, so this is a filter on which trades to build, not a bound."""
    weights = instance.weights
    least_loss = need.cheapest * sum(
        w * max(0, d - room) for w, d, room in zip(weights, need.demand, free, strict=True)
    )
    lost_now = need.served_all - best.rt_objective
    return gain > least_loss - lost_now + EPSILON
