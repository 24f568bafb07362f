"""The independent plan checker: the contract's five constraints, in pure Python.

``check_plan`` reads only the instance and the grid, never a policy's internals,
so it judges baselines, the heuristic and the solver alike (the CP-SAT Primer's
``assert_solution_is_feasible``). It returns every breach rather than the first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from contract.scenario import BatchJob, Cell, Instance, RealtimeJob
from scheduler.lending import excesses
from scheduler.model import Placement

CONSTRAINT_NAMES = {
    1: "one job per GPU per step, none on a down GPU",
    2: "demand ranges respected, running work inherited",
    3: "contiguous power-of-two blocks",
    4: "real-time swap cap",
    5: "no preemption",
    6: "pools: inside one allowed pool, aligned in it, its duration, a service on one of its pools",
    7: "teams: GPUs beyond a team's quota only where lent, to P90 ends before the owner's need",
}


@dataclass(frozen=True, slots=True)
class Violation:
    constraint: int
    job: str | None
    gpu: int | None
    step: int | None
    detail: str

    def __str__(self) -> str:
        job = self.job if self.job is not None else "-"
        gpu = self.gpu if self.gpu is not None else "-"
        step = self.step if self.step is not None else "-"
        return (
            f"constraint {self.constraint} ({CONSTRAINT_NAMES[self.constraint]}): "
            f"job {job}, GPU {gpu}, step {step}: {self.detail}"
        )


def check_plan(instance: Instance, grid: Sequence[Sequence[Cell]]) -> list[Violation]:
    """Every violation of the contract in ``grid``; empty when the plan is legal."""
    shape = _check_shape(instance, grid)
    if shape:
        return shape
    if instance.has_app_choices:
        return _check_serving(instance, grid)
    violations: list[Violation] = []
    # job id -> step -> GPUs holding it
    cells: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    down = instance.down_masks
    known = instance.jobs_by_id
    for gpu, row in enumerate(grid):
        for t, cell in enumerate(row):
            if cell is None:
                continue
            if cell not in known:
                violations.append(Violation(1, cell, gpu, t, "not a job of the scenario"))
                continue
            if down[t] >> gpu & 1:
                violations.append(Violation(1, cell, gpu, t, "GPU is down at this step"))
            cells[cell][t].append(gpu)
    for job in instance.batch_jobs:
        if job.id in instance.running_batch:
            violations += _check_running(instance, job, cells.get(job.id, {}))
        else:
            violations += _check_batch(instance, job, cells.get(job.id, {}))
    for rt in instance.realtime_jobs:
        violations += _check_swaps(instance, rt.id, rt.swap_cap, cells.get(rt.id, {}))
        if instance.pooled:
            violations += _check_realtime_pool(instance, rt, cells.get(rt.id, {}))
    if instance.teams:
        violations += _check_lending(instance, cells)
    return violations


def _check_serving(instance: Instance, grid: Sequence[Sequence[Cell]]) -> list[Violation]:
    """Constraint 6 for a service of several pools: it serves on one of its pools, the one of
    its first GPU held, and the plan is then judged with it on that pool alone (its GPUs
    elsewhere are outside its pool)."""
    chosen = instance.serving_in(grid)
    out = [
        Violation(6, job.id, None, None, f"on pool {chosen[job.id]}, not one of {list(job.demand_by_pool)}")
        for job in instance.realtime_jobs
        if job.demand_by_pool is not None and chosen[job.id] not in job.demand_by_pool
    ]
    return out + check_plan(instance.as_served(grid), grid)


def _check_lending(instance: Instance, cells: dict[str, dict[int, list[int]]]) -> list[Violation]:
    """Constraint 7 (docs/contract.md, "Teams") on the queued jobs' starts and first GPUs in the grid."""
    starts = {}
    for job in instance.queued_jobs:
        held = cells.get(job.id)
        if held:
            start = min(held)
            starts[job.id] = Placement(start_step=start, first_gpu=min(held[start]))
    return [
        Violation(
            7,
            excess.jobs[-1] if excess.jobs else None,
            None,
            excess.step,
            f"on GPU model {excess.model} queued work holds {excess.borrowed} GPUs beyond its teams' "
            f"quotas (to its P90 ends); the quotas' owners can lend {excess.lendable} then",
        )
        for excess in excesses(instance, starts)
    ]


