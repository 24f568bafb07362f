"""``gpuplan report ...``: idle windows, bookable starts, coverage risk, utilization and commits.

Every report reads the store (``--db``) and prints an aligned table; ``--csv`` and
``--json`` print the same rows for tools (times in ISO 8601), and ``--png FILE`` draws
them. A footer that is not a row (what the windows leave out, period totals) goes to
stdout under the table and to stderr with ``--csv``/``--json``, so their output stays
parseable.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.errors import InputError
from gpuplan.options import add_db, as_flags, print_json
from gpuplan.table import cell_text, count_of, row_records, rows_table, write_rows_csv

if TYPE_CHECKING:
    from contract.records import PlanRun
    from contract.scenario import Instance, Pool


#: The report use cases' fields under this command's names (beside gpuplan.options.FIELD_FLAGS).
FLAGS = {"run_id": "--run"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    add_db(common)
    formats = common.add_mutually_exclusive_group()
    formats.add_argument("--csv", action="store_true", help="print CSV rows instead of a table")
    formats.add_argument("--json", action="store_true", help="print a JSON list of row objects")
    common.add_argument("--png", type=Path, metavar="FILE", help="also draw the report")
    sub = parser.add_subparsers(dest="report", required=True, metavar="REPORT")

    def add(
        name: str, help_text: str, runner: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        report = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        report.set_defaults(report_run=runner)
        return report

    idle = add(
        "idle-windows",
        "free aligned GPU blocks in a stored plan; with --gpus/--hours, where a job could be booked",
        _idle_windows,
    )
    _add_run(idle)
    idle.add_argument(
        "--min-gpus", type=int, metavar="N", help="list blocks of >= N GPUs (default 1; not with --gpus)"
    )
    idle.add_argument(
        "--min-hours", type=float, metavar="H", help="free for >= H hours (default 1; not with --gpus)"
    )
    idle.add_argument("--gpus", type=int, metavar="G", help="bookable starts for a G-GPU job (with --hours)")
    idle.add_argument("--hours", type=float, metavar="H", help="the job's hours (with --gpus)")
    idle.add_argument("--limit", type=int, metavar="N", help="with --gpus: the first N starts only")
    _add_pool(idle, "only the windows (or bookable blocks) in this pool of the plan's")

    risk = add(
        "coverage-risk",
        "hours where a real-time app holds fewer GPUs than it needs: planned ahead, realised behind",
        _coverage_risk,
    )
    _add_run(risk)
    risk.add_argument(
        "--quantile", type=float, default=0.9, help="the forecast quantile to cover (default 0.9)"
    )
    risk.add_argument(
        "--since", metavar="TIME", help="realised coverage from TIME to the run's start (default: one day)"
    )
    _add_pool(risk, "only the apps that serve on this pool of the plan's")

    util = add("utilization", "GPUs of each committed hour by job kind, idle and down", _utilization)
    util.add_argument("--since", metavar="TIME", help="committed hours from TIME on (default all)")
    util.add_argument(
        "--team", metavar="TEAM", help="only the GPUs this team's jobs held (the rest count as idle)"
    )
    _add_config_pool(util, "each pool's GPUs by what held them")

    teams = add(
        "teams", "GPU-hours per team and GPU model in a window, against each team's entitlement", _teams
    )
    teams.add_argument(
        "--config", type=Path, required=True, metavar="FILE", help="the daemon's config (its teams)"
    )
    teams.add_argument("--since", metavar="TIME", help="from TIME (default: a week before --until)")
    teams.add_argument("--until", metavar="TIME", help="up to TIME (default: now)")

    commits = add("commits", "every committed hour: which job holds which GPUs", _commits)
    commits.add_argument("--since", metavar="TIME", help="committed hours from TIME on (default all)")
    commits.add_argument("--team", metavar="TEAM", help="only the jobs this team submitted")
    _add_config_pool(commits, "each row's pool")


def _add_config_pool(parser: argparse.ArgumentParser, what: str) -> None:
    """``--config`` (the daemon's: with cluster.pools, ``what``) and ``--pool`` (one of them)."""
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help=f"the daemon's config: with cluster.pools, {what}"
    )
    _add_pool(parser, "only this pool of --config's cluster.pools")


