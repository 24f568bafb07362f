"""What the reports read from the store, with the messages an operator sees when it is not there.

The report functions themselves (:mod:`gpuplan.app.views.reports`) are pure; this module is
the only part of them that touches a :class:`~storage.store.Store`. Each ``*_inputs``
function opens the store at a URL, reads what one report needs, checks the report's
``since`` (a user's time, as text) against what is stored, and closes the store.
Errors name the report's own fields (``db``, ``run_id``, ``since``). The ``*_in``
functions read the same from a store that is already open (the HTTP API's).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from contract.errors import InputError, StoreError
from contract.records import Amendment, App, Assignment, Cluster, Commit, PlanRun, TrafficHour
from contract.scenario import Instance, JobKind
from contract.times import parse_time
from gpuplan.app.core.bridge import merged_assignments
from gpuplan.app.views.reports import run_instance
from gpuplan.app.views.status import find_run
from storage.factory import open_store, sqlite_file
from storage.store import Store

NO_DATA_HINT = "Run the service first (`gpuplan daemon --once`), or point --db at its database."


def open_existing_store(url: str) -> Store:
    """Open the store at ``url``; a SQLite file that does not exist is an error, not a new database.

    A report on a mistyped path should say so instead of creating an empty database there.
    A zero-byte file is not a database either (SQLite would make one of it), and a database
    whose file or folder cannot be written says so: SQLite only says it is "unable to open" it.
    """
    file = sqlite_file(url)
    if file is None:
        return open_store(url)
    path = str(file)
    if not file.is_file():
        raise InputError("db", "the URL of an existing database", url, hint=f"No file {path}. {NO_DATA_HINT}")
    if file.stat().st_size == 0:
        raise InputError(
            "db", "the URL of an existing database", url, hint=f"{path} is an empty file. {NO_DATA_HINT}"
        )
    try:
        return open_store(url)
    except StoreError as error:
        locked = [
            what
            for what, where in (("the file", file), (f"its folder {file.parent}", file.parent))
            if not os.access(where, os.W_OK)
        ]
        if not locked:
            raise
        raise StoreError(
            f"the SQLite database {path} is read-only: {' and '.join(locked)} cannot be written "
            "(SQLite writes the file and its -wal and -shm files beside it); make them writable"
        ) from error


def stored_cluster(store: Store) -> Cluster:
    cluster = store.cluster()
    if cluster is None:
        raise InputError("db", "a database with a cluster", "none stored", hint=NO_DATA_HINT)
    return cluster


def stored_commits(store: Store, since: datetime | None, until: datetime | None = None) -> list[Commit]:
    """Committed hours ``since <= hour < until``; at least one, else a message naming the window."""
    commits = store.commits(since, until)
    if commits:
        return commits
    if store.last_commit() is None:
        raise InputError("db", "a database with committed hours", "none committed", hint=NO_DATA_HINT)
    window = f"since {since.isoformat()}" if since is not None else "in the window"
    if until is not None:
        window += f" until {until.isoformat()}"
    raise InputError("since", "a time before the last committed hour", f"no committed hour {window}")


def job_kinds(store: Store) -> dict[str, JobKind]:
    """Every known job id (batch jobs and real-time apps) -> its kind."""
    kinds = {job.id: JobKind(job.kind) for job in store.jobs()}
    kinds.update((app.id, JobKind.REALTIME) for app in store.apps())
    return kinds


def parse_since(since: str | None) -> datetime | None:
    """A report's ``since``: a user's time (contract/times.py), or None."""

    return parse_time(since, "since") if since else None


def load_run(url: str, run_ref: str) -> PlanRun:
    """The run ``run_ref`` names (an id or ``latest``) in the store at ``url``."""

    store = open_existing_store(url)
    try:
        return find_run(store, run_ref)
    finally:
        store.close()


@dataclass(frozen=True, eq=False)
class CoverageInputs:
    """What the coverage-risk report reads: the run, its apps, and the realised past since ``since``."""

    run: PlanRun
    instance: Instance
    apps: list[App]
    commits: list[Commit]
    traffic: list[TrafficHour]
    since: datetime


def coverage_inputs(url: str, run_ref: str, since: str | None) -> CoverageInputs:
    """The run and the realised window from ``since`` (default: one horizon) to the run's start."""
    store = open_existing_store(url)
    try:
        return coverage_inputs_in(store, run_ref, since)
    finally:
        store.close()