def _check_shape(instance: Instance, grid: Sequence[Sequence[Cell]]) -> list[Violation]:
    if len(grid) != instance.gpus:
        return [
            Violation(
                1,
                None,
                None,
                None,
                f"grid has {len(grid)} rows, expected one per GPU ({instance.gpus})",
            )
        ]
    bad = [
        Violation(1, None, gpu, None, f"row has {len(row)} cells, expected {instance.horizon_steps}")
        for gpu, row in enumerate(grid)
        if len(row) != instance.horizon_steps
    ]
    bad += [
        Violation(1, None, gpu, t, f"cell must be a job id or null, got {cell!r}")
        for gpu, row in enumerate(grid)
        for t, cell in enumerate(row)
        if cell is not None and not isinstance(cell, str)
    ]
    return bad


def _check_batch(instance: Instance, job: BatchJob, held: dict[int, list[int]]) -> list[Violation]:
    """Rules 2, 3 and 5 for a queued batch job."""
    if not held:
        return []  # never placed: legal, scored as unscheduled
    out: list[Violation] = []
    steps = sorted(held)
    start = steps[0]
    first_block = sorted(held[start])
    end = instance.run_end(job, start, first_block[0])
    if instance.pooled:
        pool = instance.pool_of_gpu(first_block[0])
        if job.steps_on(pool.name) is None:
            names = [p.name for p in instance.allowed_pools(job)]
            return [Violation(6, job.id, first_block[0], start, f"on pool {pool.name}, not one of {names}")]
        if len(first_block) == job.gpus and not pool.holds(first_block[0], job.gpus):
            return [
                Violation(
                    6,
                    job.id,
                    first_block[0],
                    start,
                    f"GPUs {first_block} not an aligned block of pool {pool.name}",
                )
            ]
    if start < job.release_step:
        out.append(
            Violation(
                2,
                job.id,
                first_block[0],
                start,
                f"starts before its release step {job.release_step}",
            )
        )
    for t in range(start, end):
        if t not in held:
            out.append(
                Violation(
                    5,
                    job.id,
                    first_block[0],
                    t,
                    f"interrupted: absent at step {t} of its run {start}..{end - 1}",
                )
            )
    for t in steps:
        gpus = sorted(held[t])
        if t >= end:
            out.append(
                Violation(
                    2,
                    job.id,
                    gpus[0],
                    t,
                    f"runs past its duration ({instance.run_steps(job, first_block[0])} steps from {start})",
                )
            )
            continue
        if len(gpus) != job.gpus:
            out.append(Violation(2, job.id, gpus[0], t, f"holds {len(gpus)} GPUs, needs exactly {job.gpus}"))
        elif gpus != list(range(gpus[0], gpus[0] + job.gpus)) or (not instance.pooled and gpus[0] % job.gpus):
            out.append(
                Violation(3, job.id, gpus[0], t, f"GPUs {gpus} are not an aligned block of {job.gpus}")
            )
        elif gpus != first_block:
            out.append(Violation(3, job.id, gpus[0], t, f"changes block from {first_block} to {gpus}"))
    return out


def _check_running(instance: Instance, job: BatchJob, held: dict[int, list[int]]) -> list[Violation]:
    """A running job occupies its given GPUs from step 0 for its remaining steps, nowhere else."""
    running = instance.running_batch[job.id]
    end = min(running.remaining_steps, instance.horizon_steps)
    expected = set(range(running.first_gpu, running.first_gpu + running.gpus))
    out: list[Violation] = []
    for t in range(instance.horizon_steps):
        got = set(held.get(t, ()))
        want = expected if t < end else set()
        out += [
            Violation(5, job.id, g, t, "running job missing from its GPU (never moved or stopped)")
            for g in sorted(want - got)
        ]
        out += [
            Violation(5, job.id, g, t, "running job outside its GPUs or past its remaining steps")
            for g in sorted(got - want)
        ]
    return out


def _check_swaps(
    instance: Instance, job_id: str, swap_cap: int, held: dict[int, list[int]]
) -> list[Violation]:
    running = instance.running_realtime.get(job_id)
    previous: set[int] | None = set(running.gpus) if running else None
    out: list[Violation] = []
    for t in range(instance.horizon_steps):
        current = set(held.get(t, ()))
        if previous is not None:
            changed = current ^ previous
            if len(changed) > swap_cap:
                out.append(
                    Violation(
                        4,
                        job_id,
                        min(changed),
                        t,
                        f"{len(changed)} GPUs changed since the previous step, cap {swap_cap}",
                    )
                )
        previous = current
    return out


def _check_realtime_pool(instance: Instance, rt: RealtimeJob, held: dict[int, list[int]]) -> list[Violation]:
    """A service holds GPUs of its own pool only."""
    pool = instance.realtime_pool(rt)
    return [
        Violation(6, rt.id, gpu, t, f"outside the service's pool {pool.name}")
        for t, gpus in sorted(held.items())
        for gpu in gpus
        if not pool.first_gpu <= gpu < pool.end_gpu
    ]
