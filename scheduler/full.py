"""The full mode: the contract's formal model in CP-SAT (:mod:`scheduler.cpmodel`, the
window that covers the whole grid), hinted with the fast plan.

The time limit bounds the whole call: the fast plan, building the model, hinting and
solving. Building stops at the deadline (status ``MODEL_BUILD_TIMEOUT``, the fast plan is
kept), and the solver gets what is left after a reserve for reading its answer back.

The result is the better (by the exact contract score) of the solver's plan and the
fast plan it was hinted with, so the full mode never scores below the fast mode.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from contract.scenario import Instance
from scheduler import pools, teams
from scheduler.budget import Budget
from scheduler.churn import settle
from scheduler.cpmodel import (
    OBJECTIVE_SCALE,
    BuildTimeoutError,
    Window,
    build_churn_model,
    build_model,
    hint,
    read_allocation,
)
from scheduler.fast import allocate_at_least_hot_path, best_of, objective
from scheduler.metrics import moves, score
from scheduler.model import HOT_PATH_BUDGET_MS, PLAN_CYCLE_BUDGET_MS, Allocation, Solution, build_grid

log = logging.getLogger(__name__)

# Above this many variables the full mode keeps the fast plan (status MODEL_TOO_LARGE).
MAX_MODEL_VARIABLES = 500_000
# The share of the time limit the fast plan (the hint) may take, at most the plan cycle's budget.
HINT_SHARE = 0.05
# Seconds that building and hinting take per model variable, at the least (this machine,
# unloaded: 128 GPUs / 200 jobs, ~290,000 variables, in about 4 s).
BUILD_S_PER_VARIABLE = 1.2e-5
# Seconds CP-SAT takes per model variable to load the model before its time limit starts
# counting (measured: 283,000 variables, 4 s on this machine under load).
SOLVE_LOAD_S_PER_VARIABLE = 1.5e-5
# Above this many variables, presolve skips symmetry detection and probing: on the 64-GPU
# benchmark (32,000 variables) they overran a 3 s limit by 1.4 s and found nothing; without
# them the solve ends at 3.1 s with a plan. Smaller models keep them (they help proofs).
LIGHT_PRESOLVE_VARIABLES = 10_000
LIGHT_PRESOLVE: dict[str, object] = {"symmetry_level": 0, "cp_model_probing_level": 0}
# The share of the time limit kept for the fewest real-time moves around the chosen plan's
# batch work (a second solve; the first spends its time on value). A work-only limit gets it
# on top (see solve).
CHURN_SHARE = 0.05
# With less than this left to search, the solver is not started.
MIN_SOLVE_S = 0.05
# Seconds kept back from the solver per model variable, for reading the answer and scoring it.
READ_BACK_S_PER_VARIABLE = 2e-6
READ_BACK_MIN_S = 0.02


def solve(
    instance: Instance, *, time_limit_s: float, workers: int = 2, seed: int = 0, wall_clock: bool = True
) -> Solution:
    """The full mode's plan. ``wall_clock=False`` counts work, not time: the hint gets a
    work-only budget, building has no deadline, and CP-SAT stops at ``time_limit_s`` of its
    deterministic time (and the fewest-moves solve at :data:`CHURN_SHARE` of it more), so
    with one worker the plan is the same however busy the machine is."""
    started = time.perf_counter()  # loading CP-SAT (about a second, the first time) counts too
    from ortools.sat.python import cp_model

    deadline = started + time_limit_s if wall_clock else math.inf
    hint_ms = max(HOT_PATH_BUDGET_MS, min(PLAN_CYCLE_BUDGET_MS, HINT_SHARE * time_limit_s * 1000))
    hint_budget = Budget.of(hint_ms, wall_clock=wall_clock, started=started)
    fast = _hint(instance, hint_budget)
    size = model_size(instance)
    if size > MAX_MODEL_VARIABLES:
        # Building the model alone would take longer than any sensible time limit.
        log.warning(
            "CP-SAT model of ~%d variables exceeds %d; keeping the fast plan", size, MAX_MODEL_VARIABLES
        )
        return Solution(fast, status="MODEL_TOO_LARGE", bound=None)
    fast_objective = score(instance, build_grid(instance, fast)).objective
    model = cp_model.CpModel()
    read_back_s = max(READ_BACK_MIN_S, READ_BACK_S_PER_VARIABLE * size)
    try:
        v, constant = build_model(
            model, instance, Window.whole(instance), fast, deadline=deadline - read_back_s
        )
        hint(model, v, instance, fast)
    except BuildTimeoutError:
        log.warning(
            "building the CP-SAT model would exceed the %.3gs limit; keeping the fast plan", time_limit_s
        )
        return Solution(fast, status="MODEL_BUILD_TIMEOUT", bound=None)
    # CP-SAT loads the model before its own clock starts: that time comes off its limit. A
    # work-only limit is CP-SAT's own deterministic time, which loading does not count. On
    # the wall clock, the last share of the limit is kept for the fewest real-time moves; a
    # work-only limit is the first solve's (as the hint's work is not counted in it either),
    # and the moves get that share on top, so that they never take search from the value.
    churn_s = CHURN_SHARE * time_limit_s
    remaining_s = (
        deadline - read_back_s - churn_s - time.perf_counter() - SOLVE_LOAD_S_PER_VARIABLE * v.count
        if wall_clock
        else time_limit_s
    )
    if remaining_s < MIN_SOLVE_S:
        log.warning("no time left to solve within the %.3gs limit; keeping the fast plan", time_limit_s)
        return Solution(fast, status="MODEL_BUILD_TIMEOUT", bound=None)

    solver = _solver(remaining_s, wall_clock=wall_clock, workers=workers, seed=seed, variables=v.count)
    status = solver.solve(model)
    status_name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        log.info("CP-SAT returned %s; keeping the fast plan", status_name)
        return Solution(fast, status=status_name, bound=None)
    bound = v.value_bound(solver.best_objective_bound) / OBJECTIVE_SCALE + constant
    allocation = read_allocation(v, instance, solver)
    solved_objective = score(instance, build_grid(instance, allocation)).objective
    log.info(
        "CP-SAT %s: objective %.3f (fast %.3f), bound %.3f in %.2fs",
        status_name,
        solved_objective,
        fast_objective,
        bound,
        solver.wall_time,
    )
    # The better by the contract's score (fewer real-time moves at equal score: the fast plan
    # when it moves no more), settled for the fewest moves around its batch work.
    chosen = _settle(instance, _best_of(instance, [fast, allocation]))
    churn_left_s = deadline - read_back_s - time.perf_counter() if wall_clock else churn_s
    return Solution(
        fewest_moves(
            instance,
            chosen,
            churn_left_s,
            deadline=deadline - read_back_s,
            wall_clock=wall_clock,
            workers=workers,
            seed=seed,
        ),
        status=status_name,
        bound=bound,
    )


def fewest_moves(
    instance: Instance,
    plan: Allocation,
    limit_s: float,
    *,
    deadline: float,
    wall_clock: bool,
    workers: int,
    seed: int,
) -> Allocation:
    """``plan`` with its services re-planned by CP-SAT around its batch work for the fewest
    real-time moves (:func:`~scheduler.cpmodel.build_churn_model`), within ``limit_s``
    (deterministic seconds when not ``wall_clock``), when that moves fewer GPUs at no lower
    score; else ``plan``. The settling heuristic cannot always follow a plan's swap caps
    (it then keeps the plan's own holdings), and CP-SAT, searching for value, leaves the
    tie-break far from its best."""
    from ortools.sat.python import cp_model

    if limit_s < MIN_SOLVE_S or moves(instance, plan.realtime) == 0:
        return plan
    model = cp_model.CpModel()
    try:
        v = build_churn_model(model, instance, plan, deadline=deadline if wall_clock else None)
        hint(model, v, instance, plan)
    except BuildTimeoutError:
        return plan
    if wall_clock:
        limit_s = min(limit_s, deadline - time.perf_counter() - SOLVE_LOAD_S_PER_VARIABLE * v.count)
        if limit_s < MIN_SOLVE_S:
            return plan
    solver = _solver(limit_s, wall_clock=wall_clock, workers=workers, seed=seed, variables=v.count)
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return plan
    return _best_of(instance, [plan, read_allocation(v, instance, solver)])


def _hint(instance: Instance, budget: Budget) -> Allocation:
    """The fast plan the model is hinted with (on a cluster of pools, :mod:`scheduler.pools`'; with
    teams, made to keep constraint 7 by :mod:`scheduler.teams`)."""
    if instance.teams:
        # The hot path's plan and the floors too: the repair may keep less of a longer search's
        # plan, and the full mode never answers below the fast mode.
        hot = budget.sibling(HOT_PATH_BUDGET_MS)
        return teams.planned_best(
            instance, [lambda plain: _hint(plain, budget), lambda plain: _hint(plain, hot)]
        )
    if instance.pooled:
        return pools.allocate(instance, budget, allocate_at_least_hot_path, objective)
    return allocate_at_least_hot_path(instance, budget)


def _best_of(instance: Instance, allocations: list[Allocation]) -> Allocation:
    if instance.pooled:
        return pools.best_of(instance, allocations)
    # With teams, at the teams' worth: the fast mode's objective of the weighted instance.
    return best_of(teams.weighted(instance) if instance.teams else instance, allocations)


def _settle(instance: Instance, allocation: Allocation) -> Allocation:
    """The services re-planned for the fewest moves (pool by pool on a cluster of pools)."""
    return pools.per_pool(instance, allocation, settle) if instance.pooled else settle(instance, allocation)


def _solver(limit_s: float, *, wall_clock: bool, workers: int, seed: int, variables: int) -> Any:
    """A CP-SAT solver stopped at ``limit_s`` (of deterministic time when not ``wall_clock``)."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.catch_sigint_signal = False  # the caller's SIGINT handler stays (see lns.py)
    if wall_clock:
        solver.parameters.max_time_in_seconds = limit_s
    else:
        solver.parameters.max_deterministic_time = limit_s
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    if variables > LIGHT_PRESOLVE_VARIABLES:
        for name, value in LIGHT_PRESOLVE.items():
            setattr(solver.parameters, name, value)
    return solver


def model_size(instance: Instance) -> int:
    """An upper estimate of the model's variables: placements plus two per real-time cell."""
    horizon, gpus = instance.horizon_steps, instance.gpus
    placements = sum((gpus // job.gpus) * max(0, horizon - job.release_step) for job in instance.queued_jobs)
    return placements + 2 * len(instance.realtime_jobs) * gpus * horizon
