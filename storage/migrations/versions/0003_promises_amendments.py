"""Promises and amendments: a job's promised start, and additions to a committed hour.

Revision ID: 0003
Revises: 0002

``jobs.promised_start`` is the start the plan gave at submit (NULL: no promise).
``commit_amendments`` holds the additions later cycles of an hour make to its commit,
numbered within the hour; nothing in ``commits`` or ``commit_assignments`` changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("promised_start", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "commit_amendments",
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("assignments", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["hour"], ["commits.hour"], name=op.f("fk_commit_amendments_hour_commits"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["plan_runs.id"], name=op.f("fk_commit_amendments_run_id_plan_runs")
        ),
        sa.PrimaryKeyConstraint("hour", "seq", name=op.f("pk_commit_amendments")),
    )
    op.create_index(op.f("ix_commit_amendments_run_id"), "commit_amendments", ["run_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_commit_amendments_run_id"), table_name="commit_amendments")
    op.drop_table("commit_amendments")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("promised_start")
