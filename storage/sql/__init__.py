"""The SQL store: one implementation of :class:`storage.store.Store` for SQLite and PostgreSQL.

Each public method is one transaction on a connection of its own from the pool, so a
store may be shared by threads. Rows become value objects (``contract/records.py``)
before a method returns; database errors become :class:`StoreError`.

SQLite is set up for two processes on one file: write-ahead logging (readers never
wait for the writer), a 30 s busy timeout (a second writer waits instead of failing)
and ``BEGIN IMMEDIATE`` for every transaction that may write, so a transaction takes
the write lock before it reads what it decides on (a deferred one could read, lose
the race to upgrade its lock and fail). Read-only methods use a deferred ``BEGIN``.
"""

from __future__ import annotations

from datetime import timedelta

from contract.errors import StoreError
from storage.sql.cluster import ClusterStore
from storage.sql.engine import (
    DEFAULT_LOCK_TTL,
    EXPECTED_URL,
    SQLITE_BUSY_TIMEOUT_S,
    _create_engine,
    _sqlite_file,
    alembic_config,
    head_revision,
    parse_url,
)
from storage.sql.jobs import JobStore
from storage.sql.locks import LockStore
from storage.sql.outbox import OutboxStore
from storage.sql.tokens import TokenStore
from storage.sql.traffic import TrafficStore
from storage.store import Store

__all__ = [
    "DEFAULT_LOCK_TTL",
    "EXPECTED_URL",
    "SQLITE_BUSY_TIMEOUT_S",
    "SqlStore",
    "alembic_config",
    "head_revision",
    "parse_url",
]


class SqlStore(LockStore, ClusterStore, JobStore, TrafficStore, OutboxStore, TokenStore, Store):
    """The store on SQLite or PostgreSQL, one aggregate per module; open it with :meth:`open`."""

    @classmethod
    def open(cls, url: str, *, lock_ttl: timedelta = DEFAULT_LOCK_TTL) -> SqlStore:
        """Open the database at ``url`` (creating a SQLite file's folder) and upgrade its schema."""
        parsed = parse_url(url)
        path = _sqlite_file(parsed)
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise StoreError(
                    f"cannot create the folder of the SQLite database {path}: {error}"
                ) from error
        store = cls(_create_engine(parsed), lock_ttl=lock_ttl)
        try:
            store._upgrade()
        except BaseException:
            store.close()
            raise
        return store
