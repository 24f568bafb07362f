"""Two simulated days of a two-pool cluster: the fast mode against the baselines, per pool.

    python -m benchmarks.pools_week [--seeds 0,1,2,3,4] [--held-out 5,6] [--days 2]
        [--no-reference | --reference-only]
        [--policies fast,fifo,priority-backfill,fastest-free]

The cluster (docs/pools.md): pool `h100` (32 H100, the reference) beside pool `a100` (32 A100),
and two real-time apps of the bundled traffic, one on each pool. The workload is the
simulation's drawn one (`gpuplan.app.lab.workload`: held-out jobs of the bundled history, the
Alibaba arrival pattern) on the two pools: half the jobs may run on `any` pool, the others on
one model each, and a job's hours on the A100 are its H100 hours times its kind's factor
(training 2.0, batch inference 1.6, quantization 1.5), for its forecast and its actual run alike.
Each seed runs fast, fifo, priority-backfill and fastest-free through the daemon's own cycle;
every plan of every cycle is checked against the contract (`scheduler.check`), and the whole
committed run too. The reference is the same seeds on one pool of 64 H100 GPUs, the one-pool
simulation (`gpuplan simulate --gpus 64`).

Prints, per seed, each policy's value, utilization of each pool and real-time served, then the
goals' worst slice over the seeds: the fast mode's value over each baseline's, each pool's
utilization minus FIFO's, real-time served. Held-out seeds are reported apart.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

from contract.records import PlanRun
from contract.scenario import JobKind
from contract.scenario_io import parse_scenario
from forecasting.realtime_training import BUNDLED_TRAFFIC_DIR
from gpuplan.app.core.config import load_config
from gpuplan.app.lab.simulate import Setup, SimOptions, SimPolicy, prepare, run_policy, week_grid
from gpuplan.app.lab.simulate.loop import SimHooks
from gpuplan.app.lab.simulate.measures import PolicyMetrics, measure
from gpuplan.table import format_table
from scheduler.check import check_plan
from storage.store import Store

POLICIES = (SimPolicy.FAST, SimPolicy.FIFO, SimPolicy.PRIORITY_BACKFILL, SimPolicy.FASTEST_FREE)
HOURS_FACTOR = {"a100-40gb": {JobKind.TRAINING: 2.0, JobKind.BATCH_INFERENCE: 1.6, JobKind.QUANTIZATION: 1.5}}
APPS = (
    ("chat", "alibaba_genai_lora_hourly.csv", "h100"),
    ("search", "philly_active_nodes_hourly.csv", "a100"),
)
#: Each app's peak GPU need in its history: a fifth of its pool.
APP_PEAK_GPUS = 6


def config_text(pooled: bool) -> str:
    """The daemon's config of the benchmark's cluster: two pools of 32, or one of 64."""
    if pooled:
        cluster = (
            "cluster:\n  pools:\n    - {name: h100, gpu_model: h100, gpus: 32}\n"
            "    - {name: a100, gpu_model: a100, gpus: 32}\n"
        )
    else:
        cluster = "cluster: {gpus: 64}\n"
    apps = "".join(
        f"  - {{id: {app}, priority: 80, swap_cap: 2, peak_gpus: {APP_PEAK_GPUS},"
        f" traffic: {BUNDLED_TRAFFIC_DIR / file}{f', pool: {pool}' if pooled else ''}}}\n"
        for app, file, pool in APPS
    )
    return f"{cluster}apps:\n{apps}"


def drawn_setup(seed: int, *, days: int, work: Path, name: str, config: str) -> Setup:
    """The simulation of the seed's drawn workload on ``config`` (written to ``work/name``)."""
    path = work / name
    path.write_text(config, encoding="utf-8")
    return prepare(
        days=days,
        gpus=0,
        work_dir=work / f"seed{seed}",
        seed=seed,
        config=load_config(path),
        config_source=str(path),
        hours_factor=HOURS_FACTOR,
    )


