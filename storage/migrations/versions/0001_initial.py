"""The initial schema: cluster, apps and profiles, jobs and their history, traffic, plan runs and commits.

Revision ID: 0001
Revises: (none)

Written out in full rather than importing ``storage.tables``: a migration is a record of
the schema at its revision and must not change when the models do. Timestamps are
``timestamptz`` on PostgreSQL and UTC text on SQLite; enums are plain text columns.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

ID = sa.String(200)


def _time(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _enum(name: str, *values: str) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, length=16)


def upgrade() -> None:
    op.create_table(
        "cluster",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("step_minutes", sa.Integer(), nullable=False),
        sa.Column("horizon_steps", sa.Integer(), nullable=False),
        sa.Column("decay", sa.Float(), nullable=False),
        sa.Column("rt_penalty", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cluster")),
    )
    op.create_table(
        "cluster_down",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=False),
        _time("starts_at"),
        _time("ends_at", nullable=True),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["cluster.id"],
            name=op.f("fk_cluster_down_cluster_id_cluster"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cluster_down")),
    )
    op.create_index(op.f("ix_cluster_down_cluster_id"), "cluster_down", ["cluster_id"])

    op.create_table(
        "apps",
        sa.Column("id", ID, nullable=False),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("swap_cap", sa.Integer(), nullable=False),
        sa.Column("requests_per_gpu_hour", sa.Float(), nullable=False),
        sa.Column("headroom", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_apps")),
    )
    op.create_table(
        "app_profiles",
        sa.Column("app", ID, nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
        _time("through"),
        sa.PrimaryKeyConstraint("app", name=op.f("pk_app_profiles")),
    )

    op.create_table(
        "jobs",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("id", ID, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        _time("submitted_at"),
        sa.Column("state", _enum("jobstate", "queued", "running", "done"), nullable=False),
        sa.Column("estimate_gpus", sa.Integer(), nullable=True),
        sa.Column("estimate_hours_p50", sa.Float(), nullable=True),
        sa.Column("estimate_hours_p90", sa.Float(), nullable=True),
        sa.Column("first_gpu", sa.Integer(), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=True),
        _time("started_at", nullable=True),
        _time("ended_at", nullable=True),
        sa.Column("outcome", _enum("outcome", "completed", "failed", "cancelled"), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_jobs")),
        sa.UniqueConstraint("id", name=op.f("uq_jobs_id")),
    )
    op.create_index(op.f("ix_jobs_state"), "jobs", ["state"])

    op.create_table(
        "job_history",
        sa.Column("job_id", ID, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        _time("submit_time"),
        _time("start_time"),
        _time("end_time"),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("features", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_job_history")),
    )
    op.create_index(op.f("ix_job_history_submit_time"), "job_history", ["submit_time"])

    op.create_table(
        "traffic",
        sa.Column("app", ID, nullable=False),
        _time("hour"),
        sa.Column("requests", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("app", "hour", name=op.f("pk_traffic")),
    )

    op.create_table(
        "plan_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        _time("start"),
        _time("created_at"),
        sa.Column("mode", _enum("runmode", "plan", "review", "submit"), nullable=False),
        sa.Column("policy", sa.String(32), nullable=False),
        sa.Column("inputs_hash", sa.String(128), nullable=False),
        sa.Column("objective", sa.Float(), nullable=False),
        sa.Column("bound", sa.Float(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("scenario", sa.JSON(), nullable=False),
        sa.Column("grid", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("committed", sa.Boolean(), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plan_runs")),
    )
    op.create_index("ix_plan_runs_mode_start", "plan_runs", ["mode", "start"])
    op.create_index(op.f("ix_plan_runs_start"), "plan_runs", ["start"])

    op.create_table(
        "run_forecasts",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("app", ID, nullable=False),
        _time("hour"),
        sa.Column("p50", sa.Float(), nullable=False),
        sa.Column("p90", sa.Float(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["plan_runs.id"], name=op.f("fk_run_forecasts_run_id_plan_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "app", "hour", name=op.f("pk_run_forecasts")),
    )

    # One commit per hour: the primary key is the guard of last resort against a double commit.
    op.create_table(
        "commits",
        _time("hour"),
        sa.Column("run_id", sa.Integer(), nullable=False),
        _time("created_at"),
        sa.ForeignKeyConstraint(["run_id"], ["plan_runs.id"], name=op.f("fk_commits_run_id_plan_runs")),
        sa.PrimaryKeyConstraint("hour", name=op.f("pk_commits")),
    )
    op.create_index(op.f("ix_commits_run_id"), "commits", ["run_id"])
    op.create_table(
        "commit_assignments",
        _time("hour"),
        sa.Column("job", ID, nullable=False),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["hour"], ["commits.hour"], name=op.f("fk_commit_assignments_hour_commits"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("hour", "job", name=op.f("pk_commit_assignments")),
    )

    op.create_table(
        "locks",
        sa.Column("name", ID, nullable=False),
        sa.Column("owner", ID, nullable=False),
        _time("expires_at"),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_locks")),
    )


def downgrade() -> None:
    for table in (
        "locks",
        "commit_assignments",
        "commits",
        "run_forecasts",
        "plan_runs",
        "traffic",
        "job_history",
        "jobs",
        "app_profiles",
        "apps",
        "cluster_down",
        "cluster",
    ):
        op.drop_table(table)  # indexes go with their table