def _config_pools(args: argparse.Namespace) -> tuple[Pool, ...]:
    """The pools of ``--config`` (none without it), ``--pool`` checked among them."""
    from gpuplan.app.core.config import load_config
    from gpuplan.app.views.status import checked_pool

    pools = () if args.config is None else load_config(args.config).pools
    checked_pool(args.pool, pools, "--pool")
    return pools


def _add_run(parser: argparse.ArgumentParser) -> None:
    # ``dest`` is not ``run``: the command line keeps the command's entry point there.
    parser.add_argument(
        "--run",
        dest="run_ref",
        default="latest",
        metavar="RUN_ID|latest",
        help="the plan run (default latest)",
    )


def _add_pool(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--pool", metavar="NAME", help=f"{what} (a cluster of several pools)")


def run(args: argparse.Namespace) -> int:
    runner: Callable[[argparse.Namespace], int] = args.report_run
    return runner(args)


# ---------------------------------------------------------------------------------------
# The reports


#: ``report idle-windows``' flags for the fields of ``report_queries.idle_query``.
IDLE_FLAGS = {
    "min_gpus": "--min-gpus",
    "min_hours": "--min-hours",
    "gpus": "--gpus",
    "hours": "--hours",
    "limit": "--limit",
    "pool": "--pool",
}


def _idle_windows(args: argparse.Namespace) -> int:
    from gpuplan.app.views.report_inputs import open_existing_store
    from gpuplan.app.views.report_queries import idle_query
    from gpuplan.app.views.reports import BookableStart, IdleWindow

    booking = args.gpus is not None or args.hours is not None
    for option, value in (("--min-gpus", args.min_gpus), ("--min-hours", args.min_hours)):
        if booking and value is not None:
            raise InputError(
                option,
                "absent with --gpus/--hours",
                f"{value:g}",
                hint="--gpus and --hours list where that job fits; --min-gpus and --min-hours "
                "filter the idle windows listed without them.",
            )
    min_gpus = 1 if args.min_gpus is None else args.min_gpus
    min_hours = 1.0 if args.min_hours is None else args.min_hours
    store = open_existing_store(args.db)
    try:
        with as_flags(IDLE_FLAGS):
            query = idle_query(
                store,
                args.run_ref,
                min_gpus=min_gpus,
                min_hours=min_hours,
                gpus=args.gpus,
                hours=args.hours,
                limit=args.limit,
                names=IDLE_FLAGS,
                pool=args.pool,
            )
    finally:
        store.close()
    run_value, instance = query.run, query.instance
    heading = _run_heading(run_value, instance, args.pool)
    if query.windows is not None:
        report = query.windows
        asked = f">= {count_of(min_gpus, 'GPU')} for >= {min_hours:g} h"
        _emit(
            IdleWindow,
            report.rows,
            args,
            title=f"{heading}: idle windows of {asked}",
            empty=f"no aligned block of {asked} is free in this plan",
            footer=[
                (
                    f"free: {report.free_gpu_hours:g} GPU-hours; in no aligned block of {asked}: "
                    f"{report.unlisted_gpu_hours:g} GPU-hours"
                )
            ],
        )
        if args.png:
            from gpuplan.report_plots import draw_idle_windows

            draw_idle_windows(
                instance,
                run_value.grid,
                run_value.start,
                report=report,
                bookable=(),
                title=f"{heading}: {len(report.rows)} idle windows of {asked} (outlined); "
                f"{report.free_gpu_hours:g} free GPU-hours, {report.unlisted_gpu_hours:g} in none",
                path=args.png,
            )
        return 0
    rows = query.bookable or []
    job = f"a {args.gpus}-GPU job of {args.hours:g} h"
    footer = []
    if rows:
        earliest = [r for r in rows if r.start == rows[0].start]
        footer.append(
            f"earliest start {cell_text(rows[0].start)} on {len(earliest)} block(s); "
            f"{len(rows)} block(s) listed, each at its earliest start"
        )
    _emit(
        BookableStart,
        rows,
        args,
        title=f"{heading}: where {job} fits without moving anything planned",
        empty=f"{job} fits nowhere in this plan's horizon without moving planned work",
        footer=footer,
    )
    if args.png:
        from gpuplan.report_plots import draw_idle_windows

        draw_idle_windows(
            instance,
            run_value.grid,
            run_value.start,
            report=None,
            bookable=rows,
            title=f"{heading}: where {job} fits (each block at its earliest start)",
            path=args.png,
        )
    return 0


def _coverage_risk(args: argparse.Namespace) -> int:
    from gpuplan.app.views.report_inputs import coverage_inputs
    from gpuplan.app.views.reports import CoverageRow, app_needs, coverage_risk, planned_counts

    inputs = coverage_inputs(args.db, args.run_ref, args.since)
    run_value, instance, apps, window_since = inputs.run, inputs.instance, inputs.apps, inputs.since
    commits, traffic = inputs.commits, inputs.traffic
    with as_flags({"quantile": "--quantile", "pool": "--pool"}):
        report = coverage_risk(
            run_value,
            apps,
            args.quantile,
            traffic=traffic,
            commits=commits,
            since=window_since,
            pool=args.pool,
        )
    heading = _run_heading(run_value, instance, args.pool)
    percentile = f"P{args.quantile * 100:g}"
    footer = [
        f"realised {cell_text(r.since)} to {cell_text(r.until)}: {r.app} served {r.served_share:.1%} of "
        f"{r.needed_gpu_hours:g} GPU-hours of demand over {r.hours} committed hours ({r.short_hours} short)"
        for r in report.realised
    ]
    if not report.realised:
        window = f"{cell_text(window_since)} to {cell_text(run_value.start)}"
        footer.append(f"realised: no committed hour with traffic from {window}")
    _emit(
        CoverageRow,
        report.rows,
        args,
        title=f"{heading}: hours where a real-time app holds fewer GPUs than its {percentile} need",
        empty=f"no shortfall: every app holds its {percentile} need in every hour",
        footer=footer,
    )
    if args.png:
        from gpuplan.report_plots import draw_coverage

        shown = {  # the apps of the pool asked for (--pool), else all
            job.id
            for job in instance.realtime_jobs
            if args.pool is None or instance.realtime_pool(job).name == args.pool
        }
        needs = {
            app: {args.quantile: need}
            for app, need in app_needs(run_value, instance, apps, args.quantile).items()
            if app in shown
        }
        for quantile in (0.5, 0.9):
            try:
                for app, need in app_needs(run_value, instance, apps, quantile).items():
                    if app in needs:
                        needs[app][quantile] = need
            except InputError:
                continue  # no stored forecast (or capacity) to derive this quantile from
        draw_coverage(
            instance,
            run_value.start,
            report,
            planned=planned_counts(instance, run_value.grid),
            needs=needs,
            title=f"{heading}: real-time GPUs planned against need ({percentile} shortfall shaded)",
            path=args.png,
        )
    return 0


def _utilization(args: argparse.Namespace) -> int:
    from gpuplan.app.views.report_inputs import utilization_inputs
    from gpuplan.app.views.reports import UtilizationRow, utilization, utilization_of_pools

    pools = _config_pools(args)
    cluster, commits, kinds, down_at = utilization_inputs(args.db, args.since, team=args.team)
    report = utilization(commits, cluster, kinds, down_at)
    by_pool = utilization_of_pools(commits, cluster, kinds, down_at, pools=pools, pool=args.pool)
    period = f"{cell_text(report.rows[0].hour)} to {cell_text(report.rows[-1].hour + timedelta(hours=1))}"
    footer = []
    for name, part in by_pool.items():
        totals = ", ".join(f"{column} {hours:g}" for column, hours in part.gpu_hours.items() if hours)
        where = "" if name is None else f"pool {name}: "
        footer.append(f"{where}total GPU-hours: {totals}; busy {part.busy_share:.1%} of up GPU-hours")
    rows = sorted((row for part in by_pool.values() for row in part.rows), key=lambda row: row.hour)
    shown = "" if args.pool is None else f" in pool {args.pool}"
    _emit(
        UtilizationRow,
        rows,
        args,
        title=f"{cluster.gpus} GPUs, {count_of(len(report.rows), 'committed hour')} {period}{shown}: "
        "GPUs by what held them",
        empty="no committed hour",
        footer=footer,
    )
    if args.png:
        from gpuplan.report_plots import draw_utilization

        draw_utilization(
            report,
            cluster.gpus,
            f"Committed GPUs by kind, {period} (busy {report.busy_share:.1%} of up GPU-hours)",
            args.png,
        )
    return 0


def _teams(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from gpuplan.app.core.config import load_config
    from gpuplan.app.views.report_inputs import open_existing_store
    from gpuplan.app.views.report_queries import teams_query
    from gpuplan.app.views.teams import TeamHoursRow, team_colours

    config = load_config(args.config)
    if not config.teams:
        raise InputError(
            "--config", "a config with a `teams:` section", str(args.config), hint="It names no teams."
        )
    with as_flags({"since": "--since", "until": "--until"}):
        store = open_existing_store(args.db)
        try:
            report = teams_query(
                store,
                config.teams,
                pools=config.pools,
                since=args.since,
                until=args.until,
                now=datetime.now(UTC),
            )
        finally:
            store.close()
    period = f"{cell_text(report.since)} to {cell_text(report.until)} ({report.hours:g} h)"
    totals: dict[str, float] = {}
    for row in report.rows:
        totals[row.team] = totals.get(row.team, 0.0) + row.gpu_hours
    _emit(
        TeamHoursRow,
        report.rows,
        args,
        title=f"{period}: GPU-hours per team and GPU model against entitlement (quota x hours)",
        empty="no team",
        footer=["total GPU-hours: " + ", ".join(f"{team} {hours:g}" for team, hours in totals.items())],
    )
    if args.png:
        from gpuplan.report_plots import draw_teams

        draw_teams(
            report, team_colours(config.teams), f"GPU-hours per team against entitlement, {period}", args.png
        )
    return 0


def _commits(args: argparse.Namespace) -> int:
    from gpuplan.app.views.report_inputs import commits_inputs
    from gpuplan.app.views.reports import CommitRow, commit_rows, commits_grid, down_gpus_at

    pools = _config_pools(args)
    commits, amendments, cluster, apps = commits_inputs(
        args.db, args.since, cluster=bool(args.png), team=args.team
    )
    rows = commit_rows(commits, amendments, pools, args.pool)
    first, last = commits[0].hour, commits[-1].hour
    amended = f", {count_of(len(amendments), 'amendment')}" if amendments else ""
    span = f"from {cell_text(first)} to {cell_text(last)}"
    _emit(
        CommitRow,
        rows,
        args,
        title=f"{count_of(len(commits), 'committed hour')} {span}{amended}",
        empty="no job was committed in these hours",
        footer=[],
    )
    if args.png and cluster is not None:
        from gpuplan.report_plots import draw_commits

        hours = [c.hour for c in commits]
        down = [sum(1 << g for g in down_gpus_at(cluster, hour)) for hour in hours]
        draw_commits(
            commits_grid(commits, cluster.gpus),
            hours,
            down,
            realtime=apps,
            title=f"Committed hours {cell_text(first)} to {cell_text(last)}: one column per committed hour",
            path=args.png,
        )
    return 0


# ---------------------------------------------------------------------------------------
# Loading and output


def _run_heading(run_value: PlanRun, instance: Instance, pool: str | None = None) -> str:
    """The run, its grid and, on a cluster of several pools, its pools (``pool``: the one shown)."""
    pools = ""
    if instance.pooled:
        listed = ", ".join(f"{p.name} ({p.gpu_model}, {p.gpus} GPUs)" for p in instance.pools)
        pools = f" in pools {listed}" + ("" if pool is None else f"; pool {pool} shown")
    return (
        f"run {run_value.id} ({run_value.mode.value}, {run_value.policy}): {instance.gpus} GPUs x "
        f"{instance.horizon_steps} steps of {instance.step_minutes} min from {cell_text(run_value.start)} UTC"
        + pools
    )


def _emit(
    row_type: type,
    rows: Sequence[Any],
    args: argparse.Namespace,
    *,
    title: str,
    empty: str,
    footer: Sequence[str],
) -> None:
    """Print ``rows`` (frozen dataclasses; their fields are the columns) as a table, CSV or JSON."""
    out = sys.stdout
    if args.json:
        print_json(row_records(row_type, rows))
    elif args.csv:
        write_rows_csv(row_type, rows, out)
    else:
        print(title)
        print(rows_table(row_type, rows) if rows else empty)
    for line in footer:
        print(line, file=sys.stderr if args.json or args.csv else out)
