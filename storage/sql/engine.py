"""The SQL store's plumbing, shared by every aggregate: URLs, engines, transactions, the schema upgrade.

SQLite's set-up for two processes on one file (write-ahead logging, the busy timeout,
``BEGIN IMMEDIATE`` for writers) is here; :mod:`storage.sql` describes it.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    event,
    exc,
    inspect,
    text,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from contract.errors import InputError, StoreError
from storage.store import EncodedJSON
from storage.tables import (
    SCHEMA_REVISION,
)

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent.parent / "migrations"
EXPECTED_URL = "a database URL: sqlite:///PATH (e.g. sqlite:///var/gpuplan.db), sqlite:// or postgresql+psycopg://USER@HOST[:PORT]/DB"
SQLITE_BUSY_TIMEOUT_S = 30.0
DEFAULT_LOCK_TTL = timedelta(minutes=10)
# Only one process upgrades the schema at a time (PostgreSQL; SQLite's write lock does it).
_UPGRADE_LOCK = "gpuplan schema upgrade"
# Execution option: this transaction only reads, so SQLite may BEGIN DEFERRED.
_READ_ONLY = "gpuplan_read_only"
_IN_CLAUSE_CHUNK = 500


def _json_dumps(value: object) -> str:
    # NaN and Infinity are not JSON: PostgreSQL would refuse them, so SQLite must too.
    if isinstance(value, EncodedJSON):
        return value.text
    return json.dumps(value, allow_nan=False)


def parse_url(url: str) -> URL:
    """The SQLAlchemy URL of a ``db`` value; InputError naming ``db`` when it is not one we serve."""
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError) as error:
        raise InputError("db", EXPECTED_URL, url, hint=str(error)) from None
    backend = parsed.get_backend_name()
    if backend == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3 is the driver we ship
    if parsed.drivername not in {"sqlite", "sqlite+pysqlite", "postgresql+psycopg"}:
        raise InputError(
            "db",
            EXPECTED_URL,
            parsed.render_as_string(hide_password=True),
            hint="Other back ends are not supported.",
        )
    return parsed


def _sqlite_file(parsed: URL) -> Path | None:
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


#: PostgreSQL connections kept open, and opened beyond them at a peak (the server's default
#: ``max_connections`` is 100: two daemons on one database stay below it).
POOL_SIZE = 20
POOL_OVERFLOW = 20


#: A pooled PostgreSQL connection idle longer than this is pinged before it is handed out
#: (:func:`_ping_if_idle`).
PING_AFTER_IDLE_S = 1.0


def _create_engine(parsed: URL) -> Engine:
    if parsed.get_backend_name() == "postgresql":
        try:
            engine = create_engine(
                parsed,
                # The served API's threads (up to 40) each hold a connection per transaction: a
                # pool smaller than that opens and closes a connection per request under load.
                pool_size=POOL_SIZE,
                max_overflow=POOL_OVERFLOW,
                connect_args={"connect_timeout": 10},
                json_serializer=_json_dumps,
            )
        except ImportError as error:
            raise StoreError(
                "PostgreSQL needs the psycopg driver: pip install 'gpuplan[postgres]'"
            ) from error
        event.listen(engine, "checkin", _idle_from)
        event.listen(engine, "checkout", _ping_if_idle(engine))
        return engine
    if _sqlite_file(parsed) is None:
        # In memory: one shared connection, or every new connection would see an empty database.
        engine = create_engine(
            parsed,
            poolclass=StaticPool,
            connect_args={"check_same_thread": False},
            json_serializer=_json_dumps,
        )
    else:
        engine = create_engine(
            parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S}, json_serializer=_json_dumps
        )
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _idle_from(_dbapi_connection: Any, record: Any) -> None:
    record.info["idle_since"] = time.monotonic()


def _ping_if_idle(engine: Engine) -> Callable[[Any, Any, Any], None]:
    """A restarted server leaves dead connections in the pool: one idle longer than
    :data:`PING_AFTER_IDLE_S` is pinged when it is checked out, and a dead one is replaced
    (the pool retries on :class:`sqlalchemy.exc.DisconnectionError`). A connection handed back
    and out again within that time is not: under load a ping per checkout was a round trip
    per transaction. A server that goes away under load fails the transactions in flight,
    and the pool drops every connection it had opened before (SQLAlchemy's handling of a
    disconnect)."""

    def checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:
            raise exc.DisconnectionError(f"a pooled connection is dead: {error}") from error

    return checkout


def _set_wal(cursor: Any) -> None:
    """Switch a new database to write-ahead logging, waiting out another process's lock.

    Changing the journal mode needs an exclusive lock, and SQLite answers "database is
    locked" at once, without its busy handler, while another process holds one (two
    daemons starting together on an empty database). So retry until the busy timeout.
    """
    import sqlite3

    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_on_connect(dbapi_connection: Any, _record: object) -> None:
    # SQLAlchemy's recipe: take BEGIN away from the sqlite3 module, which would skip it
    # before SELECTs and DDL (no repeatable reads, no transactional migrations).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys = ON")
    _set_wal(cursor)
    # With WAL, NORMAL loses no committed transaction when a process dies (only on power loss).
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()


def _sqlite_on_begin(connection: Connection) -> None:
    options = connection.get_execution_options()
    if options.get("isolation_level") == "AUTOCOMMIT":
        return  # asked for no transaction (e.g. to checkpoint or VACUUM)
    connection.exec_driver_sql("BEGIN DEFERRED" if options.get(_READ_ONLY) else "BEGIN IMMEDIATE")


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for the migrations shipped in ``storage/migrations`` (no alembic.ini).

    ``env.py`` runs on ``connection`` when one is given (the store's own, inside its transaction).
    """
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest migration this code ships."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "storage/migrations/versions holds no migration"
    return head