def run_seed(
    seed: int, *, days: int, pooled: bool, work: Path, policies: tuple[SimPolicy, ...] = POLICIES
) -> dict[SimPolicy, PolicyMetrics]:
    """Each of ``policies`` on one seed's workload; raises on any illegal plan."""
    name = f"cluster-{'pools' if pooled else 'one'}.yaml"
    setup = drawn_setup(seed, days=days, work=work, name=name, config=config_text(pooled))
    found = {}
    for policy in policies:
        plans = 0

        def planned(store: Store, run: PlanRun, policy: SimPolicy = policy) -> None:
            nonlocal plans
            instance = parse_scenario(run.scenario, source=f"run {run.id}")
            violations = check_plan(instance, tuple(tuple(row) for row in run.grid))
            if violations:
                raise AssertionError(f"{policy.value}, seed {seed}, {run.created_at}: {violations[:3]}")
            plans += 1

        run = run_policy(setup, policy, SimOptions(), hooks=SimHooks(planned=planned))
        instance, grid = week_grid(setup, run)
        violations = check_plan(instance, grid)
        if violations:
            raise AssertionError(f"{policy.value}, seed {seed}: committed {violations[:3]}")
        found[policy] = measure(setup, run)
        logging.getLogger(__name__).info("seed %d %s: %d plans checked", seed, policy.value, plans)
    return found


def _table(seed: int, metrics: dict[SimPolicy, PolicyMetrics]) -> str:
    pools = list(next(iter(metrics.values())).pools)
    headers = ["policy", "value", "util", *(f"util {p}" for p in pools), *(f"value {p}" for p in pools)]
    headers += ["rt served", "started"]
    rows = [
        [
            policy.value,
            f"{m.value:,.0f}",
            f"{m.utilization:.1%}",
            *(f"{m.pools[p].utilization:.1%}" for p in pools),
            *(f"{m.pools[p].value:,.0f}" for p in pools),
            f"{m.rt_served:.2%}",
            f"{m.started}/{m.submitted}",
        ]
        for policy, m in metrics.items()
    ]
    return f"seed {seed}:\n" + format_table(headers, rows)


def _goals(by_seed: dict[int, dict[SimPolicy, PolicyMetrics]]) -> list[list[str]]:
    """Per seed: fast's value over each baseline's, each pool's utilization minus FIFO's,
    real-time served (fast's)."""
    rows = []
    for seed, metrics in by_seed.items():
        fast = metrics[SimPolicy.FAST]
        gains = [f"{fast.value / metrics[p].value - 1:+.1%}" for p in POLICIES[1:] if metrics[p].value > 0]
        fifo = metrics[SimPolicy.FIFO]
        pools = [f"{fast.pools[p].utilization - fifo.pools[p].utilization:+.1%}" for p in fast.pools]
        pools = pools or [f"{fast.utilization - fifo.utilization:+.1%}"]
        rows.append([str(seed), *gains, *pools, f"{fast.rt_served:.2%}"])
    return rows


def named_policies(parser: argparse.ArgumentParser, text: str, known: Sequence[str]) -> list[str]:
    """The policies ``--policies`` names (comma-separated), each one of ``known``, else the
    parser's error."""
    named = [name.strip() for name in text.split(",") if name.strip()]
    if unknown := sorted(set(named) - set(known)):
        parser.error(f"--policies must name policies of {list(known)}; got {unknown}")
    return named


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--held-out", default="5,6", help="seeds never looked at while the scheduler changed")
    parser.add_argument("--days", type=int, default=2)
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument("--no-reference", action="store_true", help="skip the one-pool reference")
    shape.add_argument("--reference-only", action="store_true", help="only the one-pool reference")
    parser.add_argument(
        "--policies",
        default=",".join(p.value for p in POLICIES),
        help="the policies to run (the goals' table needs all four)",
    )
    args = parser.parse_args(argv)
    policies = tuple(
        SimPolicy(name) for name in named_policies(parser, args.policies, [p.value for p in POLICIES])
    )
    seeds = [int(s) for s in args.seeds.split(",") if s]
    held_out = [int(s) for s in args.held_out.split(",") if s]
    shapes = [True] if args.no_reference else [False] if args.reference_only else [True, False]
    with tempfile.TemporaryDirectory(prefix="pools-week-") as work:
        for pooled in shapes:
            title = "two pools: 32 H100 + 32 A100" if pooled else "reference: one pool of 64 H100"
            print(f"== {title}, {args.days} simulated days ==")
            for group, names in (("seeds", seeds), ("held-out seeds", held_out)):
                by_seed = {}
                for seed in names:
                    by_seed[seed] = run_seed(
                        seed, days=args.days, pooled=pooled, work=Path(work), policies=policies
                    )
                    print(_table(seed, by_seed[seed]), flush=True)
                if not by_seed or set(policies) != set(POLICIES):
                    continue
                pools = list(by_seed[names[0]][SimPolicy.FAST].pools)
                headers = ["seed", *(f"fast vs {p.value}" for p in POLICIES[1:])]
                headers += [f"util {p} - fifo" for p in pools] or ["util - fifo"]
                headers += ["fast rt served"]
                print(f"{group}, fast against the baselines:")
                print(format_table(headers, _goals(by_seed)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
