"""Benchmark measurements: the seven scenarios, fresh samples of their shapes, a scaling sweep.

Latency is measured in-process, as the median of repeated runs after a warm-up, and
covers what a request costs: the policy's decisions plus building the grid.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from scheduler.model import Instance, build_grid
from scheduler.policies import POLICIES, Plan, PolicyName, SolveOptions, plan
from scheduler.scenario_io import parse_scenario
from scheduler.synthetic import Shape, generate


def latency_ms(instance: Instance, policy: PolicyName, runs: int = 50) -> float:
    """Median wall time of one request (policy + grid), after one warm-up run."""
    fn = POLICIES[policy]
    options = SolveOptions()
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
    plans: dict[str, Plan]
    fast_latency_ms: float

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
    instance: Instance, *, full_time_limit_s: float | None, latency_runs: int = 50
) -> ScenarioResult:
    names = [PolicyName.FIFO, PolicyName.PRIORITY_BACKFILL, PolicyName.FAST]
    if full_time_limit_s is not None:
        names.append(PolicyName.FULL)
    options = SolveOptions(time_limit_s=full_time_limit_s or 1.0)
    plans = {name.value: plan(instance, name, options) for name in names}
    return ScenarioResult(
        scenario=instance.name,
        gpus=instance.gpus,
        jobs=len(instance.batch_jobs) + len(instance.realtime_jobs),
        plans=plans,
        fast_latency_ms=latency_ms(instance, PolicyName.FAST, latency_runs),
    )


def scenario_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json"))


def sample_instances(shapes: Iterable[Shape], seeds: Iterable[int]) -> Iterator[Instance]:
    """Fresh scenarios of the benchmark shapes (seeds other than the shipped files' 2026)."""
    for shape in shapes:
        for seed in seeds:
            yield parse_scenario(generate(shape, seed), source=f"{shape.name} seed {seed}")


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
    sizes: Iterable[int], runs: int, progress: Callable[[int], None] | None = None
) -> list[dict[str, float]]:
    rows = []
    for gpus in sizes:
        instance = parse_scenario(generate(scale_shape(gpus), seed=7), source=f"scale {gpus}")
        rows.append(
            {
                "gpus": gpus,
                "jobs": len(instance.batch_jobs) + len(instance.realtime_jobs),
                "fast_ms": latency_ms(instance, PolicyName.FAST, runs),
                "fifo_ms": latency_ms(instance, PolicyName.FIFO, runs),
            }
        )
        if progress:
            progress(1)
    return rows
