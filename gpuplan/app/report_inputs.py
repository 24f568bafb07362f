"""What the reports read from the store, with the messages an operator sees when it is not there.

The report functions themselves (:mod:`gpuplan.app.reports`) are pure; this module is
the only part of them that touches a :class:`~storage.store.Store`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from contract.errors import InputError
from contract.records import Cluster, Commit
from contract.scenario import JobKind
from storage.factory import open_store
from storage.store import Store

NO_DATA_HINT = "Run the service first (`gpuplan daemon --once`), or point --db at its database."


def open_existing_store(url: str) -> Store:
    """Open the store at ``url``; a SQLite file that does not exist is an error, not a new database.

    A report on a mistyped path should say so instead of creating an empty database there.
    """
    prefix = "sqlite:///"
    if url.startswith(prefix):
        path = url[len(prefix) :].split("?", 1)[0]
        if path and path != ":memory:" and not Path(path).is_file():
            raise InputError(
                "--db", "the URL of an existing database", url, hint=f"No file {path}. {NO_DATA_HINT}"
            )
    return open_store(url)


def stored_cluster(store: Store) -> Cluster:
    cluster = store.cluster()
    if cluster is None:
        raise InputError("--db", "a database with a cluster", "none stored", hint=NO_DATA_HINT)
    return cluster


def stored_commits(store: Store, since: datetime | None, until: datetime | None = None) -> list[Commit]:
    """Committed hours ``since <= hour < until``; at least one, else a message naming the window."""
    commits = store.commits(since, until)
    if commits:
        return commits
    if store.last_commit() is None:
        raise InputError("--db", "a database with committed hours", "none committed", hint=NO_DATA_HINT)
    window = f"since {since.isoformat()}" if since is not None else "in the window"
    if until is not None:
        window += f" until {until.isoformat()}"
    raise InputError("--since", "a time before the last committed hour", f"no committed hour {window}")


def job_kinds(store: Store) -> dict[str, JobKind]:
    """Every known job id (batch jobs and real-time apps) -> its kind."""
    kinds = {job.id: JobKind(job.kind) for job in store.jobs()}
    kinds.update((app.id, JobKind.REALTIME) for app in store.apps())
    return kinds
