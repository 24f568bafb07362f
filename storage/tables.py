"""The tables, as SQLAlchemy 2 typed ORM classes. Nothing outside ``storage/`` sees a row.

The Alembic migrations in ``storage/migrations/versions`` create exactly these tables
(a contract test compares the migrated schema with this metadata on both back ends).
Every timestamp is stored in UTC: PostgreSQL as ``timestamptz``, SQLite as naive
ISO text, which :class:`UtcDateTime` turns back into timezone-aware values.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from contract.records import DeliveryState, JobState, Outcome, RunMode

# Named constraints, so that later migrations (batch mode on SQLite) can address them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# The newest migration in storage/migrations/versions (a test keeps the two equal): a
# database already there opens without loading Alembic, which every command would pay for.
SCHEMA_REVISION = "0008"
ID_LENGTH = 200  # job and app ids; the scenario format puts no limit, a column must


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on both back ends; a naive one is refused.

    SQLite has no time zones, so values go in as naive UTC and come back marked UTC;
    PostgreSQL returns them in the session's zone, converted back to UTC here.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"storage takes timezone-aware datetimes; got the naive {value.isoformat()}")
        utc = value.astimezone(UTC)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _values(enum: type[StrEnum]) -> list[str]:
    return [member.value for member in enum]


def _enum(enum: type[StrEnum], length: int = 16) -> Enum:
    # Stored as the value text (no native PostgreSQL enum type, so a new member needs no DDL).
    return Enum(enum, native_enum=False, values_callable=_values, length=length, validate_strings=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 (SQLAlchemy reads this class attribute as is)
        datetime: UtcDateTime(),
        dict[str, Any]: JSON(),
        str: String(ID_LENGTH),
    }


def table_of(row: type[Base]) -> Table:
    """A row class's Table, for plain INSERTs and reads without ORM objects (``__table__`` is
    typed as any FromClause)."""
    table = row.__table__
    assert isinstance(table, Table)
    return table


class ClusterRow(Base):
    """The one cluster (``id`` is always 1)."""

    __tablename__ = "cluster"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    gpus: Mapped[int]
    step_minutes: Mapped[int]
    horizon_steps: Mapped[int]
    decay: Mapped[float] = mapped_column(Float)
    rt_penalty: Mapped[float] = mapped_column(Float)


class DownWindowRow(Base):
    __tablename__ = "cluster_down"

    id: Mapped[int] = mapped_column(primary_key=True)
    cluster_id: Mapped[int] = mapped_column(ForeignKey("cluster.id", ondelete="CASCADE"), index=True)
    gpu: Mapped[int]
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime | None]


class GpuMapRow(Base):
    """One node of the executor's last reading of its partition (migration 0007): its GPUs are
    ids ``first_gpu`` to ``first_gpu + gpus - 1``, in the order of ``position``."""

    __tablename__ = "gpu_map"

    position: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    node: Mapped[str]
    first_gpu: Mapped[int]
    gpus: Mapped[int]
    partition: Mapped[str]
    read_at: Mapped[datetime]


class AppRow(Base):
    __tablename__ = "apps"

    id: Mapped[str] = mapped_column(primary_key=True)
    priority: Mapped[float] = mapped_column(Float)
    swap_cap: Mapped[int]
    requests_per_gpu_hour: Mapped[float] = mapped_column(Float)
    headroom: Mapped[float] = mapped_column(Float)


class ProfileRow(Base):
    """An app's demand profile (a JSON document of its fitted numbers, never a pickle) and the
    last traffic hour it has seen."""

    __tablename__ = "app_profiles"

    app: Mapped[str] = mapped_column(primary_key=True)
    blob: Mapped[bytes] = mapped_column(LargeBinary)
    through: Mapped[datetime]


class JobRow(Base):
    """A submitted batch job. ``seq`` keeps submission order among equal timestamps."""

    __tablename__ = "jobs"

    seq: Mapped[int] = mapped_column(primary_key=True)
    id: Mapped[str] = mapped_column(unique=True)
    kind: Mapped[str] = mapped_column(String(32))
    priority: Mapped[float] = mapped_column(Float)
    spec: Mapped[dict[str, Any]]
    submitted_at: Mapped[datetime]
    state: Mapped[JobState] = mapped_column(_enum(JobState), index=True)
    estimate_gpus: Mapped[int | None]
    estimate_hours_p50: Mapped[float | None] = mapped_column(Float)
    estimate_hours_p90: Mapped[float | None] = mapped_column(Float)
    #: GPU model -> [P50, P90] hours (migration 0008); NULL: every pool at the hours above.
    estimate_by_model: Mapped[dict[str, Any] | None]
    first_gpu: Mapped[int | None]
    gpus: Mapped[int | None]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    outcome: Mapped[Outcome | None] = mapped_column(_enum(Outcome))
    team: Mapped[str | None] = mapped_column(String(64), index=True)
    promised_start: Mapped[datetime | None]


class JobCountsRow(Base):
    """The jobs counted, kept by the database itself: one row (``id`` 1) that triggers on
    ``jobs`` move in the transaction of every insert, delete and change of state (migration
    0006), so that :meth:`~storage.store.Store.marks` reads three numbers instead of counting
    a table that keeps every job ever submitted."""

    __tablename__ = "job_counts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    jobs: Mapped[int]
    running: Mapped[int]
    done: Mapped[int]


class HistoryRow(Base):
    """One finished job in the forecasters' history schema (training_data/README.md):
    the common columns as columns, the job's features by name in ``features``."""

    __tablename__ = "job_history"

    job_id: Mapped[str] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    submit_time: Mapped[datetime] = mapped_column(index=True)
    start_time: Mapped[datetime]
    end_time: Mapped[datetime]
    gpus: Mapped[int]
    outcome: Mapped[str] = mapped_column(String(16))
    features: Mapped[dict[str, Any]]


