"""The database's upkeep on a head node: its schema revision, the upgrade, a SQLite backup and restore.

- :func:`schema_state` reads the revision a database is at without changing anything (the
  doctor's check); :func:`upgrade` brings it to the newest one this code ships, as every
  command's :func:`storage.factory.open_store` does. A database of a newer gpuplan is refused
  before anything is written.
- :func:`backup` copies a SQLite database with sqlite3's online backup API, so a running daemon
  may keep writing: the copy is one consistent state. It is written to a temporary file beside
  the target and renamed, so a failed backup leaves no file. :func:`restore` copies a backup back
  into the database the same way (under SQLite's write lock, in one step), then upgrades it when
  it is older. PostgreSQL has its own tools for both (``pg_dump``/``pg_restore``,
  docs/operations.md): these functions refuse it with that hint.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from contract.errors import InputError, StoreError

PG_DUMP_HINT = (
    "For PostgreSQL use pg_dump --format=custom and pg_restore --clean (docs/operations.md, "
    "'Back up and restore')."
)


@dataclass(frozen=True)
class SchemaState:
    """A database's schema revision (None: no schema yet) against this code's newest."""

    revision: str | None
    head: str
    known: tuple[str, ...]  # every revision this code ships, oldest first

    @property
    def current(self) -> bool:
        return self.revision == self.head

    @property
    def newer(self) -> bool:
        """Written by a newer gpuplan: a revision this code does not ship."""
        return self.revision is not None and self.revision not in self.known


def schema_state(url: str) -> SchemaState:
    """The revision of the database at ``url``, read only; StoreError when it cannot be reached."""
    from sqlalchemy import exc, inspect, text

    from storage.sql.engine import _create_engine, _sqlite_file, known_revisions, parse_url

    known = known_revisions()
    parsed = parse_url(url)
    path = _sqlite_file(parsed)
    if parsed.get_backend_name() == "sqlite" and (path is None or not path.is_file()):
        return SchemaState(None, known[-1], known)  # in memory, or no file: nothing created
    engine = _create_engine(parsed)
    try:
        with engine.connect() as connection:
            revision = None
            if inspect(connection).has_table("alembic_version"):
                revision = connection.scalar(text("SELECT version_num FROM alembic_version"))
    except (exc.DBAPIError, exc.TimeoutError) as error:
        reason = str(getattr(error, "orig", None) or error).strip().splitlines()
        masked = parsed.render_as_string(hide_password=True)
        raise StoreError(
            f"cannot reach or use the database at {masked}: {reason[0] if reason else error}"
        ) from error
    finally:
        engine.dispose()
    return SchemaState(None if revision is None else str(revision), known[-1], known)


def upgrade(url: str) -> tuple[str | None, str]:
    """Upgrade the database at ``url`` to the newest revision: (the revision before, the one after)."""
    from storage.factory import open_store

    before = schema_state(url).revision
    open_store(url).close()
    return before, schema_state(url).head


def _sqlite_path(url: str, field: str) -> Path:
    from storage.factory import sqlite_file
    from storage.sql.engine import parse_url

    path = sqlite_file(url)
    if path is None:
        shown = parse_url(url).render_as_string(hide_password=True)
        raise InputError(field, "the URL of a SQLite file (sqlite:///PATH)", shown, hint=PG_DUMP_HINT)
    return path


def _copy(source: sqlite3.Connection, target: Path) -> None:
    """``source`` into a new file at ``target``, all or nothing."""
    if target.exists():
        raise InputError("path", "a path where no file is yet (a backup never overwrites)", str(target))
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        copy = sqlite3.connect(partial)
        try:
            source.backup(copy)
        finally:
            copy.close()
        os.link(partial, target)  # fails, rather than overwrite, if the target appeared meanwhile
    finally:
        partial.unlink(missing_ok=True)


def backup(url: str, target: Path) -> Path:
    """Copy the SQLite database at ``url`` to the new file ``target`` with the online backup API."""
    path = _sqlite_path(url, "db")
    if not path.is_file():
        raise InputError("db", "the URL of an existing database", url, hint=f"No file {path}.")
    target.parent.mkdir(parents=True, exist_ok=True)
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
    try:
        _copy(source, target)
    finally:
        source.close()
    return target


def restore(source: Path, url: str) -> tuple[str | None, str]:
    """Replace the SQLite database at ``url`` with the backup ``source``, then upgrade it.

    The backup is checked first (a SQLite file holding a gpuplan schema this code knows): a
    backup of a newer gpuplan, or a file that is none, leaves the database as it was.
    Returns the backup's revision and the one the database is at now.
    """
    path = _sqlite_path(url, "db")
    if not source.is_file():
        raise InputError(
            "path", "a backup file made by `gpuplan db backup`", str(source), hint="No such file."
        )
    state = schema_state(f"sqlite:///{source.resolve()}")
    if state.revision is None:
        raise InputError(
            "path", "a backup file holding a gpuplan database", str(source), hint="No schema in it."
        )
    if state.newer:
        raise StoreError(
            f"the backup {source} is at schema revision {state.revision}, newer than this gpuplan's "
            f"{state.head}; nothing restored. A database written by a newer gpuplan needs that version."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    backup_file = sqlite3.connect(f"file:{source.resolve()}?mode=ro", uri=True)
    try:
        # In place, under the target's write lock: a reader sees the old database or the restored one.
        target = sqlite3.connect(path, timeout=30.0)
        try:
            backup_file.backup(target)
        finally:
            target.close()
    finally:
        backup_file.close()
    return state.revision, upgrade(url)[1]


def describe(state: SchemaState) -> str:
    """One line: the revision and what it means."""
    if state.revision is None:
        return f"no schema yet (this gpuplan creates revision {state.head})"
    if state.current:
        return f"schema revision {state.revision}, current"
    if state.newer:
        return (
            f"schema revision {state.revision}, newer than this gpuplan's {state.head}: "
            "install the gpuplan that wrote it"
        )
    return (
        f"schema revision {state.revision}, older than {state.head}: "
        "`gpuplan db upgrade` (or the daemon's start) upgrades it"
    )
