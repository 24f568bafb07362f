"""The contract's scores, computed from the grid alone."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
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

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def score(instance: Instance, grid: Sequence[Sequence[Cell]]) -> Metrics:
    """utilization, value, penalty, objective, rt_coverage, completed, unscheduled (CONTRACT.md)."""
    horizon = instance.horizon_steps
    weights = instance.weights
    batch = {job.id: job for job in instance.batch_jobs}
    realtime = {job.id: job for job in instance.realtime_jobs}
    batch_cells = 0
    value = 0.0
    held: dict[str, list[int]] = {job_id: [0] * horizon for job_id in realtime}
    first_step: dict[str, int] = defaultdict(lambda: horizon)
    for row in grid:
        for t, cell in enumerate(row):
            if cell is None:
                continue
            job = batch.get(cell)
            if job is not None:
                batch_cells += 1
                value += job.priority * weights[t]
                first_step[cell] = min(first_step[cell], t)
            elif cell in held:
                held[cell][t] += 1
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
            completed += first_step[job.id] + job.duration_steps <= horizon
        else:
            unscheduled += 1
    usable = instance.usable_cells
    return Metrics(
        utilization=(batch_cells + served_cells) / usable if usable else 0.0,
        value=value,
        penalty=penalty,
        objective=value - penalty,
        rt_coverage=served_cells / demand_cells if demand_cells else 1.0,
        completed=completed,
        unscheduled=unscheduled,
    )
