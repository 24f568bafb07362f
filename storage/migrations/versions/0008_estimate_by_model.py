"""A queued job's hours on each GPU model it may run on (a cluster of several pools).

Revision ID: 0008
Revises: 0007

``jobs.estimate_by_model`` is a JSON object of GPU model -> ``[P50, P90]`` hours, made at
submit on a cluster of several pools (docs/pools.md, "What a job may say"); the plan turns
it into the job's steps on each pool. NULL: the job runs on every pool at
``estimate_hours_p50``/``estimate_hours_p90``, as every job stored before this revision.
Added with a plain ``ADD COLUMN`` on both back ends: SQLite's table is not rebuilt, so the
triggers of 0006 stay.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("estimate_by_model", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "estimate_by_model")
