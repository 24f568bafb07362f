"""``gpuplan simulate``: a simulated week of the daemon's own cycle against FIFO and the ablations.

Every policy sees the same job arrivals and the same real traffic; jobs run their actual
durations and real-time demand is the actual traffic's, so forecast misses show up as
waiting, idle GPUs and unmet demand. See :mod:`gpuplan.app.lab.simulate`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.options import add_traffic, print_json

if TYPE_CHECKING:
    from gpuplan.app.lab.simulate import SimulationReport

POLICIES = (
    "fast",
    "fifo",
    "priority-backfill",
    "commit-all",
    "fastest-free",
    "fifo-quota",
    "fifo-lend",
    "priority-backfill-quota",
    "priority-backfill-lend",
)
#: What ``--policy`` compares when not given (``fastest-free`` is the pools' baseline: asked for).
DEFAULT_POLICIES = ("fast", "fifo", "priority-backfill", "commit-all")
#: The simulation's fields under this command's names (beside gpuplan.options.FIELD_FLAGS).
FLAGS = {
    "traffic": "--traffic",
    "days": "--days",
    "gpus": "--gpus",
    "cycle_minutes": "--cycle-minutes",
    "review_every_hours": "--review-every",
    "promise_penalty": "--promise-penalty",
    "promise_slack_hours": "--promise-slack",
    "promise_break_hours": "--promise-break",
    "promise_lookback_hours": "--promise-lookback",
    "aging_hours": "--aging-hours",
    "fifo_deadline": "--fifo-deadline",
}
#: Four weeks: the longest bundled series (Philly, ten weeks) still has two weeks of history.
MAX_DAYS = 28
MAX_GPUS = 4096
DEFAULT_GPUS = 64
#: The utilization plot shows a moving mean over this many hours (hourly values are noisy).
SMOOTH_HOURS = 6


def _say(text: str) -> None:
    """Command output goes to stdout; logging and the progress bar stay on stderr."""
    sys.stdout.write(text + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--days", type=int, default=7, help="simulated days (default 7)")
    parser.add_argument(
        "--gpus", type=int, default=None, help=f"cluster GPUs (default {DEFAULT_GPUS}; not with --config)"
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="the daemon's config file: its cluster, its apps (priorities, swap caps, requests per "
        "GPU-hour, traffic files) and its plan_with, cycle_minutes and promise terms, in place of "
        "the defaults (a flag given beside it wins)",
    )
    parser.add_argument(
        "--workload",
        type=Path,
        default=None,
        help="jobs CSV: id, submit_hour, kind, priority, gpus, actual_hours, and forecast_hours "
        "or the kind's feature columns; on a --config of several pools also gpu_models (any, or "
        "models joined by |), forecast_hours:MODEL and actual_hours:MODEL (default: drawn from "
        "the bundled job history)",
    )
    add_traffic(
        parser,
        "hourly traffic CSVs, one real-time app each (default: the bundled series long enough for "
        "--days plus two weeks of history)",
    )
    parser.add_argument(
        "--column",
        default=None,
        metavar="NAME",
        help="read column NAME of each --traffic CSV as the hourly count (the first column: the hour)",
    )
    parser.add_argument(
        "--policy",
        default=",".join(DEFAULT_POLICIES),
        help=f"comma-separated policies to compare, of {','.join(POLICIES)} (default "
        f"{','.join(DEFAULT_POLICIES)}; fastest-free: each job on the fastest pool with room now; "
        "with the config's teams, -quota: hard quotas, no lending, -lend: lending with no reclaim "
        "guarantee, docs/teams.md)",
    )
    parser.add_argument(
        "--plan-with", choices=("p50", "p90"), default=None, help="job durations the plans use (default p90)"
    )
    parser.add_argument("--cycle-minutes", type=int, default=None, help="plan cycle period (default 30)")
    parser.add_argument(
        "--review-every",
        type=int,
        default=None,
        metavar="HOURS",
        help="run the daemon's full-mode review every HOURS hours before the cycle (fast only; default off)",
    )
    parser.add_argument(
        "--no-amend",
        action="store_true",
        help="cycles within a committed hour do not amend it (fast; default: they add real-time "
        "GPUs for a surge seen so far and batch starts on idle GPUs)",
    )
    parser.add_argument(
        "--promise-penalty",
        type=float,
        default=None,
        metavar="P",
        help="weight of the start promised at submit, per hour late times the job's priority "
        "(default 0.2; 0: promises weigh nothing)",
    )
    parser.add_argument(
        "--promise-slack",
        type=int,
        default=None,
        metavar="H",
        help="hours a start may come after its promise at no cost (default 1, as promises are judged)",
    )
    parser.add_argument(
        "--promise-break",
        type=float,
        default=None,
        metavar="H",
        help="what breaking a promise costs at once, in hours late (default 28)",
    )
    parser.add_argument(
        "--promise-lookback",
        type=int,
        default=None,
        metavar="H",
        help="hours of past higher-priority arrivals the promise at submit counts as still to come "
        "(default 12; 0: the promise is the plan's start)",
    )
    parser.add_argument(
        "--aging-hours",
        type=float,
        default=None,
        metavar="H",
        help="hours of waiting after which a queued job's priority in the plans has doubled, "
        "growing with the wait's fourth power (fast and commit-all; default: the config's aging_hours, "
        "else no aging; 64 is the scale measured in docs/benchmarks.md)",
    )
    parser.add_argument(
        "--fifo-deadline",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="plan a queued job first (at twice the top batch priority) once the start FIFO would have "
        "given it has come (fast and commit-all; default: the config's fifo_deadline, else off; "
        'docs/benchmarks.md, "Aging")',
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the drawn workload (default 0)")
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON")
    parser.add_argument("--png", type=Path, default=None, metavar="DIR", help="directory for the plots")


def _policies(text: str) -> list[str]:
    from contract.errors import InputError

    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in POLICIES]
    if not names or unknown:
        raise InputError("--policy", f"a comma-separated list of {', '.join(POLICIES)}", text)
    return list(dict.fromkeys(names))


def _check_options(args: argparse.Namespace) -> None:
    """Every option's range, before anything slow starts."""
    from contract.errors import InputError
    from contract.files import check_writable_dir
    from gpuplan.options import integer_in

    integer_in("--days", args.days, 1, MAX_DAYS)
    if args.gpus is not None:
        integer_in("--gpus", args.gpus, 1, MAX_GPUS)
    if args.config is not None:
        for flag, value in (("--gpus", args.gpus), ("--traffic", args.traffic), ("--column", args.column)):
            if value:
                raise InputError(
                    flag,
                    "left out beside --config (the config's cluster.gpus and apps' traffic files are used)",
                    value if not isinstance(value, list) else [str(v) for v in value],
                )
    if args.review_every is not None:
        integer_in("--review-every", args.review_every, 1, 168)
    integer_in("--seed", args.seed, 0, 2**63 - 1)
    if args.aging_hours is not None:
        from gpuplan.app.core.config import AGING_RANGE

        low, high = AGING_RANGE
        if not low <= args.aging_hours <= high:
            raise InputError("--aging-hours", f"a number of hours in [{low:g}, {high:g}]", args.aging_hours)
    if args.column is not None and not args.traffic:
        raise InputError("--column", "a column of the --traffic files, given with --traffic", args.column)
    if args.png is not None:
        check_writable_dir(args.png, "--png")


