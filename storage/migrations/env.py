"""Alembic's environment for gpuplan's schema, run by ``storage.sql.SqlStore.open``.

There is no alembic.ini: ``storage.sql.alembic_config`` builds the configuration in
code and hands over the store's own connection, already inside the transaction (and,
on PostgreSQL, under the advisory lock) that makes the upgrade all-or-nothing.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from storage.tables import Base

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError(
        "gpuplan's migrations run on a connection: use storage.sql.alembic_config(connection), "
        "not the alembic command line without one"
    )


def _ours(name: str | None, type_: str, _parents: object) -> bool:
    # Autogenerate leaves alone what others keep in the database (APScheduler's job table).
    return type_ != "table" or name in Base.metadata.tables


context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    include_name=_ours,
    render_as_batch=True,  # SQLite alters a table by copying it; batch mode does that
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
