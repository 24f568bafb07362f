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
from dataclasses import dataclass, field
from typing import Any

from scheduler.fast import allocate
from scheduler.metrics import score
from scheduler.model import Allocation, BatchJob, Instance, Placement, Solution, block_mask, build_grid

log = logging.getLogger(__name__)

# Objective weights are multiplied by this before rounding up to integers.
OBJECTIVE_SCALE = 1000
# Above this many variables the full mode keeps the fast plan (status MODEL_TOO_LARGE).
MAX_MODEL_VARIABLES = 500_000


@dataclass(frozen=True, slots=True)
class _Option:
    job: BatchJob
    first_gpu: int
    start: int
    end: int


@dataclass
class _Variables:
    """The model's decision variables, keyed by meaning."""

    place: dict[tuple[str, int, int], Any] = field(default_factory=dict)  # (job, block, start)
    options: dict[tuple[str, int, int], _Option] = field(default_factory=dict)
    hold: dict[tuple[str, int, int], Any] = field(default_factory=dict)  # (rt job, gpu, step)
    served: dict[tuple[str, int], Any] = field(default_factory=dict)  # (rt job, step)


def solve(instance: Instance, *, time_limit_s: float, workers: int = 2, seed: int = 0) -> Solution:
    from ortools.sat.python import cp_model

    fast = allocate(instance)
    size = model_size(instance)
    if size > MAX_MODEL_VARIABLES:
        # Building the model alone would take longer than any sensible time limit.
        log.warning(
            "CP-SAT model of ~%d variables exceeds %d; keeping the fast plan", size, MAX_MODEL_VARIABLES
        )
        return Solution(fast, status="MODEL_TOO_LARGE", bound=None)
    fast_objective = score(instance, build_grid(instance, fast)).objective
    model = cp_model.CpModel()
    v, constant = _build_model(model, instance)
    _hint(model, v, instance, fast)

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
    allocation = _read_allocation(v, instance, solver)
    solved_objective = score(instance, build_grid(instance, allocation)).objective
    log.info(
        "CP-SAT %s: objective %.3f (fast %.3f), bound %.3f in %.2fs",
        status_name,
        solved_objective,
        fast_objective,
        bound,
        solver.wall_time,
    )
    if solved_objective + 1e-9 < fast_objective:
        return Solution(fast, status=status_name, bound=bound)
    return Solution(allocation, status=status_name, bound=bound)