#: The history's common columns (the job history schema's, training_data/README.md), in its order.
HISTORY_COMMON = ("job_id", "kind", "submit_time", "start_time", "end_time", "gpus", "outcome")


class TrafficRow(Base):
    """Requests one app served in one wall-clock hour."""

    __tablename__ = "traffic"

    app: Mapped[str] = mapped_column(primary_key=True)
    hour: Mapped[datetime] = mapped_column(primary_key=True)
    requests: Mapped[float] = mapped_column(Float)


class ObservedTrafficRow(Base):
    """The requests an app served so far in the hour in progress (one row per app, the latest)."""

    __tablename__ = "traffic_observed"

    app: Mapped[str] = mapped_column(primary_key=True)
    hour: Mapped[datetime]
    requests: Mapped[float] = mapped_column(Float)
    minutes: Mapped[float] = mapped_column(Float)


class PlanRunRow(Base):
    """One planning run with its whole grid; ``scenario`` and ``grid`` in the contract's formats."""

    __tablename__ = "plan_runs"
    __table_args__ = (Index("ix_plan_runs_mode_start", "mode", "start"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    start: Mapped[datetime] = mapped_column(index=True)
    created_at: Mapped[datetime]
    mode: Mapped[RunMode] = mapped_column(_enum(RunMode))
    policy: Mapped[str] = mapped_column(String(32))
    inputs_hash: Mapped[str] = mapped_column(String(128))
    objective: Mapped[float] = mapped_column(Float)
    bound: Mapped[float | None] = mapped_column(Float)
    latency_ms: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(32))
    scenario: Mapped[dict[str, Any]]
    grid: Mapped[list[list[str | None]]] = mapped_column(JSON)
    metrics: Mapped[dict[str, Any]]
    committed: Mapped[bool]
    extra: Mapped[dict[str, Any]]


class RunForecastRow(Base):
    """One hour of one app's demand forecast that a run planned with."""

    __tablename__ = "run_forecasts"

    run_id: Mapped[int] = mapped_column(ForeignKey("plan_runs.id", ondelete="CASCADE"), primary_key=True)
    app: Mapped[str] = mapped_column(primary_key=True)
    hour: Mapped[datetime] = mapped_column(primary_key=True)
    p50: Mapped[float] = mapped_column(Float)
    p90: Mapped[float] = mapped_column(Float)
    gpus: Mapped[int]


class CommitRow(Base):
    """The committed allocation of one wall-clock hour: the primary key makes it one per hour.

    ``run_id`` is the run it came from; pruning that run leaves the commit with none."""

    __tablename__ = "commits"

    hour: Mapped[datetime] = mapped_column(primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("plan_runs.id", ondelete="SET NULL"), index=True)
    created_at: Mapped[datetime]


class CommitAssignmentRow(Base):
    """A job (batch or real-time) and its GPU ids in one committed hour."""

    __tablename__ = "commit_assignments"

    hour: Mapped[datetime] = mapped_column(ForeignKey("commits.hour", ondelete="CASCADE"), primary_key=True)
    job: Mapped[str] = mapped_column(primary_key=True)
    gpus: Mapped[list[int]] = mapped_column(JSON)


class AmendmentRow(Base):
    """Additions to a committed hour, numbered within the hour (``seq`` 1, 2, ...)."""

    __tablename__ = "commit_amendments"

    hour: Mapped[datetime] = mapped_column(ForeignKey("commits.hour", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("plan_runs.id", ondelete="SET NULL"), index=True)
    created_at: Mapped[datetime]
    #: ``[{"job": id, "gpus": [ids]}, ...]``: the additions.
    assignments: Mapped[list[dict[str, Any]]] = mapped_column(JSON)


class DeliveryRow(Base):
    """The outbox: one commit's delivery to one executor, re-sent until it is acknowledged.

    Written in the commit's own transaction, so no commit is ever without its delivery."""

    __tablename__ = "deliveries"

    hour: Mapped[datetime] = mapped_column(ForeignKey("commits.hour", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(primary_key=True)
    executor: Mapped[str] = mapped_column(String(64), primary_key=True)
    state: Mapped[DeliveryState] = mapped_column(_enum(DeliveryState, 16), index=True)
    attempts: Mapped[int]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    acknowledged_at: Mapped[datetime | None]


class LockRow(Base):
    """SQLite's cycle lock: who holds it and until when (PostgreSQL uses advisory locks)."""

    __tablename__ = "locks"

    name: Mapped[str] = mapped_column(primary_key=True)
    owner: Mapped[str]
    expires_at: Mapped[datetime]


class TokenRow(Base):
    """An API token: the SHA-256 of its secret (unique), its team, scopes and priority cap."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    team: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[str] = mapped_column(String(64))  # comma-separated Scope values
    max_priority: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class WebSessionRow(Base):
    """A dashboard session, kept server-side: the SHA-256 of the cookie, never the cookie."""

    __tablename__ = "web_sessions"

    id_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True
    )
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
