"""Benchmark measurements: the seven scenarios, fresh samples of their shapes, a scaling sweep.

The fast mode is measured at its two operating points: the hot path (its default
budget, what ``gpuplan submit`` spends on a request) and the plan cycle (the daemon's
budget, heuristic plus CP-SAT window search). Latency is measured in-process, as the
median of repeated runs after a warm-up, and covers what a request costs: the
policy's decisions plus building the grid.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from contract.scenario import Instance
from contract.scenario_io import load_scenario, parse_scenario
from gpuplan.app.lab.synthetic import Shape, generate
from scheduler import lns
from scheduler.bound import relaxed_bound
from scheduler.model import HOT_PATH_BUDGET_MS, PLAN_CYCLE_BUDGET_MS, build_grid
from scheduler.policies import POLICIES, Plan, PolicyName, SolveOptions, plan


@dataclass(frozen=True, slots=True)
class Published:
    """One row of the published comparison (FIFO -> their allocator)."""

    fifo_utilization: float
    utilization: float
    value_gain: float
    latency_ms: str


# The published table, by scenario name: utilization FIFO -> theirs, value gain, latency
# (1-2 ms at 8-14 GPUs, 15 ms at 64).
PUBLISHED: dict[str, Published] = {
    "mixed-control": Published(0.516, 0.724, 0.548, "1-2"),
    "realtime-contention": Published(0.750, 0.802, 0.246, "1-2"),
    "training-heavy": Published(0.536, 0.870, 1.051, "1-2"),
    "large-mixed": Published(0.768, 0.827, 0.438, "1-2"),
    "oversubscribed": Published(0.854, 0.875, 0.336, "1-2"),
    "scale-test": Published(0.449, 0.449, 0.159, "15"),
    "uniform-priority": Published(0.768, 0.875, 0.231, "1-2"),
}

# Objectives this close (relative) count as equal for the real-time moves' tie-break.
EQUAL_VALUE = 1e-9

# The two keys of the fast mode's operating points in a result's plans.
HOT_PATH = "fast"
PLAN_CYCLE = "cycle"


def latency_ms(
    instance: Instance, policy: PolicyName, runs: int = 50, options: SolveOptions | None = None
) -> float:
    """Median wall time of one request (policy + grid), after one warm-up run."""
    fn = POLICIES[policy]
    options = options or SolveOptions()
    fn(instance, options)
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        build_grid(instance, fn(instance, options).allocation)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    scenario: str
    gpus: int
    jobs: int
    plans: dict[str, Plan]  # policy name, or HOT_PATH / PLAN_CYCLE for the fast mode
    fast_latency_ms: float
    demand_changes: int = 0  # the demand curves' own changes, the floor under real-time moves

    @property
    def value_gain(self) -> float:
        fifo, fast = self.plans["fifo"].metrics.value, self.plans["fast"].metrics.value
        return (fast - fifo) / abs(fifo) if fifo else float("inf")

    @property
    def gap_to_full(self) -> float | None:
        """Fast objective's shortfall from the full mode's objective, as a share of it."""
        full = self.plans.get("full")
        if full is None:
            return None
        best = full.metrics.objective
        return (best - self.plans["fast"].metrics.objective) / abs(best) if best else 0.0

    def ratio_to_full(self, key: str) -> float | None:
        """``key``'s objective as a share of the full mode's (None without a positive one)."""
        full = self.plans.get("full")
        if full is None or full.metrics.objective <= 0 or key not in self.plans:
            return None
        return self.plans[key].metrics.objective / full.metrics.objective

    def at_least_priority_backfill(self, key: str) -> bool:
        return self.plans[key].metrics.objective >= self.plans["priority-backfill"].metrics.objective - 1e-6

    def at_least_fifos(self, key: str) -> bool:
        """Whether ``key`` scores at least each of the three baselines."""
        baselines = ("fifo", "fifo-backfill", "priority-backfill")
        return all(
            self.plans[key].metrics.objective >= self.plans[b].metrics.objective - 1e-6 for b in baselines
        )

    def moves_more_at_equal_value(self, key: str, than: str) -> bool:
        """Whether ``key``'s plan moves more real-time GPUs than ``than``'s at the same
        objective (within 1e-9 of it, relative): moves it did not need, by the tie-break."""
        a, b = self.plans[key].metrics, self.plans[than].metrics
        same = abs(a.objective - b.objective) <= EQUAL_VALUE * max(abs(a.objective), abs(b.objective), 1.0)
        return same and a.rt_moves > b.rt_moves

    @property
    def full_gap(self) -> float | None:
        """Fast objective's shortfall from the full mode's proven bound, as a share of the bound."""
        full = self.plans.get("full")
        if full is None or full.bound is None:
            return None
        return (full.bound - self.plans["fast"].metrics.objective) / abs(full.bound) if full.bound else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "scenario": self.scenario,
            "gpus": self.gpus,
            "jobs": self.jobs,
            "fast_latency_ms": self.fast_latency_ms,
            "value_gain": self.value_gain,
            "fast_gap_to_full": self.gap_to_full,
            "fast_gap_to_bound": self.full_gap,
            "demand_changes": self.demand_changes,
            "policies": {
                name: {
                    **p.metrics.as_dict(),
                    "status": p.status,
                    "bound": p.bound,
                    "solve_ms": p.solve_ms,
                }
                for name, p in self.plans.items()
            },
        }


def run_scenario(
    instance: Instance,
    *,
    full_time_limit_s: float | None,
    latency_runs: int = 50,
    cycle_budget_ms: float | None = None,
    workers: int = 2,
    hot_budget_ms: float = HOT_PATH_BUDGET_MS,
    wall_clock: bool = True,
) -> ScenarioResult:
    """The three baselines (and fastest-free on a cluster of pools) and the hot path (at
    ``hot_budget_ms``: a slower or busier machine has less); the plan cycle with
    ``cycle_budget_ms``; the full mode with ``full_time_limit_s`` (each left out when None).
    ``wall_clock=False``: the plans count work, not time (:class:`SolveOptions`); the latency is
    measured all the same."""
    names = [PolicyName.FIFO, PolicyName.FIFO_BACKFILL, PolicyName.PRIORITY_BACKFILL, PolicyName.FAST]
    if instance.pooled:  # the pools' baseline: each job on the fastest pool with room now
        names.insert(3, PolicyName.FASTEST_FREE)
    if full_time_limit_s is not None:
        names.append(PolicyName.FULL)
    options = SolveOptions(
        time_limit_s=full_time_limit_s or 1.0, workers=workers, budget_ms=hot_budget_ms, wall_clock=wall_clock
    )
    plans = {name.value: plan(instance, name, options) for name in names}
    if cycle_budget_ms is not None:
        lns.warm_up()
        plans[PLAN_CYCLE] = plan(instance, PolicyName.FAST, replace(options, budget_ms=cycle_budget_ms))
    return ScenarioResult(
        scenario=instance.name,
        gpus=instance.gpus,
        jobs=len(instance.batch_jobs) + len(instance.realtime_jobs),
        plans=plans,
        fast_latency_ms=latency_ms(instance, PolicyName.FAST, latency_runs, options),
        demand_changes=demand_changes(instance),
    )


def demand_changes(instance: Instance) -> int:
    """How much the demand curves themselves change, summed over services and steps (from
    the running set's size at step 0): no plan that serves them moves fewer GPUs."""
    total = 0
    for job in instance.realtime_jobs:
        running = instance.running_realtime.get(job.id)
        previous = None if running is None else len(running.gpus)
        for need in job.demand:
            if previous is not None:
                total += abs(need - previous)
            previous = need
    return total


def scenario_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json"))


def sample_instances(shapes: Iterable[Shape], seeds: Iterable[int]) -> Iterator[Instance]:
    """Fresh scenarios of the benchmark and rolling shapes (seeds other than the shipped files' 2026)."""
    for shape in shapes:
        for seed in seeds:
            yield parse_scenario(generate(shape, seed), source=f"{shape.name} seed {seed}")


HELDOUT_DIR = Path(__file__).parents[3] / "benchmarks" / "heldout"


def heldout_instances(
    names: Iterable[str], per_shape: int, directory: Path = HELDOUT_DIR
) -> Iterator[Instance]:
    """Up to ``per_shape`` scenarios of each shape in ``names`` from the frozen held-out files
    (named ``SHAPE-SEED.json``), in seed order."""

    for name in names:
        paths = sorted(p for p in directory.glob(f"{name}-*.json") if p.stem[len(name) + 1 :].isdigit())
        for path in paths[:per_shape]:
            yield load_scenario(path)


def scale_shape(gpus: int) -> Shape:
    """A mixed cluster of ``gpus`` GPUs with about one batch job per two GPUs."""
    return Shape(
        name=f"scale-{gpus}",
        gpus=gpus,
        batch_jobs=max(8, gpus // 2),
        realtime_jobs=max(1, gpus // 64),
        rt_peak_share=0.35,
        training_share=0.5,
        max_training_hours=16,
        load=0.9,
    )


def scale_sweep(
    sizes: Iterable[int],
    runs: int,
    progress: Callable[[int], None] | None = None,
    *,
    cycle_budget_ms: float | None = PLAN_CYCLE_BUDGET_MS,
    long_cycle_ms: float | None = None,
    bound_limit_s: float | None = None,
) -> list[dict[str, Any]]:
    """Per cluster size: the hot path's median latency and objective, FIFO's latency, the
    first pass's objective, the plan cycle's objective and wall time (one run), and the
    linear relaxation's bound (:mod:`scheduler.bound`, at every size); with
    ``long_cycle_ms``, a longer plan cycle too; with ``bound_limit_s``, the full mode's
    proven bound within that limit (None where its model does not build)."""
    if cycle_budget_ms is not None:
        lns.warm_up()
    rows = []
    for gpus in sizes:
        instance = parse_scenario(generate(scale_shape(gpus), seed=7), source=f"scale {gpus}")
        row: dict[str, Any] = {
            "gpus": gpus,
            "jobs": len(instance.batch_jobs) + len(instance.realtime_jobs),
            "fast_ms": latency_ms(instance, PolicyName.FAST, runs),
            "fifo_ms": latency_ms(instance, PolicyName.FIFO, runs),
            "first_pass_objective": plan(instance, PolicyName.FAST, FIRST_PASS_ONLY).metrics.objective,
            "fast_objective": plan(instance, PolicyName.FAST).metrics.objective,
            "relaxed_bound": relaxed_bound(instance),
        }
        if cycle_budget_ms is not None:
            cycle = plan(instance, PolicyName.FAST, SolveOptions(budget_ms=cycle_budget_ms))
            row["cycle_ms"] = cycle.solve_ms
            row["cycle_objective"] = cycle.metrics.objective
        if long_cycle_ms is not None:
            long_cycle = plan(instance, PolicyName.FAST, SolveOptions(budget_ms=long_cycle_ms))
            row["long_cycle_ms"] = long_cycle.solve_ms
            row["long_cycle_objective"] = long_cycle.metrics.objective
        if bound_limit_s is not None:
            full = plan(instance, PolicyName.FULL, SolveOptions(time_limit_s=bound_limit_s))
            row["full_status"], row["bound"] = full.status, full.bound
        rows.append(row)
        if progress:
            progress(1)
    return rows


# A budget too small for anything but the first pass (which always completes).
FIRST_PASS_ONLY = SolveOptions(budget_ms=1e-3)
