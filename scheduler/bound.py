"""An upper bound on the objective at any cluster size: the plan's linear relaxation.

CP-SAT proves a bound only where its model builds (up to a few hundred GPUs within a
minute). This bound holds for every instance and takes a second at 4,096 GPUs. It relaxes
the contract's constraints to what a linear program can say per step:

- a queued batch job may run any fraction ``x[j, t]`` of each step from its release on, for
  at most its duration in all (no contiguity, no fixed block, no preemption rule);
- a real-time service holds ``h[k, t]`` GPUs, a count that moves by at most its swap cap a
  step (``| |A(t)| - |A(t-1)| | <= |A(t) symmetric-difference A(t-1)|``), from its running
  set's size at step 0 when it has one, and serves ``y[k, t]``, at most its demand and at
  most what it holds (no GPU identity);
- per step, batch GPUs plus held real-time GPUs fit in the GPUs neither down nor held by
  running batch work.

Every legal plan is a point of that program, so its optimum bounds the objective from
above. Promises (a cost of its own, never negative) are left out, which keeps it a bound.
Real-time shortfall is charged as the contract charges it: the penalty on all demand,
with each served GPU-step earning its value and the penalty it saves.

Where every job can start at its release without contention the program's optimum is the
plan that does so, and a plan that reaches it is proven optimal.
"""

from __future__ import annotations

from typing import Any

from contract.scenario import Instance


def relaxed_bound(instance: Instance) -> float:
    """The optimum of the plan's linear relaxation (GLOP): at least any legal plan's objective."""
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("GLOP")
    horizon, weights = instance.horizon_steps, instance.weights
    free = [
        (instance.all_gpus_mask & ~(instance.down_masks[t] | instance.running_masks[t])).bit_count()
        for t in range(horizon)
    ]
    objective = solver.Objective()
    used: list[list[tuple[Any, int]]] = [[] for _ in range(horizon)]
    for job in instance.queued_jobs:
        steps = range(max(0, job.release_step), horizon)
        if not steps or job.gpus > instance.gpus:
            continue
        runs = [solver.NumVar(0.0, 1.0, "") for _ in steps]
        total = solver.Constraint(0.0, float(min(job.duration_steps, len(steps))))
        for t, x in zip(steps, runs, strict=True):
            total.SetCoefficient(x, 1.0)
            objective.SetCoefficient(x, job.priority * job.gpus * weights[t])
            used[t].append((x, job.gpus))
    penalty = 0.0
    for service in instance.realtime_jobs:
        earns = (1.0 + instance.rt_penalty) * service.priority
        held = [solver.NumVar(0.0, float(free[t]), "") for t in range(horizon)]
        running = instance.running_realtime.get(service.id)
        before = None if running is None else float(len(running.gpus))
        for t in range(horizon):
            demand = service.demand[t]
            used[t].append((held[t], 1))
            if t > 0:
                _within_cap(solver, held[t], held[t - 1], 0.0, service.swap_cap)
            elif before is not None:
                _within_cap(solver, held[0], None, before, service.swap_cap)
            if demand <= 0:
                continue
            penalty += instance.rt_penalty * service.priority * weights[t] * demand
            served = solver.NumVar(0.0, float(demand), "")
            objective.SetCoefficient(served, earns * weights[t])
            solver.Add(served <= held[t])
    for t in range(horizon):
        if used[t]:
            capacity = solver.Constraint(0.0, float(free[t]))
            for variable, gpus in used[t]:
                capacity.SetCoefficient(variable, float(gpus))
    objective.SetMaximization()
    status = solver.Solve()
    if status != pywraplp.Solver.OPTIMAL:  # a bounded, feasible program (0 is a point): never
        raise RuntimeError(f"the relaxation of {instance.name} ended with GLOP status {status}")
    return float(objective.Value()) + _running_value(instance) - penalty


def _within_cap(solver: Any, count: Any, previous: Any, fixed: float, cap: int) -> None:
    """``|count - previous| <= cap``, ``previous`` a variable or (None) the number ``fixed``."""
    if previous is None:
        solver.Add(count <= fixed + cap)
        solver.Add(count >= fixed - cap)
    else:
        solver.Add(count - previous <= cap)
        solver.Add(previous - count <= cap)


def _running_value(instance: Instance) -> float:
    """What the running batch jobs earn where they are (fixed by the contract)."""
    priorities = {job.id: job.priority for job in instance.batch_jobs}
    weights = instance.weights
    return sum(
        priorities[job_id]
        * running.gpus
        * sum(weights[: min(running.remaining_steps, instance.horizon_steps)])
        for job_id, running in instance.running_batch.items()
    )