def coverage_inputs_in(store: Store, run_ref: str, since: str | None) -> CoverageInputs:

    since_at = parse_since(since)
    run = find_run(store, run_ref)
    instance = run_instance(run)
    step = timedelta(minutes=instance.step_minutes)
    window_since = since_at if since_at is not None else run.start - instance.horizon_steps * step
    if since_at is not None and since_at >= run.start:
        raise InputError("since", f"a time before the run's start ({run.start.isoformat()})", since)
    apps = store.apps()
    commits = store.commits(window_since, run.start)
    if since_at is not None and not commits:
        raise InputError(
            "since",
            "a time with committed hours between it and the run's start",
            since,
            hint=f"No hour was committed from {since_at.isoformat()} to {run.start.isoformat()}.",
        )
    traffic = [
        hour for job in instance.realtime_jobs for hour in store.traffic(job.id, window_since, run.start)
    ]
    return CoverageInputs(run, instance, apps, commits, traffic, window_since)


def utilization_inputs(
    url: str, since: str | None, *, team: str | None = None
) -> tuple[Cluster, list[Commit], dict[str, JobKind], dict[datetime, set[int]]]:
    """:func:`utilization_inputs_in` on the database at ``url``."""
    store = open_existing_store(url)
    try:
        return utilization_inputs_in(store, since, team=team)
    finally:
        store.close()


def utilization_inputs_in(
    store: Store, since: str | None, *, team: str | None = None
) -> tuple[Cluster, list[Commit], dict[str, JobKind], dict[datetime, set[int]]]:
    """The cluster, the committed hours from ``since`` on (at least one; ``team``'s jobs only,
    when given) with their amendments' additions (the work placed within the hour), every
    job's kind, and the GPUs down in each hour as it was committed (from the run it was
    committed from; an hour whose run was pruned is left to the cluster's windows)."""
    since_at = parse_since(since)
    commits, amendments = team_commits(
        store, stored_commits(store, since_at), store.amendments(since_at), team
    )
    merged = []
    for commit in commits:
        held = merged_assignments(commit, [a for a in amendments if a.hour == commit.hour])
        assignments = tuple(Assignment(job, gpus) for job, gpus in sorted(held.items()))
        merged.append(Commit(commit.hour, commit.run_id, assignments))
    return stored_cluster(store), merged, job_kinds(store), _down_when_committed(store, merged)


def _down_when_committed(store: Store, commits: Sequence[Commit]) -> dict[datetime, set[int]]:
    """Each committed hour's down GPUs as the run it was committed from had them (its step 0)."""
    down: dict[datetime, set[int]] = {}
    for commit in commits:
        run = None if commit.run_id is None else store.run(commit.run_id)
        if run is None or run.start != commit.hour:
            continue
        horizon = len(run.grid[0]) if run.grid else 0
        down[commit.hour] = {
            int(window["gpu"])
            for window in run.scenario.get("down", [])
            if int(window.get("start", 0)) <= 0 < int(window.get("end", horizon))
        }
    return down


def commits_inputs(
    url: str, since: str | None, *, cluster: bool, team: str | None = None
) -> tuple[list[Commit], list[Amendment], Cluster | None, set[str]]:
    """The committed hours from ``since`` on and their amendments (``team``'s jobs only, when
    given); with ``cluster``, also the cluster and the app ids."""
    store = open_existing_store(url)
    try:
        return commits_inputs_in(store, since, cluster=cluster, team=team)
    finally:
        store.close()


def commits_inputs_in(
    store: Store, since: str | None, *, cluster: bool, team: str | None = None
) -> tuple[list[Commit], list[Amendment], Cluster | None, set[str]]:
    since_at = parse_since(since)
    stored = stored_commits(store, since_at)
    commits, amendments = team_commits(store, stored, store.amendments(since_at), team)
    if not cluster:
        return commits, amendments, None, set()
    return commits, amendments, stored_cluster(store), {app.id for app in store.apps()}


def team_commits(
    store: Store, commits: list[Commit], amendments: list[Amendment], team: str | None
) -> tuple[list[Commit], list[Amendment]]:
    """The commits with only ``team``'s jobs in them, and the amendments that add any (all when None)."""
    if team is None:
        return commits, amendments
    ours = {job.id for job in store.jobs() if job.team == team}
    kept = [Commit(c.hour, c.run_id, tuple(a for a in c.assignments if a.job in ours)) for c in commits]
    added = [
        replace(amendment, assignments=tuple(a for a in amendment.assignments if a.job in ours))
        for amendment in amendments
    ]
    return kept, [amendment for amendment in added if amendment.assignments]


#: ``report teams``' window when none is given: the week up to now.
TEAM_REPORT_DAYS = 7


def team_report_window(since: str | None, until: str | None, now: datetime) -> tuple[datetime, datetime]:
    """``report teams``' window: ``[since, until)``, by default the :data:`TEAM_REPORT_DAYS` days
    up to ``now`` (errors name ``since`` and ``until``)."""
    until_at = parse_time(until, "until") if until else now
    since_at = parse_since(since) or until_at - timedelta(days=TEAM_REPORT_DAYS)
    if since_at >= until_at:
        raise InputError("until", f"a time after since ({since_at.isoformat()})", until_at.isoformat())
    return since_at, until_at
