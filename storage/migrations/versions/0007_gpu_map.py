"""The executor's last reading of its partition: which node holds which GPU ids.

Revision ID: 0007
Revises: 0006

``gpu_map`` holds one row per node of the partition, in the order of ``position``: node
``node``'s GPU ``IDX`` (Slurm's index) is GPU id ``first_gpu + IDX``. The daemon replaces the
rows whenever the reading changes; ``gpuplan status`` shows them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "gpu_map",
        sa.Column("position", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("first_gpu", sa.Integer(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("partition", sa.String(200), nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("position", name=op.f("pk_gpu_map")),
    )


def downgrade() -> None:
    op.drop_table("gpu_map")
