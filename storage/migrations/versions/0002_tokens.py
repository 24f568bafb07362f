"""API tokens and dashboard sessions; each job records the team that submitted it.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def _time(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("team", sa.String(64), nullable=False),
        sa.Column("scopes", sa.String(64), nullable=False),
        sa.Column("max_priority", sa.Float(), nullable=True),
        _time("created_at"),
        _time("revoked_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("secret_sha256", name=op.f("uq_api_tokens_secret_sha256")),
    )
    op.create_table(
        "web_sessions",
        sa.Column("id_sha256", sa.String(64), nullable=False),
        sa.Column("token_id", sa.String(32), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        _time("created_at"),
        _time("expires_at"),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_tokens.id"],
            name=op.f("fk_web_sessions_token_id_api_tokens"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id_sha256", name=op.f("pk_web_sessions")),
    )
    op.create_index(op.f("ix_web_sessions_token_id"), "web_sessions", ["token_id"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("team", sa.String(64), nullable=True))
        batch.create_index(batch.f("ix_jobs_team"), ["team"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index(batch.f("ix_jobs_team"))
        batch.drop_column("team")
    op.drop_index(op.f("ix_web_sessions_token_id"), table_name="web_sessions")
    op.drop_table("web_sessions")
    op.drop_table("api_tokens")