def known_revisions() -> tuple[str, ...]:
    """Every migration this code ships, oldest first."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return tuple(reversed([revision.revision for revision in script.walk_revisions()]))


def _require_hour(value: datetime, name: str) -> None:
    if value.tzinfo is None or value.minute or value.second or value.microsecond:
        raise InputError(name, "a timezone-aware hour (minutes and seconds zero)", value.isoformat())


def _require_finite(value: float | None, name: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(name, "a finite number", value)


def _plain(value: object) -> object:
    """A JSON-ready Python scalar from a pandas/numpy one."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def _chunks(values: Sequence[str], size: int = _IN_CLAUSE_CHUNK) -> Iterator[Sequence[str]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


class SqlBase:
    """The engine, its transactions and the schema upgrade, which every aggregate's methods use."""

    def __init__(self, engine: Engine, *, lock_ttl: timedelta = DEFAULT_LOCK_TTL) -> None:
        self._engine = engine
        self._lock_ttl = lock_ttl
        self._url = engine.url.render_as_string(hide_password=True)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, for APScheduler's job store on the same database and for tests."""
        return self._engine

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._engine.dialect.name

    @property
    def url(self) -> str:
        """The database's URL, its password hidden."""
        return self._url

    @property
    def file(self) -> Path | None:
        """The SQLite database's file; None in memory and on PostgreSQL."""
        return _sqlite_file(self._engine.url) if self.dialect == "sqlite" else None

    # -- plumbing ------------------------------------------------------------------------
    def _fail(self, error: Exception) -> StoreError:
        reason = str(getattr(error, "orig", None) or error).strip().splitlines()
        first = reason[0] if reason else type(error).__name__
        if isinstance(error, exc.OperationalError | exc.InterfaceError | exc.TimeoutError):
            return StoreError(f"cannot reach or use the database at {self._url}: {first}")
        return StoreError(f"the database at {self._url} refused the operation: {first}")

    @contextmanager
    def _session(self, *, read_only: bool = False) -> Iterator[Session]:
        """One transaction; SQLAlchemy's errors leave as StoreError (ValueError for unstorable values)."""
        try:
            with self._engine.connect() as connection:
                if read_only:
                    connection.execution_options(**{_READ_ONLY: True})
                with Session(bind=connection, expire_on_commit=False) as session, session.begin():
                    yield session
        except (exc.DBAPIError, exc.TimeoutError) as error:
            raise self._fail(error) from error
        except exc.StatementError as error:
            # A value the driver cannot take (NaN in JSON, a naive datetime): the caller's bug.
            raise ValueError(f"cannot store a value: {error.orig}") from error

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """One read-only transaction on a bare connection: for the reads that build no ORM
        objects, a third of :meth:`_session`'s processor time (the marks, asked on every
        request the API serves). Errors as :meth:`_session`'s."""
        with self._bare(read_only=True) as connection:
            yield connection

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """One transaction on a bare connection, for writes of plain INSERTs that build no ORM
        objects (a batch of submits and its run, stored for every batch the API answers).
        Errors as :meth:`_session`'s."""
        with self._bare(read_only=False) as connection:
            yield connection

    @contextmanager
    def _bare(self, *, read_only: bool) -> Iterator[Connection]:
        try:
            with self._engine.connect() as connection:
                if read_only:
                    connection.execution_options(**{_READ_ONLY: True})
                with connection.begin():
                    yield connection
        except (exc.DBAPIError, exc.TimeoutError) as error:
            raise self._fail(error) from error
        except exc.StatementError as error:
            raise ValueError(f"cannot store a value: {error.orig}") from error

    def _schema_revision(self) -> str | None:
        with self._engine.connect() as connection:
            connection.execution_options(**{_READ_ONLY: True})
            if not inspect(connection).has_table("alembic_version"):
                return None
            version: str | None = connection.scalar(text("SELECT version_num FROM alembic_version"))
            return version

    def _upgrade(self) -> None:
        try:
            revision = self._schema_revision()
        except (exc.DBAPIError, exc.TimeoutError) as error:
            raise self._fail(error) from error
        if revision == SCHEMA_REVISION:
            return
        if revision is not None and revision not in known_revisions():
            # Refused before Alembic runs: nothing is written to a database this code cannot read.
            raise StoreError(
                f"the database at {self._url} is at schema revision {revision}, newer than this "
                f"gpuplan's {head_revision()}; nothing was written. "
                "A database written by a newer gpuplan needs that version."
            )
        from alembic import command
        from alembic.util import CommandError

        try:
            with self._engine.connect() as connection, connection.begin():
                if self.dialect == "postgresql":
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": _UPGRADE_LOCK}
                    )
                command.upgrade(alembic_config(connection), "head")
        except (exc.DBAPIError, exc.TimeoutError) as error:
            raise self._fail(error) from error
        except CommandError as error:
            raise StoreError(
                f"cannot upgrade the schema of {self._url} to {head_revision()}: {error}. "
                "A database written by a newer gpuplan needs that version."
            ) from error

    def close(self) -> None:
        self._engine.dispose()