def run(args: argparse.Namespace) -> int:
    import tempfile

    from gpuplan.app.core.config import PlanWith, PromiseTerms, load_config
    from gpuplan.app.lab.simulate import SimOptions, SimPolicy, prepare, simulate
    from gpuplan.progress import progress_bar

    _check_options(args)
    policies = [SimPolicy(name) for name in _policies(args.policy)]
    config = None if args.config is None else load_config(args.config)
    terms = PromiseTerms() if config is None else config.promises

    def given(value: Any, default: Any) -> Any:
        return default if value is None else value

    options = SimOptions(
        plan_with=PlanWith(given(args.plan_with, PlanWith.P90 if config is None else config.plan_with)),
        cycle_minutes=given(args.cycle_minutes, 30 if config is None else config.cycle_minutes),
        review_every_hours=args.review_every,
        amend=not args.no_amend,
        promises=PromiseTerms(
            penalty=given(args.promise_penalty, terms.penalty),
            slack_hours=given(args.promise_slack, terms.slack_hours),
            break_hours=given(args.promise_break, terms.break_hours),
            lookback_hours=given(args.promise_lookback, terms.lookback_hours),
        ),
        aging_hours=given(args.aging_hours, None if config is None else config.aging_hours) or None,
        fifo_deadline=given(args.fifo_deadline, config is not None and config.fifo_deadline),
    )
    with tempfile.TemporaryDirectory(prefix="gpuplan-simulate-") as work:
        setup = prepare(
            days=args.days,
            gpus=given(args.gpus, DEFAULT_GPUS),
            work_dir=Path(work),
            traffic_paths=args.traffic,
            traffic_column=args.column,
            workload_path=args.workload,
            seed=args.seed,
            config=config,
            config_source=str(args.config),
        )
        # One bar over every policy's run: each policy simulates the same hours.
        runs = f"{len(policies)} policies x {setup.hours} h" if len(policies) > 1 else f"{setup.hours} h"
        with progress_bar(setup.hours * len(policies), f"simulated hours ({runs})", unit="h") as bar:
            report = simulate(setup, policies, options, progress=bar.update)
    if args.png is not None:
        _plot(report, args.png)
    if args.json:
        print_json(report.as_json())
        return 0
    _print(report)
    return 0


