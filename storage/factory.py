"""Opening a store by URL: the one place that picks the implementation and the default database."""

from __future__ import annotations

from pathlib import Path

from storage.store import Store

DEFAULT_URL = "sqlite:///var/gpuplan.db"


def open_store(url: str = DEFAULT_URL) -> Store:
    """Open the store at ``url`` and upgrade its schema to the newest migration.

    ``sqlite:///var/gpuplan.db`` (the default; the folder is created), ``sqlite://``
    (in memory) or ``postgresql+psycopg://user@host/db``. An unreachable database
    raises :class:`~contract.errors.StoreError`; a malformed URL raises ``InputError`` naming ``--db``.
    """
    from storage.sql import SqlStore  # SQLAlchemy loads only when a store is opened

    store: Store = SqlStore.open(url)
    return store


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite ``url`` names (``sqlite:///PATH``); None for an in-memory or a PostgreSQL
    database. A malformed URL raises ``InputError`` naming ``db``, as :func:`open_store` does."""
    from storage.sql.engine import _sqlite_file, parse_url

    parsed = parse_url(url)
    return _sqlite_file(parsed) if parsed.get_backend_name() == "sqlite" else None
