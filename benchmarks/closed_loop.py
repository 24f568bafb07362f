"""The closed loop under surprise: the simulated days with and without amendments and promises.

    .venv/bin/python -m benchmarks.closed_loop [--days 2] [--gpus 64] [--traffic CSV ...]
        [--plan-with p50,p90] [--variants 'fast;fast, no promises'] [--no-bundled]

For each traffic set (the bundled series by default, then each ``--traffic`` file alone)
and each of P50 and P90 planning, FIFO and priority-backfill once, and the fast policy
in six variants: amendments on/off x promises weighed (the default terms) or not (penalty
0), the terms before them (0.5 per hour late from the promise on), and the promise at the
plan's start (no lookback at the arrivals).
Prints one table per set and planning, and the cycle latency of each fast variant.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from gpuplan.app.core.config import PlanWith, PromiseTerms
from gpuplan.app.lab.simulate import SimOptions, SimPolicy, prepare, simulate
from gpuplan.table import format_table

NO_PROMISES = PromiseTerms(penalty=0.0)
VARIANTS = {
    "fast": {"amend": True, "promises": PromiseTerms()},
    # the terms before: 0.5 per hour late from the promise on (no slack, no break)
    "fast, 0.5 per hour late": {
        "amend": True,
        "promises": PromiseTerms(penalty=0.5, slack_hours=0, break_hours=0.0),
    },
    # the promise at the plan's start, as before it counted the arrivals
    "fast, promise at the plan's start": {"amend": True, "promises": PromiseTerms(lookback_hours=0)},
    "fast, no amendments": {"amend": False, "promises": PromiseTerms()},
    "fast, no promises": {"amend": True, "promises": NO_PROMISES},
    "fast, neither": {"amend": False, "promises": NO_PROMISES},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--traffic", type=Path, action="append", default=[])
    parser.add_argument("--workload", type=Path, default=None)
    parser.add_argument("--plan-with", default="p50,p90")
    parser.add_argument(
        "--variants", default=";".join(VARIANTS), help="fast variants, ;-separated (default: all)"
    )
    parser.add_argument("--no-bundled", action="store_true", help="only the --traffic sets")
    args = parser.parse_args()
    variants = {name: VARIANTS[name] for name in args.variants.split(";")}
    sets: list[tuple[str, list[Path]]] = [] if args.no_bundled else [("bundled traffic", [])]
    sets += [(path.stem, [path]) for path in args.traffic]
    headers = [
        "policy",
        "util",
        "value",
        "rt served",
        "unmet GPU-h",
        "worst h",
        "idle rt GPU-h",
        "amend/day",
        "promise kept",
        "plan kept",
        "promised - plan p50/p90 h",
        "delay p50/p90 h",
        "wait p99 h",
        "cycle ms p50/p99",
        "amend ms p50/p99",
    ]
    for label, paths in sets:
        with tempfile.TemporaryDirectory(prefix="gpuplan-closed-loop-") as work:
            setup = prepare(
                days=args.days,
                gpus=args.gpus,
                work_dir=Path(work),
                traffic_paths=paths,
                workload_path=args.workload,
            )
            for plan_with in args.plan_with.split(","):
                base = SimOptions(plan_with=PlanWith(plan_with))
                rows = []
                baselines = simulate(setup, [SimPolicy.FIFO, SimPolicy.PRIORITY_BACKFILL], base)
                measured = [(m.policy, m) for m in baselines.metrics.values()]
                for name, change in variants.items():
                    report = simulate(setup, [SimPolicy.FAST], replace(base, **change))  # type: ignore[arg-type]
                    measured.append((name, report.metrics[SimPolicy.FAST]))
                for name, m in measured:
                    rows.append(
                        [
                            name,
                            f"{m.utilization:.1%}",
                            f"{m.value:,.0f}",
                            f"{m.rt_served:.2%}",
                            f"{m.rt_unmet_gpu_hours:,.1f}",
                            f"{m.rt_unmet_gpu_hours_worst_hour:.1f}",
                            f"{m.rt_idle_gpu_hours:,.0f}",
                            f"{m.amendments_per_day:.1f}",
                            f"{m.promise_kept:.1%} of {m.promised}",
                            f"{m.plan_kept:.1%}",
                            f"{m.promise_lead_h_p50:.1f} / {m.promise_lead_h_p90:.1f}",
                            f"{m.promise_delay_h_p50:.1f} / {m.promise_delay_h_p90:.1f}",
                            f"{m.wait_p99_h:.1f}",
                            f"{m.cycle_ms_p50:.0f} / {m.cycle_ms_p99:.0f}",
                            f"{m.amend_ms_p50:.1f} / {m.amend_ms_p99:.1f}" if m.amend_ms_p50 else "-",
                        ]
                    )
                apps = ", ".join(f"{s.app.id} (swap cap {s.app.swap_cap})" for s in setup.series)
                sys.stdout.write(
                    f"\n{label}: {args.gpus} GPUs, {args.days} days, {len(setup.jobs)} jobs, "
                    f"{plan_with.upper()} planning; apps {apps}\n"
                )
                sys.stdout.write(format_table(headers, rows) + "\n")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
