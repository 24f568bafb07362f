"""The outbox and pruning: a ``deliveries`` table; a commit outlives the run it came from.

Revision ID: 0004
Revises: 0003

- ``deliveries``: each commit's delivery to an executor (state, attempts, last error,
  acknowledged time), written with the commit, so a commit the executor never received is
  re-sent. Commits made before this revision have none: their executors got them then.
- ``commits.run_id`` may be null, and pruning a run sets it so (``ON DELETE SET NULL``):
  ``gpuplan prune`` deletes old runs, never commits. ``commit_amendments.run_id`` too.

SQLite changes a foreign key by copying the table (batch mode), and dropping the old
``commits`` table would cascade to its assignments and amendments: they are kept aside and
put back.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

#: The tables that cascade from ``commits``, kept aside while SQLite copies it.
_CHILDREN = ("commit_assignments", "commit_amendments")


def _kept(table: str) -> str:
    return f"_gpuplan_{table}_kept"


def _time(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _run_id(table: str, *, nullable: bool, ondelete: str | None) -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table(table, recreate="always" if sqlite else "auto") as batch:
        batch.drop_constraint(f"fk_{table}_run_id_plan_runs", type_="foreignkey")
        batch.alter_column("run_id", existing_type=sa.Integer(), nullable=nullable)
        batch.create_foreign_key(
            f"fk_{table}_run_id_plan_runs", "plan_runs", ["run_id"], ["id"], ondelete=ondelete
        )


def _commits_run_id(*, nullable: bool, ondelete: str | None) -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        for table in _CHILDREN:
            op.execute(f"CREATE TABLE {_kept(table)} AS SELECT * FROM {table}")
    _run_id("commits", nullable=nullable, ondelete=ondelete)
    if sqlite:
        for table in _CHILDREN:
            op.execute(f"DELETE FROM {table}")
            op.execute(f"INSERT INTO {table} SELECT * FROM {_kept(table)}")
            op.execute(f"DROP TABLE {_kept(table)}")
    # An amendment outlives its run too (it was always nullable: made by hand, or pruned).
    _run_id("commit_amendments", nullable=True, ondelete=ondelete)


def upgrade() -> None:
    _commits_run_id(nullable=True, ondelete="SET NULL")
    op.create_table(
        "deliveries",
        _time("hour"),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("executor", sa.String(64), nullable=False),
        sa.Column(
            "state",
            sa.Enum("pending", "acknowledged", name="deliverystate", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        _time("created_at"),
        _time("acknowledged_at", nullable=True),
        sa.ForeignKeyConstraint(
            ["hour"], ["commits.hour"], name=op.f("fk_deliveries_hour_commits"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("hour", "seq", "executor", name=op.f("pk_deliveries")),
    )
    op.create_index(op.f("ix_deliveries_state"), "deliveries", ["state"])


def downgrade() -> None:
    op.drop_table("deliveries")
    op.execute("DELETE FROM commits WHERE run_id IS NULL")
    _commits_run_id(nullable=False, ondelete=None)
