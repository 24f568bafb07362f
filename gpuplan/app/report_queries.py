"""The reports as every face asks for them: read the store, check the options, build the rows.

The command line (``gpuplan report ...``) and the HTTP API (``/v1/reports/...``) both call
these; errors name the options as fields (``run``, ``since``, ``quantile``, ``min_gpus``,
...), which each face renames to its own spelling (``--since``, ``?since=``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from contract.errors import InputError
from gpuplan.app.report_inputs import job_kinds, stored_cluster, stored_commits
from gpuplan.app.reports import (
    BookableStart,
    CommitRow,
    CoverageReport,
    CoverageRow,
    IdleWindow,
    IdleWindows,
    UtilizationReport,
    UtilizationRow,
    bookable_starts,
    commit_rows,
    coverage_risk,
    idle_windows,
    run_instance,
    utilization,
)
from gpuplan.app.status import find_run
from scheduler.model import Instance
from storage.records import Commit, PlanRun
from storage.store import Store

#: Each report's row type, by its name on the command line and in the API.
ROW_TYPES: dict[str, type] = {
    "idle-windows": IdleWindow,
    "bookable": BookableStart,
    "coverage-risk": CoverageRow,
    "utilization": UtilizationRow,
    "commits": CommitRow,
}


def stored_run(store: Store, run_ref: str) -> tuple[PlanRun, Instance]:
    """The run ``latest`` or by id (errors name ``run``), and its instance."""
    try:
        found = find_run(store, run_ref)
    except InputError as error:
        raise type(error)("run", error.expected, error.got) from None
    return found, run_instance(found)


@dataclass(frozen=True)
class IdleQuery:
    run: PlanRun
    instance: Instance
    windows: IdleWindows | None  # without gpus/hours
    bookable: list[BookableStart] | None  # with gpus and hours


def idle_query(
    store: Store,
    run_ref: str = "latest",
    *,
    min_gpus: int = 1,
    min_hours: float = 1,
    gpus: int | None = None,
    hours: float | None = None,
    limit: int | None = None,
) -> IdleQuery:
    """Idle windows of a stored run; with ``gpus`` and ``hours``, where such a job could be booked."""
    found, instance = stored_run(store, run_ref)
    if gpus is None and hours is None:
        if limit is not None:
            raise InputError("limit", "given only with `gpus` and `hours`", limit)
        return IdleQuery(
            found, instance, idle_windows(instance, found.grid, found.start, min_gpus, min_hours), None
        )
    if gpus is None or hours is None:
        missing = "hours" if hours is None else "gpus"
        raise InputError(missing, "given with " + ("`gpus`" if missing == "hours" else "`hours`"), None)
    rows = bookable_starts(instance, found.grid, found.start, gpus, hours, limit=limit)
    return IdleQuery(found, instance, None, rows)


@dataclass(frozen=True)
class CoverageQuery:
    run: PlanRun
    instance: Instance
    report: CoverageReport
    since: datetime
    apps: list[Any]


def coverage_query(
    store: Store, run_ref: str = "latest", *, quantile: float = 0.9, since: datetime | None = None
) -> CoverageQuery:
    """Coverage risk of a stored run: planned ahead, and realised from ``since`` (default one
    horizon back) to the run's start."""
    found, instance = stored_run(store, run_ref)
    step = timedelta(minutes=instance.step_minutes)
    window_since = since if since is not None else found.start - instance.horizon_steps * step
    if since is not None and since >= found.start:
        raise InputError(
            "since", f"a time before the run's start ({found.start.isoformat()})", since.isoformat()
        )
    apps = store.apps()
    commits = store.commits(window_since, found.start)
    if since is not None and not commits:
        raise InputError(
            "since",
            "a time with committed hours between it and the run's start",
            since.isoformat(),
            hint=f"No hour was committed from {since.isoformat()} to {found.start.isoformat()}.",
        )
    traffic = [
        hour for job in instance.realtime_jobs for hour in store.traffic(job.id, window_since, found.start)
    ]
    report = coverage_risk(found, apps, quantile, traffic=traffic, commits=commits, since=window_since)
    return CoverageQuery(found, instance, report, window_since, apps)


def team_commits(store: Store, commits: list[Commit], team: str | None) -> list[Commit]:
    """The commits with only ``team``'s jobs in them (all when None)."""
    if team is None:
        return commits
    ours = {job.id for job in store.jobs() if job.team == team}
    return [Commit(c.hour, c.run_id, tuple(a for a in c.assignments if a.job in ours)) for c in commits]


def utilization_query(store: Store, *, since: datetime | None = None) -> tuple[UtilizationReport, int]:
    """GPUs of each committed hour by kind; and the cluster's GPU count."""
    cluster = stored_cluster(store)
    report = utilization(stored_commits(store, since), cluster, job_kinds(store))
    return report, cluster.gpus


def commits_query(store: Store, *, since: datetime | None = None, team: str | None = None) -> list[CommitRow]:
    """Every committed hour from ``since``: which job holds which GPUs (``team``'s jobs only)."""
    return commit_rows(team_commits(store, stored_commits(store, since), team))
