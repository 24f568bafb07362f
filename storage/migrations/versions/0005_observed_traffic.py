"""The hour in progress: the requests each app served so far in it, and over how many minutes.

Revision ID: 0005
Revises: 0004

``traffic_observed`` holds one row per app, replaced by each newer observation; the
finished hours stay in ``traffic``, which a partial count never enters.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "traffic_observed",
        sa.Column("app", sa.String(200), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("requests", sa.Float(), nullable=False),
        sa.Column("minutes", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("app", name=op.f("pk_traffic_observed")),
    )


def downgrade() -> None:
    op.drop_table("traffic_observed")
