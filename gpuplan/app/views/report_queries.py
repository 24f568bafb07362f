"""The reports from a store that is already open: what the HTTP API and the dashboard answer.

The inputs come from :mod:`gpuplan.app.views.report_inputs` (the ``*_in`` functions, the same
reads and checks as the command line's); the rows from :mod:`gpuplan.app.views.reports`. Errors
name the report's fields (``run_id``, ``since``, ``quantile``, ``min_gpus``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from contract.errors import InputError
from contract.records import PlanRun
from contract.scenario import Instance, Pool, Team
from gpuplan.app.views.report_inputs import (
    CoverageInputs,
    commits_inputs_in,
    coverage_inputs_in,
    stored_cluster,
    team_report_window,
    utilization_inputs_in,
)
from gpuplan.app.views.reports import (
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
    utilization_of_pools,
)
from gpuplan.app.views.status import checked_pool, find_run
from gpuplan.app.views.teams import TeamHoursRow, TeamReport, team_report
from storage.store import Store

#: Each report's row type, by its name in the API.
ROW_TYPES: dict[str, type] = {
    "idle-windows": IdleWindow,
    "bookable": BookableStart,
    "coverage-risk": CoverageRow,
    "utilization": UtilizationRow,
    "commits": CommitRow,
    "teams": TeamHoursRow,
}


def stored_run(store: Store, run_ref: str) -> tuple[PlanRun, Instance]:
    """The run ``latest`` or by id (errors name ``run_id``), and its instance."""
    found = find_run(store, run_ref)
    return found, run_instance(found)


def committed_steps(store: Store, run: PlanRun, instance: Instance) -> int:
    """How many of ``run``'s first steps are committed hours (decided: nothing there is
    bookable; a submit is planned from the hour after the latest commit)."""
    latest = store.last_commit()
    if latest is None or latest.hour < run.start:
        return 0
    step = timedelta(minutes=instance.step_minutes)
    return min(instance.horizon_steps, (latest.hour - run.start) // step + 1)


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
    names: Mapping[str, str] | None = None,
    pool: str | None = None,
) -> IdleQuery:
    """Idle windows of a stored run; with ``gpus`` and ``hours``, where such a job could be booked
    (``pool``: in that pool of the run's only).

    ``names``: a face's names for the fields (``--gpus``), used in the errors' wording; the
    face renames the errors' fields itself (``gpuplan.options.as_flags``)."""

    def name(field: str) -> str:
        return (names or {}).get(field, field)

    found, instance = stored_run(store, run_ref)
    open_from = committed_steps(store, found, instance)
    if gpus is None and hours is None:
        if limit is not None:
            raise InputError("limit", f"given only with {name('gpus')} and {name('hours')}", limit)
        windows = idle_windows(
            instance, found.grid, found.start, min_gpus, min_hours, pool=pool, open_from=open_from
        )
        return IdleQuery(found, instance, windows, None)
    if gpus is None or hours is None:
        missing, other = ("hours", "gpus") if hours is None else ("gpus", "hours")
        raise InputError(missing, f"given with {name(other)}", None)
    rows = bookable_starts(
        instance, found.grid, found.start, gpus, hours, limit=limit, pool=pool, open_from=open_from
    )
    return IdleQuery(found, instance, None, rows)


def coverage_query(
    store: Store,
    run_ref: str = "latest",
    *,
    quantile: float = 0.9,
    since: str | None = None,
    pool: str | None = None,
) -> tuple[CoverageInputs, CoverageReport]:
    """Coverage risk of a stored run: planned ahead, and realised from ``since`` to its start
    (``pool``: the apps of that pool of the run's only)."""
    inputs = coverage_inputs_in(store, run_ref, since)
    report = coverage_risk(
        inputs.run,
        inputs.apps,
        quantile,
        traffic=inputs.traffic,
        commits=inputs.commits,
        since=inputs.since,
        pool=pool,
    )
    return inputs, report


def utilization_query(
    store: Store,
    *,
    since: str | None = None,
    team: str | None = None,
    pools: Sequence[Pool] = (),
    pool: str | None = None,
) -> UtilizationReport:
    """GPUs of each committed hour by kind, idle and down (``team``: that team's jobs alone);
    on several ``pools`` (the config's), the rows of each pool (``pool``: of that one)."""
    checked_pool(pool, pools)
    cluster, commits, kinds, down_at = utilization_inputs_in(store, since, team=team)
    if len(pools) <= 1:
        return utilization(commits, cluster, kinds, down_at)
    parts = utilization_of_pools(commits, cluster, kinds, down_at, pools=pools, pool=pool)
    rows = sorted((row for part in parts.values() for row in part.rows), key=lambda row: row.hour)
    whole = utilization(commits, cluster, kinds, down_at) if pool is None else next(iter(parts.values()))
    return replace(whole, rows=tuple(rows))


def commits_query(
    store: Store,
    *,
    since: str | None = None,
    team: str | None = None,
    pools: Sequence[Pool] = (),
    pool: str | None = None,
) -> list[CommitRow]:
    """Every committed hour from ``since``: which job holds which GPUs (``team``'s jobs only);
    on several ``pools``, each row's pool (``pool``: that pool's rows)."""
    checked_pool(pool, pools)
    commits, amendments, _, _ = commits_inputs_in(store, since, cluster=False, team=team)
    return commit_rows(commits, amendments, pools, pool)


def teams_query(
    store: Store,
    teams: Sequence[Team],
    *,
    pools: Sequence[Pool],
    since: str | None,
    until: str | None,
    now: datetime,
) -> TeamReport:
    """``report teams`` on ``store``: per team (the config's ``teams``) and GPU model, the GPU-hours
    its jobs ran in the window (:func:`team_report_window`) against its entitlement there."""
    if not teams:
        raise InputError("teams", "a config with a `teams:` section", "none", hint="It names no teams.")
    since_at, until_at = team_report_window(since, until, now)
    cluster = stored_cluster(store)
    return team_report(
        teams, store.jobs(), pools=pools, cluster_gpus=cluster.gpus, since=since_at, until=until_at
    )
