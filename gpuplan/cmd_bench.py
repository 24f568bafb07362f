"""``gpuplan bench``: the published comparison on the seven scenarios, fresh samples, a scaling sweep."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
from pathlib import Path
from typing import Any

from contract.errors import InputError
from gpuplan.options import add_budget_ms, add_time_limit, add_workers
from gpuplan.table import format_table
from scheduler.model import (
    HOT_PATH_BUDGET_MS,
    PLAN_CYCLE_BUDGET_MS,
    checked_budget_ms,
    checked_time_limit_s,
)

# The largest cluster --scale measures (the documented maximum the scheduler is sized for).
MAX_SCALE_GPUS = 4096
# Scenarios per shape --sample may draw (each costs up to a full-mode time limit).
MAX_SAMPLE = 1000
MAX_RUNS = 10_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenarios", type=Path, default=Path("benchmarks"), help="folder of scenario files")
    add_time_limit(parser, default=60.0, what="full mode's limit per scenario (the whole call)")
    add_budget_ms(
        parser,
        "--cycle-budget-ms",
        default=PLAN_CYCLE_BUDGET_MS,
        what="the plan cycle's budget for the fast mode (the hot path uses its default, "
        f"{HOT_PATH_BUDGET_MS:g} ms)",
    )
    add_budget_ms(
        parser,
        "--hot-budget-ms",
        default=HOT_PATH_BUDGET_MS,
        what="the hot path's budget (less stands for a slower or busier machine)",
    )
    add_workers(parser)
    parser.add_argument("--no-full", action="store_true", help="skip the full mode (CP-SAT)")
    parser.add_argument(
        "--work-only",
        action="store_true",
        help="plans count work, not wall time: the same plans on a busy machine (the seven "
        "scenarios and --sample; latency is still timed; the full mode's limit is CP-SAT's "
        "deterministic time)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--png", type=Path, metavar="DIR", help="draw FIFO above fast for each scenario")
    parser.add_argument(
        "--scale",
        action="store_true",
        help="both operating points of the fast mode from 8 to 4,096 GPUs, against the relaxed bound",
    )
    parser.add_argument("--sizes", default="8,16,32,64,128,256,512,1024", help="cluster sizes for --scale")
    add_budget_ms(
        parser,
        "--long-cycle-ms",
        default=None,
        what="--scale: a second, longer plan cycle per size (e.g. 60000)",
    )
    parser.add_argument(
        "--bound-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="--scale: the full mode's proven bound within this limit, where its model builds",
    )
    parser.add_argument("--runs", type=int, default=50, help="timed runs per latency median (1-10,000)")
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        metavar="N",
        help="N fresh scenarios per shape (1-1,000): hot path and plan cycle vs the full mode",
    )
    parser.add_argument(
        "--shapes",
        default=None,
        help="comma-separated shapes for --sample (default: the seven and the five rolling re-plans)",
    )
    parser.add_argument("--first-seed", type=int, default=1, help="--sample draws seeds from this one on")
    parser.add_argument(
        "--heldout",
        action="store_true",
        help="--sample reads the frozen held-out split (benchmarks/heldout/, the wide shapes) instead",
    )


def _progress(total: int, desc: str):  # type: ignore[no-untyped-def]
    from gpuplan.progress import progress_bar

    return progress_bar(total, desc, leave=False)


def run(args: argparse.Namespace) -> int:
    from contract.files import check_writable_dir
    from gpuplan.options import MAX_WORKERS, integer_in

    integer_in("--runs", args.runs, 1, MAX_RUNS)
    if args.sample is not None:
        integer_in("--sample", args.sample, 1, MAX_SAMPLE)
    integer_in("--workers", args.workers, 1, MAX_WORKERS)
    checked_time_limit_s(args.time_limit, "--time-limit")
    checked_budget_ms(args.cycle_budget_ms, "--cycle-budget-ms")
    checked_budget_ms(args.hot_budget_ms, "--hot-budget-ms")
    if args.long_cycle_ms is not None:
        checked_budget_ms(args.long_cycle_ms, "--long-cycle-ms")
    if args.bound_limit is not None:
        checked_time_limit_s(args.bound_limit, "--bound-limit")
    if args.png is not None:
        check_writable_dir(args.png, "--png")
    if args.scale:
        return _scale(args)
    if args.sample is not None:
        return _sample(args)
    return _seven(args)


def _seven(args: argparse.Namespace) -> int:
    from contract.scenario_io import load_scenario
    from gpuplan.app.lab.bench import run_scenario, scenario_files

    paths = scenario_files(args.scenarios) if args.scenarios.is_dir() else []
    if not paths:
        raise InputError("--scenarios", "a folder with scenario .json files", str(args.scenarios))
    # Every file is read before the first (long) run, so a bad one stops the benchmark at once.
    instances = [load_scenario(path) for path in paths]
    results = []
    with _progress(len(paths), "scenarios") as bar:
        for path, instance in zip(paths, instances, strict=True):
            result = run_scenario(
                instance,
                full_time_limit_s=None if args.no_full else args.time_limit,
                latency_runs=args.runs,
                cycle_budget_ms=args.cycle_budget_ms,
                workers=args.workers,
                wall_clock=not args.work_only,
                hot_budget_ms=args.hot_budget_ms,
            )
            results.append(result)
            if args.png:
                from gpuplan.render import draw_plans

                draw_plans(
                    instance,
                    [result.plans["fifo"], result.plans["fast"]],
                    args.png / f"{path.stem}.png",
                )
            bar.update(1)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=1))
        return 0
    print(_seven_table(results))
    published = _published_table(results)
    if published:
        print()
        print(published)
    return 0


def _seven_table(results: list[Any]) -> str:
    from gpuplan.app.lab.bench import PLAN_CYCLE

    rows = []
    pooled = any("fastest-free" in r.plans for r in results)  # a cluster of pools: its baseline too
    for r in results:
        p = r.plans
        full = p.get("full")
        rows.append(
            [
                r.scenario,
                f"{r.gpus}/{r.jobs}",
                f"{p['fifo'].metrics.utilization:.1%} -> {p['fast'].metrics.utilization:.1%}",
                f"{p['fifo'].metrics.value:,.0f} -> {p['fast'].metrics.value:,.0f}",
                f"{r.value_gain:+.1%}",
                f"{r.fast_latency_ms:.2f}",
                f"{p['priority-backfill'].metrics.objective:,.0f}",
                *([f"{p['fastest-free'].metrics.objective:,.0f}" if "fastest-free" in p else "-"] * pooled),
                f"{p['fast'].metrics.objective:,.0f}",
                f"{p[PLAN_CYCLE].metrics.objective:,.0f}",
                "-" if full is None else f"{full.metrics.objective:,.0f}",
                "-" if full is None or full.bound is None else f"{full.bound:,.0f} ({full.status})",
                "-" if r.gap_to_full is None else f"{r.gap_to_full:.2%}",
                "-" if r.full_gap is None else f"{r.full_gap:.2%}",
                " / ".join(f"{p[n].metrics.rt_coverage:.0%}" for n in p),
            ]
        )
    headers = [
        "scenario",
        "GPUs/jobs",
        "util FIFO -> fast",
        "value FIFO -> fast",
        "gain",
        "fast ms",
        "PB obj",
        *(["FF obj"] * pooled),
        "fast obj",
        "cycle obj",
        "full obj",
        "bound",
        "fast gap to full",
        "to bound",
        "rt cov " + "/".join(results[0].plans),
    ]
    return format_table(headers, rows)


def _published_table(results: list[Any]) -> str | None:
    """Our FIFO -> fast (hot path and plan cycle) beside the published figures, where the
    scenario names are the published ones."""
    from gpuplan.app.lab.bench import PLAN_CYCLE, PUBLISHED

    rows = []
    for r in results:
        published = PUBLISHED.get(r.scenario)
        if published is None:
            continue
        p = r.plans
        fifo, hot, cycle = p["fifo"].metrics, p["fast"].metrics, p[PLAN_CYCLE].metrics
        cycle_gain = (cycle.value - fifo.value) / abs(fifo.value) if fifo.value else float("inf")
        rows.append(
            [
                r.scenario,
                f"{fifo.utilization:.1%} / {published.fifo_utilization:.1%}",
                f"{hot.utilization:.1%} / {cycle.utilization:.1%} / {published.utilization:.1%}",
                f"{r.value_gain:+.1%} / {cycle_gain:+.1%} / {published.value_gain:+.1%}",
                f"{r.fast_latency_ms:.2f} / {published.latency_ms}",
            ]
        )
    if not rows:
        return None
    return format_table(
        [
            "scenario",
            "FIFO util ours / published",
            "util hot / cycle / published",
            "value gain hot / cycle / published",
            "ms hot / published",
        ],
        rows,
    )


def _sample(args: argparse.Namespace) -> int:
    from gpuplan.app.lab.bench import HOT_PATH, PLAN_CYCLE, heldout_instances, run_scenario, sample_instances
    from gpuplan.app.lab.synthetic import ROLLING_SHAPES, SHAPES, WIDE_SHAPES

    shapes = WIDE_SHAPES if args.heldout else {**SHAPES, **ROLLING_SHAPES, **WIDE_SHAPES}
    default = WIDE_SHAPES if args.heldout else {**SHAPES, **ROLLING_SHAPES}
    names = tuple(default) if args.shapes is None else tuple(s.strip() for s in args.shapes.split(","))
    for name in names:
        if name not in shapes:
            raise InputError("--shapes", f"names from {list(shapes)}", name)
    seeds = range(args.first_seed, args.first_seed + args.sample)
    instances = (
        list(heldout_instances(names, args.sample))
        if args.heldout
        else list(sample_instances((shapes[n] for n in names), seeds))
    )
    rows: list[dict[str, Any]] = []
    with _progress(len(instances), "samples") as bar:
        for instance in instances:
            result = run_scenario(
                instance,
                full_time_limit_s=args.time_limit,
                latency_runs=args.runs,
                cycle_budget_ms=args.cycle_budget_ms,
                workers=args.workers,
                wall_clock=not args.work_only,
                hot_budget_ms=args.hot_budget_ms,
            )
            p = result.plans
            rows.append(
                {
                    "shape": instance.name,
                    "fifo": p["fifo"].metrics.objective,
                    "pb": p["priority-backfill"].metrics.objective,
                    "fast": p[HOT_PATH].metrics.objective,
                    "cycle": p[PLAN_CYCLE].metrics.objective,
                    "full": p["full"].metrics.objective,
                    "bound": p["full"].bound,
                    "status": p["full"].status,
                    "fast_ratio": result.ratio_to_full(HOT_PATH),
                    "cycle_ratio": result.ratio_to_full(PLAN_CYCLE),
                    "fast_ge_pb": result.at_least_priority_backfill(HOT_PATH),
                    "cycle_ge_pb": result.at_least_priority_backfill(PLAN_CYCLE),
                    "fast_ms": result.fast_latency_ms,
                    "cycle_ms": p[PLAN_CYCLE].solve_ms,
                    "full_ms": p["full"].solve_ms,
                    "cycle_status": p[PLAN_CYCLE].status,
                    "fast_cov": p[HOT_PATH].metrics.rt_coverage,
                    "cycle_cov": p[PLAN_CYCLE].metrics.rt_coverage,
                    "fast_ge_fifos": result.at_least_fifos(HOT_PATH),
                    "fifo_moves": p["fifo"].metrics.rt_moves,
                    "fast_moves": p[HOT_PATH].metrics.rt_moves,
                    "cycle_moves": p[PLAN_CYCLE].metrics.rt_moves,
                    "full_moves": p["full"].metrics.rt_moves,
                    "demand_changes": result.demand_changes,
                    "full_moves_more": result.moves_more_at_equal_value("full", HOT_PATH),
                }
            )
            bar.update(1)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    table = [_sample_row(name, [r for r in rows if r["shape"] == name]) for name in names]
    if len(names) > 1:
        table.append(_sample_row("all", rows))
    print(
        format_table(
            [
                "shape",
                "n",
                "full proved",
                "hot mean",
                "hot worst",
                "cycle mean",
                "cycle worst",
                "cycle proved",
                ">=PB hot/cycle",
                "min rt cov hot/cycle",
                "hot ms (median)",
                "cycle ms max",
                ">=FIFOs hot",
                "rt moves fifo/hot/cycle/full (demand)",
                "full moves more, equal value",
            ],
            table,
        )
    )
    return 0


def _sample_row(name: str, rows: list[dict[str, Any]]) -> list[object]:
    """One line of the sample table: ratios to the full mode's objective, mean and worst."""

    def mean_worst(key: str) -> tuple[str, str]:
        ratios = [r[key] for r in rows if r[key] is not None]
        if not ratios:
            return "-", "-"
        return f"{sum(ratios) / len(ratios):.4f}", f"{min(ratios):.4f}"

    hot_mean, hot_worst = mean_worst("fast_ratio")
    cycle_mean, cycle_worst = mean_worst("cycle_ratio")
    return [
        name,
        len(rows),
        sum(r["status"] == "OPTIMAL" for r in rows),
        hot_mean,
        hot_worst,
        cycle_mean,
        cycle_worst,
        sum(r["cycle_status"] == "OPTIMAL" for r in rows),
        f"{sum(r['fast_ge_pb'] for r in rows)}/{sum(r['cycle_ge_pb'] for r in rows)}",
        f"{min(r['fast_cov'] for r in rows):.1%} / {min(r['cycle_cov'] for r in rows):.1%}",
        f"{statistics.median(r['fast_ms'] for r in rows):.2f} (max {max(r['fast_ms'] for r in rows):.2f})",
        f"{max(r['cycle_ms'] for r in rows):.0f}",
        f"{sum(r['fast_ge_fifos'] for r in rows)}/{len(rows)}",
        "/".join(
            str(sum(r[k] for r in rows)) for k in ("fifo_moves", "fast_moves", "cycle_moves", "full_moves")
        )
        + f" ({sum(r['demand_changes'] for r in rows)})",
        sum(r["full_moves_more"] for r in rows),
    ]


