"""``gpuplan bench``: the published comparison on the seven scenarios, fresh samples, a scaling sweep."""

from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path
from typing import Any

from contract.errors import InputError
from gpuplan.table import format_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenarios", type=Path, default=Path("benchmarks"), help="folder of scenario files")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="full mode's limit per scenario (0 < S <= 3600)",
    )
    parser.add_argument("--no-full", action="store_true", help="skip the full mode (CP-SAT)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--png", type=Path, metavar="DIR", help="draw FIFO above fast for each scenario")
    parser.add_argument("--scale", action="store_true", help="fast-mode latency from 8 to 1,024 GPUs")
    parser.add_argument("--sizes", default="8,16,32,64,128,256,512,1024", help="cluster sizes for --scale")
    parser.add_argument("--runs", type=int, default=50, help="timed runs per latency median (1-10,000)")
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        metavar="N",
        help="N fresh scenarios per shape (1-1,000): fast vs full",
    )
    parser.add_argument(
        "--shapes", default=None, help="comma-separated shapes for --sample (default: all seven)"
    )


def _progress(total: int, desc: str):  # type: ignore[no-untyped-def]
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        file=sys.stderr,
        disable=not sys.stderr.isatty(),
        leave=False,
    )


MAX_RUNS = 10_000
MAX_SAMPLE = 1_000


def run(args: argparse.Namespace) -> int:
    from contract.files import check_writable_dir
    from gpuplan.options import integer_in, time_limit

    time_limit(args.time_limit)
    integer_in("--runs", args.runs, 1, MAX_RUNS)
    if args.sample is not None:
        integer_in("--sample", args.sample, 1, MAX_SAMPLE)
    if args.png is not None:
        check_writable_dir(args.png, "--png")
    if args.scale:
        return _scale(args)
    if args.sample is not None:
        return _sample(args)
    return _seven(args)


def _seven(args: argparse.Namespace) -> int:
    from scheduler.bench import run_scenario, scenario_files
    from scheduler.scenario_io import load_scenario

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
            )
            results.append(result)
            if args.png:
                from scheduler.render import draw_plans

                draw_plans(
                    instance,
                    [result.plans["fifo"], result.plans["fast"]],
                    args.png / f"{path.stem}.png",
                )
            bar.update(1)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=1))
        return 0
    rows = []
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
                f"{p['fast'].metrics.objective:,.0f}",
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
        "fast obj",
        "full obj",
        "bound",
        "fast gap to full",
        "to bound",
        "rt cov " + "/".join(results[0].plans),
    ]
    print(format_table(headers, rows))
    return 0


def _sample(args: argparse.Namespace) -> int:
    from scheduler.bench import run_scenario, sample_instances
    from scheduler.synthetic import SHAPES

    names = tuple(SHAPES) if args.shapes is None else tuple(s.strip() for s in args.shapes.split(","))
    for name in names:
        if name not in SHAPES:
            raise InputError("--shapes", f"names from {list(SHAPES)}", name)
    seeds = range(1, args.sample + 1)
    rows: list[dict[str, Any]] = []
    with _progress(len(names) * args.sample, "samples") as bar:
        for instance in sample_instances((SHAPES[n] for n in names), seeds):
            result = run_scenario(
                instance, full_time_limit_s=args.time_limit, latency_runs=max(1, args.runs // 10)
            )
            p = result.plans
            rows.append(
                {
                    "shape": instance.name,
                    "fifo": p["fifo"].metrics.objective,
                    "pb": p["priority-backfill"].metrics.objective,
                    "fast": p["fast"].metrics.objective,
                    "full": p["full"].metrics.objective,
                    "bound": p["full"].bound,
                    "status": p["full"].status,
                    "fast_ms": result.fast_latency_ms,
                    "fast_cov": p["fast"].metrics.rt_coverage,
                }
            )
            bar.update(1)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    table = []
    for name in names:
        mine = [r for r in rows if r["shape"] == name]
        gaps_full = [(r["full"] - r["fast"]) / abs(r["full"]) for r in mine if r["full"]]
        gaps_bound = [(r["bound"] - r["fast"]) / abs(r["bound"]) for r in mine if r["bound"]]
        table.append(
            [
                name,
                len(mine),
                f"{sum(g for g in gaps_full) / len(gaps_full):.2%}" if gaps_full else "-",
                f"{max(gaps_full):.2%}" if gaps_full else "-",
                f"{sum(gaps_bound) / len(gaps_bound):.2%}" if gaps_bound else "-",
                sum(r["status"] == "OPTIMAL" for r in mine),
                sum(r["fast"] >= r["pb"] - 1e-6 for r in mine),
                f"{min(r['fast_cov'] for r in mine):.1%}",
                f"{max(r['fast_ms'] for r in mine):.2f}",
            ]
        )
    print(
        format_table(
            [
                "shape",
                "n",
                "mean gap fast->full",
                "max gap",
                "mean gap fast->bound",
                "proved",
                "fast>=PB",
                "min rt cov",
                "max ms",
            ],
            table,
        )
    )
    return 0


def _scale(args: argparse.Namespace) -> int:
    from scheduler.bench import scale_sweep
    from scheduler.scenario_io import MAX_CLUSTER_GPUS

    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        raise InputError("--sizes", "comma-separated integers", args.sizes) from None
    for size in sizes:
        if not 1 <= size <= MAX_CLUSTER_GPUS:
            raise InputError("--sizes", f"cluster sizes in [1, {MAX_CLUSTER_GPUS}]", size)
    with _progress(len(sizes), "sizes") as bar:
        rows = scale_sweep(sizes, args.runs, bar.update)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.json:
        print(json.dumps({"rows": rows, "peak_rss_mb": peak_mb}, indent=1))
        return 0
    print(
        format_table(
            ["GPUs", "jobs", "fast ms (median)", "fifo ms (median)"],
            [[r["gpus"], r["jobs"], f"{r['fast_ms']:.2f}", f"{r['fifo_ms']:.2f}"] for r in rows],
        )
    )
    print(f"peak memory of this process: {peak_mb:.0f} MB")
    return 0
