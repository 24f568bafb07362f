"""The outbox and pruning: a ``deliveries`` table; a commit outlives the run it came from.

Revision ID: 0003
Revises: 0002

- ``deliveries``: each commit's delivery to an executor (state, attempts, last error,
  acknowledged time), written with the commit, so a commit the executor never received is
  re-sent. Commits made before this revision have none: their executors got them then.
- ``commits.run_id`` may be null, and pruning a run sets it so (``ON DELETE SET NULL``):
  ``gpuplan prune`` deletes old runs, never commits.

SQLite changes a foreign key by copying the table (batch mode), and dropping the old
``commits`` table would cascade to its assignments: they are kept aside and put back.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

_KEEP = "_gpuplan_commit_assignments_kept"


def _time(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _commits_run_id(*, nullable: bool, ondelete: str | None) -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.execute(f"CREATE TABLE {_KEEP} AS SELECT * FROM commit_assignments")
    with op.batch_alter_table("commits", recreate="always" if sqlite else "auto") as batch:
        batch.drop_constraint("fk_commits_run_id_plan_runs", type_="foreignkey")
        batch.alter_column("run_id", existing_type=sa.Integer(), nullable=nullable)
        batch.create_foreign_key(
            "fk_commits_run_id_plan_runs", "plan_runs", ["run_id"], ["id"], ondelete=ondelete
        )
    if sqlite:
        op.execute("DELETE FROM commit_assignments")
        op.execute(f"INSERT INTO commit_assignments SELECT * FROM {_KEEP}")
        op.execute(f"DROP TABLE {_KEEP}")


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
