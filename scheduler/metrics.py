"""The contract's scores, computed from the grid alone."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from contract.scenario import Cell, Instance


@dataclass(frozen=True, slots=True)
class Metrics:
    utilization: float
    value: float
    penalty: float
    objective: float
    rt_coverage: float
    completed: int
    unscheduled: int
    #: Real-time GPU moves: the sum over services and steps of |A(t) symmetric-difference A(t-1)|
    #: (t >= 1, and t = 0 against a running set), each a replica stopped or started.
    rt_moves: int = 0
    #: What delays past promised starts cost; None for a scenario without promises (the
    #: contract's scoring, whose plan files then carry no such key).
    promise_cost: float | None = None

    def as_dict(self) -> dict[str, float | int]:
        return {key: value for key, value in asdict(self).items() if value is not None}


def score(instance: Instance, grid: Sequence[Sequence[Cell]]) -> Metrics:
    """utilization, value, penalty, objective, rt_coverage, completed, unscheduled (CONTRACT.md),
    and rt_moves.

    With promises (``instance.has_promises``) the objective also subtracts what the
    delays past them cost (``Instance.promise_cost``), reported as ``promise_cost``.
    """
    instance = instance.as_served(grid)  # each service of several pools on the pool it serves on
    horizon = instance.horizon_steps
    weights = instance.weights
    batch = {job.id: job for job in instance.batch_jobs}
    realtime = {job.id: job for job in instance.realtime_jobs}
    batch_cells = 0
    value = 0.0
    held: dict[str, list[int]] = {job_id: [0] * horizon for job_id in realtime}
    held_sets: dict[str, list[int]] = {job_id: [0] * horizon for job_id in realtime}
    first_step: dict[str, int] = defaultdict(lambda: horizon)
    first_gpu: dict[str, int] = {}
    rates: dict[str, float] = {}  # batch job -> what one of its GPU-steps is worth per priority and weight
    for g, row in enumerate(grid):
        for t, cell in enumerate(row):
            if cell is None:
                continue
            job = batch.get(cell)
            if job is not None:
                batch_cells += 1
                rate = rates.get(cell)
                if rate is None:  # at the job's first cell (rows ascend: its block's first GPU)
                    first_gpu[cell] = g
                    # On a cluster of pools a GPU-step is worth the job's output rate on its pool.
                    rate = instance.output_rate(job, g) if instance.pooled else 1.0
                    if instance.teams:  # and, with teams, its team's fair-share factor (docs/teams.md)
                        rate *= instance.share_factor(job)
                    rates[cell] = rate
                value += job.priority * weights[t] * rate
                first_step[cell] = min(first_step[cell], t)
            elif cell in held:
                held[cell][t] += 1
                held_sets[cell][t] |= 1 << g
    served_cells = 0
    demand_cells = 0
    penalty = 0.0
    for job_id, counts in held.items():
        rt = realtime[job_id]
        for t, count in enumerate(counts):
            served = min(count, rt.demand[t])
            served_cells += served
            demand_cells += rt.demand[t]
            value += rt.priority * weights[t] * served
            penalty += instance.rt_penalty * rt.priority * weights[t] * (rt.demand[t] - served)
    completed = 0
    unscheduled = 0
    for job in instance.batch_jobs:
        running = instance.running_batch.get(job.id)
        if running is not None:
            completed += running.remaining_steps <= horizon
        elif job.id in first_step:
            steps = instance.run_steps(job, first_gpu[job.id])
            completed += first_step[job.id] + steps <= horizon
        else:
            unscheduled += 1
    usable = instance.usable_cells
    promise_cost = None
    if instance.has_promises:
        promise_cost = sum(instance.promise_cost(job, first_step.get(job.id)) for job in instance.queued_jobs)
    return Metrics(
        utilization=(batch_cells + served_cells) / usable if usable else 0.0,
        value=value,
        penalty=penalty,
        objective=value - penalty - (promise_cost or 0.0),
        rt_coverage=served_cells / demand_cells if demand_cells else 1.0,
        completed=completed,
        unscheduled=unscheduled,
        rt_moves=moves(instance, held_sets),
        promise_cost=promise_cost,
    )


def realtime_objective(instance: Instance, realtime: Mapping[str, Sequence[int]]) -> float:
    """Value minus penalty of the services' holdings (held-GPU bitmasks per step), the
    contract's scoring per service and step."""
    total = 0.0
    weights, penalty = instance.weights, instance.rt_penalty
    for job in instance.realtime_jobs:
        priority = job.priority
        for weight, mask, need in zip(weights, realtime[job.id], job.demand, strict=True):
            held = mask.bit_count()
            served = held if held < need else need
            total += priority * weight * (served - penalty * (need - served))
    return total


def moves(instance: Instance, realtime: Mapping[str, Sequence[int]]) -> int:
    """The ``rt_moves`` metric of the services' holdings (held-GPU bitmasks per step)."""
    running = instance.running_realtime
    return sum(
        realtime_moves(masks, running[job_id].mask if job_id in running else None)
        for job_id, masks in realtime.items()
    )


def realtime_moves(masks: Sequence[int], running: int | None = None) -> int:
    """GPUs one service gains or loses over its held-GPU bitmasks per step; step 0 counts
    against its ``running`` set when it has one."""
    moves = 0
    previous = running
    for mask in masks:
        if previous is not None:
            moves += (mask ^ previous).bit_count()
        previous = mask
    return moves
