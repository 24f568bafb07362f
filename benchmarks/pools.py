"""A two-pool cluster on the hot path: latency and value of the fast mode against the baselines.

    python -m benchmarks.pools [--seed 0] [--runs 50] [--teams]

The instance: pool `h100` (64 GPUs, the reference) beside pool `a100` (64 GPUs), 24 hourly
steps, 60 queued batch jobs drawn with the seed (half may run on `any` pool, the other
half on one pool each); a job's steps on `a100` are its `h100` steps times its kind's factor
(training 2.0, batch inference 1.6, quantization 1.5), and one real-time service runs on each
pool. Prints the fast mode's median hot-path latency (wall time of the policy and the grid,
after one warm-up; and its CPU time) and each policy's value, objective and utilization, with the fast mode's
value against fastest-free's. ``--teams``: the same jobs shared by three teams (:data:`TEAMS`,
every third batch job in each, one service each of `research` and `product`), so that the
latency is the hot path's with quotas, lending and the fair share (docs/teams.md).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from typing import Any

from contract.scenario import Instance
from contract.scenario_io import parse_scenario
from gpuplan.app.lab.bench import latency_ms
from gpuplan.table import format_table
from scheduler.policies import POLICIES, PolicyName, SolveOptions, plan

POOLS = ({"name": "h100", "gpu_model": "h100", "gpus": 64}, {"name": "a100", "gpu_model": "a100", "gpus": 64})
FACTOR = {"training": 2.0, "batch_inference": 1.6, "quantization": 1.5}
HORIZON = 24
JOBS = 60
#: ``--teams``: quotas per model (of 64 GPUs each), weights, and decayed past use.
TEAMS = (
    {"name": "research", "quota": {"h100": 32, "a100": 16}, "weight": 2, "past_gpu_hours": 300},
    {"name": "product", "quota": {"h100": 16, "a100": 32}, "weight": 1, "past_gpu_hours": 100},
    {"name": "infra", "quota": {"h100": 8, "a100": 8}, "weight": 1, "past_gpu_hours": 50},
)
COMPARED = (
    PolicyName.FIFO,
    PolicyName.PRIORITY_BACKFILL,
    PolicyName.FASTEST_FREE,
    PolicyName.FAST,
)


def document(seed: int) -> dict[str, Any]:
    """The two-pool scenario of ``seed``."""
    rng = random.Random(seed)
    jobs: list[dict[str, Any]] = []
    for i in range(JOBS):
        kind = rng.choice(list(FACTOR))
        steps = rng.randint(2, 10)
        job: dict[str, Any] = {
            "id": f"j{i}",
            "kind": kind,
            "priority": rng.randint(1, 10),
            "gpus": rng.choice([1, 2, 4, 8, 8, 16]),
            "duration_by_pool": {"h100": steps, "a100": math.ceil(steps * FACTOR[kind])},
            "release": rng.choice([0, 0, 0, rng.randint(0, 12)]),
        }
        if i % 2:  # the other half may run on one pool only
            only = rng.choice(["h100", "a100"])
            job["pools"] = [only]
            job["duration_by_pool"] = {only: job["duration_by_pool"][only]}
        jobs.append(job)
    for pool in ("h100", "a100"):
        base = rng.randint(4, 8)
        demand = [base + round(4 * math.sin(math.pi * t / 12)) for t in range(HORIZON)]
        jobs.append(
            {
                "id": f"chat-{pool}",
                "kind": "realtime",
                "priority": 5,
                "swap_cap": 2,
                "demand": demand,
                "pool": pool,
            }
        )
    return {"name": f"pools-64+64-seed{seed}", "pools": list(POOLS), "horizon": HORIZON, "jobs": jobs}


def with_teams(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with :data:`TEAMS`: batch job ``i`` in team ``i % 3``, the services in
    `product` (h100) and `research` (a100)."""
    names = [team["name"] for team in TEAMS]
    jobs = [dict(job) for job in document["jobs"]]
    for i, job in enumerate(jobs):
        job["team"] = (
            names[i % 3]
            if job["kind"] != "realtime"
            else {"h100": "product", "a100": "research"}[job["pool"]]
        )
    return {**document, "name": document["name"] + "-teams", "teams": [dict(t) for t in TEAMS], "jobs": jobs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--teams", action="store_true", help="the jobs shared by three teams")
    args = parser.parse_args(argv)
    doc = with_teams(document(args.seed)) if args.teams else document(args.seed)
    instance = parse_scenario(doc, source="benchmarks.pools")
    options = SolveOptions(wall_clock=False)  # the hot path's budget, counted in work: repeatable
    plans = {name: plan(instance, name, options) for name in COMPARED}
    rows = [
        [name.value, f"{p.metrics.value:,.1f}", f"{p.metrics.objective:,.1f}", f"{p.metrics.utilization:.3f}"]
        for name, p in plans.items()
    ]
    print(f"{instance.name}: {instance.gpus} GPUs in 2 pools, {len(instance.batch_jobs)} batch jobs")
    print(format_table(["policy", "value", "objective", "utilization"], rows))
    fast, free = plans[PolicyName.FAST].metrics.value, plans[PolicyName.FASTEST_FREE].metrics.value
    print(f"fast value vs fastest-free: {(fast - free) / free:+.1%}")
    print(
        f"fast hot-path latency, median of {args.runs}: "
        f"{latency_ms(instance, PolicyName.FAST, args.runs):.2f} ms"
    )
    print(f"fast hot-path CPU time, median of {args.runs}: {cpu_ms(instance, args.runs):.2f} ms")
    return 0


def cpu_ms(instance: Instance, runs: int) -> float:
    """Median CPU time of the fast mode's call, after one warm-up run: on a machine others share,
    steadier than the wall time."""
    fn = POLICIES[PolicyName.FAST]
    fn(instance, SolveOptions())
    samples = []
    for _ in range(runs):
        started = time.process_time()
        fn(instance, SolveOptions())
        samples.append((time.process_time() - started) * 1000)
    return statistics.median(samples)


if __name__ == "__main__":
    raise SystemExit(main())