def _print(report: SimulationReport) -> None:
    from gpuplan.table import count_of, format_table

    setup = report.setup
    _say(
        f"{setup.cluster.gpus} GPUs, {count_of(setup.hours // 24, 'simulated day')}, plans with "
        f"{report.options.plan_with.value.upper()} job durations, a cycle every "
        f"{report.options.cycle_minutes} min; amendments {'on' if report.options.amend else 'off'}, "
        f"promise penalty {report.options.promises.penalty:g} "
        f"(slack {report.options.promises.slack_hours} h, break {report.options.promises.break_hours:g} h), "
        f"promises counting the arrivals of {report.options.promises.lookback_hours} h"
    )
    apps = ", ".join(
        f"{s.app.id} (priority {s.app.priority:.4g}, swap cap {s.app.swap_cap}, "
        f"{s.history_hours} h of history)"
        for s in setup.series
    )
    _say(f"real-time apps: {apps}")
    kinds: dict[str, int] = {}
    for job in setup.jobs:
        kinds[job.kind.value] = kinds.get(job.kind.value, 0) + 1
    _say("batch jobs submitted: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())))
    kind_names = sorted(kinds)
    headers = [
        "policy",
        "util",
        "value",
        "rt served",
        "rt unmet GPU-h",
        "worst h",
        "rt idle GPU-h",
        "amend/day",
        "promise kept",
        "plan kept",
        "promised - plan p50/p90 h",
        "delay p50/p90 h",
        "rt moves",
        "wait p50/p99 h",
        *(f"{kind} wait p50/p99 h" for kind in kind_names),
        "done",
        "started",
        "cycle ms p50/p99",
    ]
    rows = []
    for m in report.metrics.values():
        by_kind = [m.wait_by_kind.get(kind, (0.0, 0.0)) for kind in kind_names]
        rows.append(
            [
                m.policy,
                f"{m.utilization:.1%}",
                f"{m.value:,.0f}",
                f"{m.rt_served:.2%}",
                f"{m.rt_unmet_gpu_hours:,.0f}",
                f"{m.rt_unmet_gpu_hours_worst_hour:,.1f}",
                f"{m.rt_idle_gpu_hours:,.0f}",
                f"{m.amendments_per_day:.1f}",
                f"{m.promise_kept:.1%} of {m.promised}",
                f"{m.plan_kept:.1%}",
                f"{m.promise_lead_h_p50:.1f} / {m.promise_lead_h_p90:.1f}",
                f"{m.promise_delay_h_p50:.1f} / {m.promise_delay_h_p90:.1f}",
                m.rt_moves,
                f"{m.wait_p50_h:.1f} / {m.wait_p99_h:.1f}",
                *(f"{p50:.1f} / {p99:.1f}" for p50, p99 in by_kind),
                m.completed,
                f"{m.started}/{m.submitted}",
                f"{m.cycle_ms_p50:.0f} / {m.cycle_ms_p99:.0f}" if m.cycle_ms_p50 else "-",
            ]
        )
    _say(format_table(headers, rows))
    team_rows = [
        [
            m.policy,
            name,
            f"{t.gpu_hours:,.0f}",
            f"{t.share:.1%}",
            f"{t.entitlement:.1%}",
            f"{t.entitlement_met:.1%}",
            f"{t.backlog_hours:.0f}",
            f"{t.wait_p50_h:.1f} / {t.wait_p90_h:.1f}",
            f"{t.reclaim_wait_h_p90:.2f}",
            f"{m.teams.fairness:.3f}",
            m.teams.lent_p90_overruns,
        ]
        for m in report.metrics.values()
        if m.teams is not None
        for name, t in m.teams.teams.items()
    ]
    if team_rows:
        _say("per team:")
        headers = ["policy", "team", "GPU-h", "share", "entitled", "met in backlog", "backlog h"]
        headers += ["wait p50/p90 h", "reclaim p90 h", "fairness", "lent P90 overruns"]
        _say(format_table(headers, team_rows))
    if setup.pooled:
        pool_rows = [
            [
                m.policy,
                name,
                p.gpu_model,
                p.gpus,
                f"{p.utilization:.1%}",
                f"{p.value:,.0f}",
                f"{p.rt_served:.2%}",
                p.started,
            ]
            for m in report.metrics.values()
            for name, p in m.pools.items()
        ]
        _say("per pool:")
        _say(
            format_table(
                ["policy", "pool", "gpu_model", "gpus", "util", "value", "rt served", "started"], pool_rows
            )
        )
    _say(
        "util and value count batch GPU-hours really run (actual durations) and real-time GPU-hours "
        "served; rt served is against what the actual traffic needed; a job still queued at the end "
        "counts its wait until the end."
    )


def _plot(report: SimulationReport, directory: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from gpuplan.app.lab.simulate import busiest_day_grid, hourly
    from gpuplan.render import draw_grid, job_colours, legend_handles
    from gpuplan.table import count_of

    setup = report.setup
    suffix = report.options.plan_with.value
    series = {policy: hourly(setup, run) for policy, run in report.runs.items()}
    hours = np.arange(setup.hours)

    figure, ax = plt.subplots(figsize=(11, 4))
    window = np.ones(SMOOTH_HOURS) / SMOOTH_HOURS
    for policy, per_hour in series.items():
        # Centred mean; at the ends the window shrinks instead of averaging in zeros.
        smooth = np.convolve(per_hour.utilization(setup.cluster.gpus), window, mode="same")
        smooth /= np.convolve(np.ones(setup.hours), window, mode="same")
        ax.plot(hours, smooth, lw=1.2, label=f"{policy.value} ({report.metrics[policy].utilization:.1%})")
    ax.set_xlabel("simulated hour")
    ax.set_ylabel(f"GPUs busy / GPUs ({SMOOTH_HOURS} h mean)")
    ax.set_ylim(0, 1.02)
    ax.set_title(
        f"utilization over {count_of(setup.hours // 24, 'day')} ({setup.cluster.gpus} GPUs, "
        f"plans with {suffix.upper()} durations)"
    )
    ax.legend(loc="lower right")
    figure.tight_layout()
    _save(figure, directory / f"simulate-{suffix}-utilization.png", dpi=100)

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    demand = next(iter(series.values())).rt_demand
    top.plot(hours, demand, color="black", lw=1.2, label="needed (actual traffic)")
    for policy, per_hour in series.items():
        top.plot(hours, per_hour.rt_held, lw=0.8, label=f"{policy.value}: held")
        bottom.plot(hours, np.cumsum(per_hour.rt_demand - per_hour.rt_served), lw=1.0, label=policy.value)
    top.set_ylabel("real-time GPUs")
    top.set_title("real-time GPUs: needed by the actual traffic vs held (all apps)")
    top.legend(loc="upper right", fontsize=8)
    bottom.set_ylabel("unmet GPU-hours, cumulative")
    bottom.set_xlabel("simulated hour")
    bottom.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    _save(figure, directory / f"simulate-{suffix}-realtime.png", dpi=100)

    day = setup.busiest_day()
    app_ids = [s.app.id for s in setup.series]
    grids = {policy: busiest_day_grid(setup, run, day) for policy, run in report.runs.items()}
    seen = dict.fromkeys(app_ids)
    for grid in grids.values():
        seen.update((cell, None) for row in grid for cell in row if cell is not None)
    # Real-time apps in their strong colours, batch jobs in light ones that repeat.
    colours = job_colours(list(seen), app_ids)
    figure, axes = plt.subplots(
        len(grids), 1, figsize=(12, 4.2 * len(grids)), squeeze=False, constrained_layout=True
    )
    no_down = [0] * 24
    for ax, (policy, grid) in zip(axes[:, 0], grids.items(), strict=True):
        draw_grid(ax, grid, no_down, colours, hatched=app_ids)
        per_hour = series[policy]
        span = slice(day * 24, day * 24 + 24)
        used = float(per_hour.utilization(setup.cluster.gpus)[span].mean())
        served = per_hour.rt_served[span].sum() / max(1, per_hour.rt_demand[span].sum())
        ax.set_title(
            f"{policy.value}: simulated day {day}, utilization {used:.1%}, real-time served {served:.1%}"
            " (batch jobs in colour, real-time apps hatched)",
            fontsize=9,
        )
        ax.set_xlabel(f"hour of simulated day {day}")
    handles = legend_handles(app_ids, colours, hatched=app_ids)[: len(app_ids)]  # no down cells here
    figure.legend(handles=handles, loc="outside right upper", fontsize=7)
    _save(figure, directory / f"simulate-{suffix}-busiest-day.png", dpi=90)


def _save(figure: Any, path: Path, *, dpi: int) -> None:
    """Write a figure as a whole file or not at all (contract.files), then free it."""
    import matplotlib.pyplot as plt

    from contract.files import atomic_write

    try:
        with atomic_write(path, "--png") as stream:
            figure.savefig(stream, format="png", dpi=dpi)
    finally:
        plt.close(figure)