def model_size(instance: Instance) -> int:
    """An upper estimate of the model's variables: placements plus two per real-time cell."""
    horizon, gpus = instance.horizon_steps, instance.gpus
    placements = sum((gpus // job.gpus) * max(0, horizon - job.release_step) for job in instance.queued_jobs)
    return placements + 2 * len(instance.realtime_jobs) * gpus * horizon


def _build_model(model: Any, instance: Instance) -> tuple[_Variables, float]:
    """Variables, one block per constraint, objective; returns the objective's constant part."""
    horizon, gpus, weights = instance.horizon_steps, instance.gpus, instance.weights
    blocked = [d | r for d, r in zip(instance.down_masks, instance.running_masks, strict=True)]
    v = _Variables()

    # --- variables ---------------------------------------------------------------------------
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
                v.place[key] = model.new_bool_var(f"place(job={job.id}, block={first_gpu}, start={start})")
                v.options[key] = _Option(job, first_gpu, start, end)
    for rt in instance.realtime_jobs:
        for t in range(horizon):
            for g in range(gpus):
                if not blocked[t] >> g & 1:
                    v.hold[rt.id, g, t] = model.new_bool_var(f"hold(rt={rt.id}, gpu={g}, step={t})")
            v.served[rt.id, t] = model.new_int_var(0, rt.demand[t], f"served(rt={rt.id}, step={t})")

    # --- constraint 1: one job per GPU per step, none on a down GPU ----------------------------
    # (down cells and running jobs' cells have no variables at all)
    covering: dict[tuple[int, int], list[Any]] = {}
    for key, option in v.options.items():
        for g in range(option.first_gpu, option.first_gpu + option.job.gpus):
            for t in range(option.start, option.end):
                covering.setdefault((g, t), []).append(v.place[key])
    for (_, g, t), var in v.hold.items():
        covering.setdefault((g, t), []).append(var)
    for cell_vars in covering.values():
        if len(cell_vars) > 1:
            model.add_at_most_one(cell_vars)

    # --- constraints 2, 3, 5: a batch job runs at most once, on one aligned block, without a
    # break from its start (one place() variable stands for the whole run) ----------------------
    by_job: dict[str, list[Any]] = {}
    for (job_id, _, _), var in v.place.items():
        by_job.setdefault(job_id, []).append(var)
    for job_vars in by_job.values():
        model.add_at_most_one(job_vars)

    # --- constraint 4: real-time swap cap; served GPU-steps are held ones, up to demand --------
    for rt in instance.realtime_jobs:
        running = instance.running_realtime.get(rt.id)
        for t in range(horizon):
            held_vars = [v.hold[rt.id, g, t] for g in range(gpus) if (rt.id, g, t) in v.hold]
            model.add(v.served[rt.id, t] <= sum(held_vars))
            if t == 0 and running is None:
                continue
            changes: list[Any] = []
            for g in range(gpus):
                now = v.hold.get((rt.id, g, t), 0)
                before = int(g in running.gpus) if t == 0 and running else v.hold.get((rt.id, g, t - 1), 0)
                if isinstance(now, int) and isinstance(before, int):
                    changes.append(abs(now - before))
                    continue
                change = model.new_bool_var(f"change(rt={rt.id}, gpu={g}, step={t})")
                model.add(change >= now - before)
                model.add(change >= before - now)
                changes.append(change)
            model.add(sum(changes) <= rt.swap_cap)

    # --- objective -----------------------------------------------------------------------------
    terms = []
    for key, option in v.options.items():
        job = option.job
        terms.append(
            _scaled(job.priority * job.gpus * sum(weights[option.start : option.end])) * v.place[key]
        )
    constant = 0.0  # running jobs' value, and the penalty if nothing were served
    batch = {job.id: job for job in instance.batch_jobs}
    for running_job in instance.running_batch.values():
        steps = min(running_job.remaining_steps, horizon)
        constant += batch[running_job.job_id].priority * running_job.gpus * sum(weights[:steps])
    for rt in instance.realtime_jobs:
        for t in range(horizon):
            terms.append(_scaled((1 + instance.rt_penalty) * rt.priority * weights[t]) * v.served[rt.id, t])
            constant -= instance.rt_penalty * rt.priority * weights[t] * rt.demand[t]
    model.maximize(sum(terms))
    return v, constant


def _scaled(weight: float) -> int:
    """Integer objective weight, rounded up so that the scaled-back bound stays an upper bound."""
    return math.ceil(weight * OBJECTIVE_SCALE - 1e-9)


def _hint(model: Any, v: _Variables, instance: Instance, fast: Allocation) -> None:
    for key, var in v.place.items():
        placement = fast.batch.get(key[0])
        model.add_hint(var, placement is not None and (placement.first_gpu, placement.start_step) == key[1:])
    for (rt_id, g, t), var in v.hold.items():
        model.add_hint(var, bool(fast.realtime[rt_id][t] >> g & 1))
    for rt in instance.realtime_jobs:
        for t in range(instance.horizon_steps):
            model.add_hint(v.served[rt.id, t], min(fast.realtime[rt.id][t].bit_count(), rt.demand[t]))


def _read_allocation(v: _Variables, instance: Instance, solver: Any) -> Allocation:
    batch = {
        key[0]: Placement(start_step=v.options[key].start, first_gpu=v.options[key].first_gpu)
        for key, var in v.place.items()
        if solver.boolean_value(var)
    }
    realtime = {}
    for rt in instance.realtime_jobs:
        masks = []
        for t in range(instance.horizon_steps):
            mask = 0
            for g in range(instance.gpus):
                var = v.hold.get((rt.id, g, t))
                if var is not None and solver.boolean_value(var):
                    mask |= 1 << g
            masks.append(mask)
        realtime[rt.id] = tuple(masks)
    return Allocation(batch=batch, realtime=realtime)
