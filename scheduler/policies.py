"""One registry of policies, and :func:`plan`, the call a daemon tick or the CLI makes.

A policy maps an :class:`Instance` to a :class:`Solution`. The plan that comes out
is always checked by :func:`scheduler.check.check_plan` before it is returned, so an
illegal grid can never leave this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from contract.scenario import Grid, Instance
from scheduler import baselines, churn, fast, full, lns, pools, serving, teams
from scheduler.budget import Budget
from scheduler.check import check_plan
from scheduler.lns import warm_up
from scheduler.metrics import Metrics, score
from scheduler.model import (
    HOT_PATH_BUDGET_MS,
    PLAN_CYCLE_BUDGET_MS,
    Allocation,
    Solution,
    SolveOptions,
    build_grid,
)

__all__ = [
    "HOT_PATH_BUDGET_MS",
    "PLAN_CYCLE_BUDGET_MS",
    "POLICIES",
    "IllegalPlanError",
    "Plan",
    "PolicyName",
    "Solution",
    "SolveOptions",
    "plan",
    "warm_up",
]


class PolicyName(StrEnum):
    FAST = "fast"
    FULL = "full"
    FIFO = "fifo"
    FIFO_BACKFILL = "fifo-backfill"
    PRIORITY_BACKFILL = "priority-backfill"
    FASTEST_FREE = "fastest-free"


#: The contract's policies (the baselines of docs/contract.md and both modes): what the demo
#: compares. ``fastest-free`` is the pooled cluster's baseline (on one pool, fifo-backfill).
CONTRACT_POLICIES = tuple(name for name in PolicyName if name is not PolicyName.FASTEST_FREE)


@dataclass(frozen=True)
class Plan:
    """The contract's plan file, as a value."""

    scenario: str
    policy: str
    grid: Grid
    metrics: Metrics
    solve_ms: float
    status: str
    bound: float | None

    def as_dict(self) -> dict[str, object]:
        return {
            "scenario": self.scenario,
            "policy": self.policy,
            "grid": [list(row) for row in self.grid],
            "metrics": self.metrics.as_dict(),
            "solve_ms": round(self.solve_ms, 3),
            "status": self.status,
            "bound": self.bound,
        }


class IllegalPlanError(RuntimeError):
    """A policy produced a grid that breaks the contract: a bug, never the user's input."""


PolicyFn = Callable[[Instance, SolveOptions], Solution]


def _baseline(fn: Callable[[Instance], Allocation]) -> PolicyFn:
    def policy(instance: Instance, options: SolveOptions) -> Solution:
        if instance.teams:  # today's rule at the teams' worth, then constraint 7 kept
            return Solution(teams.planned(instance, fn))
        return Solution(fn(instance))

    return policy


def _fast(instance: Instance, options: SolveOptions) -> Solution:
    """The anytime fast mode: the heuristic within the budget; with a plan cycle's budget,
    the heuristic within a share of it and then the CP-SAT window search in the rest.

    The search runs when ``options.cp_sat`` asks for it; a caller loads CP-SAT first
    (:func:`scheduler.lns.warm_up`), or the first search pays about a second for it.
    """
    if instance.teams:  # planned at the teams' worth, then made to keep constraint 7
        return Solution(teams.planned_best(instance, [lambda plain: _fast(plain, options).allocation]))
    budget = Budget.of(options.budget_ms, wall_clock=options.wall_clock)
    if instance.pooled:
        return _fast_pools(instance, options, budget)
    if options.budget_ms < lns.MIN_BUDGET_MS or not options.cp_sat:
        return Solution(fast.allocate(instance, budget))
    heuristic = budget.sibling(lns.HEURISTIC_SHARE * options.budget_ms, started=budget.started)
    start = fast.allocate_at_least_hot_path(instance, heuristic)
    allocation, report = lns.improve(instance, start, budget, options.seed)
    settled = churn.settle(instance, allocation)
    return Solution(settled, status="OPTIMAL" if report.proven_optimal else "FEASIBLE")


def _fast_pools(instance: Instance, options: SolveOptions, budget: Budget) -> Solution:
    """The fast mode on a cluster of pools (:mod:`scheduler.pools`): each job's pool chosen and
    every pool planned by the single-pool allocator; with a plan cycle's budget, the window
    search then improves each pool's plan in an equal share of what is left."""
    if options.budget_ms < lns.MIN_BUDGET_MS or not options.cp_sat:
        return Solution(pools.allocate(instance, budget, fast.allocate, fast.objective))
    heuristic = budget.sibling(lns.HEURISTIC_SHARE * options.budget_ms, started=budget.started)
    start = pools.allocate(instance, heuristic, fast.allocate_at_least_hot_path, fast.objective)
    share_ms = max(lns.MIN_BUDGET_MS, (1 - lns.HEURISTIC_SHARE) * options.budget_ms / len(instance.pools))

    def improve(sub: Instance, allocation: Allocation) -> Allocation:
        improved, _ = lns.improve(sub, allocation, budget.sibling(share_ms), options.seed)
        return churn.settle(sub, improved)

    return Solution(pools.per_pool(instance, start, improve))


def _full(instance: Instance, options: SolveOptions) -> Solution:
    return full.solve(
        instance,
        time_limit_s=options.time_limit_s,
        workers=options.workers,
        seed=options.seed,
        wall_clock=options.wall_clock,
    )


POLICIES: dict[PolicyName, PolicyFn] = {
    PolicyName.FAST: _fast,
    PolicyName.FULL: _full,
    PolicyName.FIFO: _baseline(baselines.fifo),
    PolicyName.FIFO_BACKFILL: _baseline(baselines.fifo_backfill),
    PolicyName.PRIORITY_BACKFILL: _baseline(baselines.priority_backfill),
    PolicyName.FASTEST_FREE: _baseline(baselines.fastest_free),
}


def _services_placed(instance: Instance, policy: PolicyName, options: SolveOptions) -> Instance:
    """``instance`` with each service of several pools on one (:mod:`scheduler.serving`): the
    baselines put it on its default pool, as a person would; both modes on the pool where the
    fast mode's plan scores highest (within ``options``' budget, per trial)."""
    if not instance.has_app_choices:
        return instance
    if policy not in (PolicyName.FAST, PolicyName.FULL):
        return instance.serving_on({})
    trial = replace(options, cp_sat=False, budget_ms=min(options.budget_ms, HOT_PATH_BUDGET_MS))

    def objective(sub: Instance) -> float:
        allocation = POLICIES[PolicyName.FAST](sub, trial).allocation
        return score(sub, build_grid(sub, allocation)).objective

    return serving.chosen(instance, objective)


def plan(instance: Instance, policy: PolicyName, options: SolveOptions | None = None) -> Plan:
    """Run ``policy`` on ``instance``; the result is checked and scored."""
    options = options or SolveOptions()
    started = time.perf_counter()
    planned = _services_placed(instance, policy, options)
    solution = POLICIES[policy](planned, options)
    grid = build_grid(planned, solution.allocation)
    solve_ms = (time.perf_counter() - started) * 1000
    violations = check_plan(instance, grid)
    if violations:
        listing = "\n".join(str(v) for v in violations[:10])
        raise IllegalPlanError(f"policy {policy} broke the contract on {instance.name!r}:\n{listing}")
    return Plan(
        scenario=instance.name,
        policy=policy.value,
        grid=grid,
        metrics=score(instance, grid),
        solve_ms=solve_ms,
        status=solution.status,
        bound=solution.bound,
    )