def _gap(row: dict[str, Any]) -> float:
    """The best plan's shortfall from the relaxed bound, as a share of the bound."""
    keys = ("first_pass_objective", "fast_objective", "cycle_objective", "long_cycle_objective")
    best = max(row[key] for key in keys if key in row)
    bound = row["relaxed_bound"]
    return (bound - best) / abs(bound) if bound else 0.0


def _scale(args: argparse.Namespace) -> int:
    from gpuplan.app.lab.bench import scale_sweep

    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        raise InputError("--sizes", "comma-separated integers", args.sizes) from None
    for size in sizes:
        if not 1 <= size <= MAX_SCALE_GPUS:
            raise InputError("--sizes", f"cluster sizes from 1 to {MAX_SCALE_GPUS}", size)
    with _progress(len(sizes), "sizes") as bar:
        rows = scale_sweep(
            sizes,
            args.runs,
            bar.update,
            cycle_budget_ms=args.cycle_budget_ms,
            long_cycle_ms=args.long_cycle_ms,
            bound_limit_s=args.bound_limit,
        )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.json:
        print(json.dumps({"rows": rows, "peak_rss_mb": peak_mb}, indent=1))
        return 0
    print(
        format_table(
            [
                "GPUs",
                "jobs",
                "hot ms (median)",
                "fifo ms (median)",
                "first pass obj",
                "hot obj",
                "cycle obj",
                "cycle ms",
                "cycle >= first pass",
                "long cycle obj (ms)",
                "bound (full mode)",
                "relaxed bound",
                "best's gap to it",
            ],
            [
                [
                    r["gpus"],
                    r["jobs"],
                    f"{r['fast_ms']:.2f}",
                    f"{r['fifo_ms']:.2f}",
                    f"{r['first_pass_objective']:,.0f}",
                    f"{r['fast_objective']:,.0f}",
                    f"{r['cycle_objective']:,.0f}",
                    f"{r['cycle_ms']:.0f}",
                    "yes" if r["cycle_objective"] >= r["first_pass_objective"] - 1e-6 else "NO",
                    f"{r['long_cycle_objective']:,.0f} ({r['long_cycle_ms']:.0f})"
                    if "long_cycle_ms" in r
                    else "-",
                    "-" if r.get("bound") is None else f"{r['bound']:,.0f}",
                    f"{r['relaxed_bound']:,.0f}",
                    f"{_gap(r):.3%}",
                ]
                for r in rows
            ],
        )
    )
    print(f"peak memory of this process: {peak_mb:.0f} MB")
    return 0
