"""The full mode: the contract's formal model in CP-SAT, hinted with the fast plan.

Variables (binary unless said):

- ``place(job=j, block=a, start=s)``: queued batch job ``j`` runs on GPUs
  ``[a, a + gpus_j)`` from step ``s`` (only aligned blocks and starts whose cells are
  up and not held by running jobs are created);
- ``hold(rt=k, gpu=g, step=t)``: real-time job ``k`` holds GPU ``g`` at step ``t``;
- ``change(rt=k, gpu=g, step=t)``: ``g`` entered or left ``k``'s set at ``t``;
- ``served(rt=k, step=t)``: integer, ``min(|A_k(t)|, demand_k(t))``.

Objective: the contract's ``value - penalty``. Serving one demanded GPU-step of ``k``
gains ``priority_k * w(t)`` and avoids ``rt_penalty * priority_k * w(t)``, so
``objective = sum(place * batch value) + sum((1 + rt_penalty) * p * w * served) - const``.
CP-SAT needs integer weights: each is scaled and rounded *up*, so the solver's bound,
scaled back, is still a valid upper bound on the true objective.

The result is the better (by the exact contract score) of the solver's plan and the
fast plan it was hinted with, so the full mode never scores below the fast mode.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from scheduler.fast import allocate
from scheduler.metrics import score
from scheduler.model import Allocation, BatchJob, Instance, Placement, block_mask, build_grid
from scheduler.policies import Solution

log = logging.getLogger(__name__)

# Objective weights are multiplied by this before rounding up to integers.
OBJECTIVE_SCALE = 1000


@dataclass(frozen=True, slots=True)
class _Option:
    job: BatchJob
    first_gpu: int
    start: int
    end: int


def solve(instance: Instance, *, time_limit_s: float, workers: int = 2, seed: int = 0) -> Solution:
    from ortools.sat.python import cp_model

    fast = allocate(instance)
    fast_objective = score(instance, build_grid(instance, fast)).objective
    model = cp_model.CpModel()
    horizon, gpus, weights = instance.horizon_steps, instance.gpus, instance.weights
    blocked = [d | r for d, r in zip(instance.down_masks, instance.running_masks, strict=True)]

    # --- variables ---------------------------------------------------------------------------
    place: dict[tuple[str, int, int], cp_model.IntVar] = {}
    options: dict[tuple[str, int, int], _Option] = {}
    for job in instance.queued_jobs:
        for start in range(job.release_step, horizon):
            end = job.end_step(start, horizon)
            window = 0
            for t in range(start, end):
                window |= blocked[t]
            for first_gpu in range(0, gpus - job.gpus + 1, job.gpus):
                if window & block_mask(first_gpu, job.gpus):
                    continue
                key = (job.id, first_gpu, start)
                place[key] = model.new_bool_var(f"place(job={job.id}, block={first_gpu}, start={start})")
                options[key] = _Option(job, first_gpu, start, end)
    hold: dict[tuple[str, int, int], cp_model.IntVar] = {}
    for rt in instance.realtime_jobs:
        for t in range(horizon):
            for g in range(gpus):
                if not blocked[t] >> g & 1:
                    hold[rt.id, g, t] = model.new_bool_var(f"hold(rt={rt.id}, gpu={g}, step={t})")
    served = {
        (rt.id, t): model.new_int_var(0, rt.demand[t], f"served(rt={rt.id}, step={t})")
        for rt in instance.realtime_jobs
        for t in range(horizon)
    }

    # --- constraint 1: one job per GPU per step, none on a down GPU -----------------------------
    # (down cells and running jobs' cells have no variables at all)
    covering: dict[tuple[int, int], list[cp_model.IntVar]] = {}
    for key, option in options.items():
        for g in range(option.first_gpu, option.first_gpu + option.job.gpus):
            for t in range(option.start, option.end):
                covering.setdefault((g, t), []).append(place[key])
    for (_, g, t), var in hold.items():
        covering.setdefault((g, t), []).append(var)
    for cell_vars in covering.values():
        if len(cell_vars) > 1:
            model.add_at_most_one(cell_vars)

    # --- constraints 2, 3, 5: each batch job placed at most once, on one aligned block, ------
    # uninterrupted from its start (a single place() variable covers the whole run).
    by_job: dict[str, list[cp_model.IntVar]] = {}
    for (job_id, _, _), var in place.items():
        by_job.setdefault(job_id, []).append(var)
    for job_vars in by_job.values():
        model.add_at_most_one(job_vars)

    # --- constraint 4: real-time swap cap ----------------------------------------------------
    for rt in instance.realtime_jobs:
        running = instance.running_realtime.get(rt.id)
        for t in range(horizon):
            if t == 0 and running is None:
                continue
            changes = []
            for g in range(gpus):
                now = hold.get((rt.id, g, t))
                before: cp_model.IntVar | int
                if t == 0:
                    assert running is not None
                    before = int(g in running.gpus)
                else:
                    before = hold.get((rt.id, g, t - 1), 0)
                if now is None and isinstance(before, int):
                    changes.append(before)
                    continue
                change = model.new_bool_var(f"change(rt={rt.id}, gpu={g}, step={t})")
                model.add(change >= (now if now is not None else 0) - before)
                model.add(change >= before - (now if now is not None else 0))
                changes.append(change)
            model.add(sum(changes) <= rt.swap_cap)
        # served GPU-steps are held GPU-steps, up to demand
        for t in range(horizon):
            held_vars = [hold[rt.id, g, t] for g in range(gpus) if (rt.id, g, t) in hold]
            model.add(served[rt.id, t] <= sum(held_vars))

    # --- objective -----------------------------------------------------------------------------
    def scaled(weight: float) -> int:
        return math.ceil(weight * OBJECTIVE_SCALE - 1e-9)

    terms = []
    for key, option in options.items():
        job = option.job
        terms.append(scaled(job.priority * job.gpus * sum(weights[option.start : option.end])) * place[key])
    constant = 0.0  # running jobs' value and the penalty if nothing were served
    for running_job in instance.running_batch.values():
        job = next(j for j in instance.batch_jobs if j.id == running_job.job_id)
        constant += job.priority * job.gpus * sum(weights[: min(running_job.remaining_steps, horizon)])
    for rt in instance.realtime_jobs:
        for t in range(horizon):
            terms.append(scaled((1 + instance.rt_penalty) * rt.priority * weights[t]) * served[rt.id, t])
            constant -= instance.rt_penalty * rt.priority * weights[t] * rt.demand[t]
    model.maximize(sum(terms))

    # --- hint: the fast plan -------------------------------------------------------------------
    _hint(model, instance, fast, place, hold, served)

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.solve(model)
    status_name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        log.info("CP-SAT returned %s; keeping the fast plan", status_name)
        return Solution(fast, status=status_name, bound=None)
    bound = solver.best_objective_bound / OBJECTIVE_SCALE + constant
    allocation = _read_allocation(instance, solver, place, options, hold)
    solved_objective = score(instance, build_grid(instance, allocation)).objective
    log.info(
        "CP-SAT %s: objective %.3f (fast %.3f), bound %.3f in %.2fs",
        status_name, solved_objective, fast_objective, bound, solver.wall_time,
    )
    if solved_objective + 1e-9 < fast_objective:
        return Solution(fast, status=status_name, bound=bound)
    return Solution(allocation, status=status_name, bound=bound)


def _hint(model, instance, fast, place, hold, served) -> None:  # type: ignore[no-untyped-def]
    for key, var in place.items():
        placement = fast.batch.get(key[0])
        model.add_hint(var, int(placement is not None and (placement.first_gpu, placement.start_step) == key[1:]))
    for (rt_id, g, t), var in hold.items():
        model.add_hint(var, fast.realtime[rt_id][t] >> g & 1)
    for rt in instance.realtime_jobs:
        for t in range(instance.horizon_steps):
            model.add_hint(served[rt.id, t], min(fast.realtime[rt.id][t].bit_count(), rt.demand[t]))


def _read_allocation(instance, solver, place, options, hold) -> Allocation:  # type: ignore[no-untyped-def]
    batch = {
        key[0]: Placement(start_step=options[key].start, first_gpu=options[key].first_gpu)
        for key, var in place.items()
        if solver.boolean_value(var)
    }
    realtime = {}
    for rt in instance.realtime_jobs:
        masks = []
        for t in range(instance.horizon_steps):
            mask = 0
            for g in range(instance.gpus):
                var = hold.get((rt.id, g, t))
                if var is not None and solver.boolean_value(var):
                    mask |= 1 << g
            masks.append(mask)
        realtime[rt.id] = tuple(masks)
    return Allocation(batch=batch, realtime=realtime)
