"""Value objects that cross the storage edge. ORM rows never leave ``storage/``.

Every time is a timezone-aware UTC ``datetime``; an *hour* is one truncated to the
hour (``minute == second == 0``). GPU sets are tuples of GPU ids, ascending.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from contract.scenario import JobKind


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


class Outcome(StrEnum):
    """How a finished job ended (the job history's ``outcome`` column)."""

    OK = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RunMode(StrEnum):
    """``plan``: the fast-mode cycle that commits; ``review``: a time-limited full-mode plan
    stored beside it; ``submit``: the hot-path replan after a submission."""

    PLAN = "plan"
    REVIEW = "review"
    SUBMIT = "submit"


@dataclass(frozen=True, slots=True)
class DownWindowRecord:
    """GPU ``gpu`` is down from ``start`` (inclusive) to ``end`` (exclusive; None: until further notice)."""

    gpu: int
    start: datetime
    end: datetime | None = None


@dataclass(frozen=True, slots=True)
class Cluster:
    gpus: int
    step_minutes: int = 60
    horizon_steps: int = 24
    decay: float = 0.95
    rt_penalty: float = 8.0
    down: tuple[DownWindowRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuMapReading:
    """The executor's last reading of its partition: node ``nodes[k]``'s GPU ``IDX`` is GPU id
    ``k * gpus_per_node + IDX`` (the map ``gpuplan status`` shows to read Slurm's ``IDX``)."""

    partition: str
    nodes: tuple[str, ...]
    gpus_per_node: int
    read_at: datetime


@dataclass(frozen=True, slots=True)
class App:
    """A real-time inference app: its capacity per GPU, churn limit and priority."""

    id: str
    priority: float
    swap_cap: int
    requests_per_gpu_hour: float
    headroom: float = 0.0


@dataclass(frozen=True, slots=True)
class JobEstimate:
    """A batch job's forecast as the plan uses it (GPUs, P50 and P90 hours).

    On a cluster of several pools, ``by_model`` holds its P50 and P90 hours on each GPU model
    it may run on (the model's datasheet name, or a pool's own ``gpu_model`` where gpuplan
    does not know it); it runs on pools of those models only, and ``hours_p50``/``hours_p90``
    are its hours on the first of them in the cluster's order. None: every pool, at those hours.
    """

    gpus: int
    hours_p50: float
    hours_p90: float
    by_model: Mapping[str, tuple[float, float]] | None = field(default=None, hash=False)

    def hours_on(self, model: str) -> tuple[float, float] | None:
        """(P50, P90) hours on ``model``; None where the job may not run on it."""
        if self.by_model is None:
            return self.hours_p50, self.hours_p90
        return self.by_model.get(model)


@dataclass(frozen=True, slots=True)
class Job:
    """A submitted batch job and where it is in its life."""

    id: str
    kind: JobKind  # a batch kind
    priority: float
    spec: dict[str, Any]  # the submitted spec as given (features by name)
    submitted_at: datetime
    state: JobState = JobState.QUEUED
    estimate: JobEstimate | None = None
    first_gpu: int | None = None  # while running / once ran
    gpus: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: Outcome | None = None
    #: The start the plan gave at submit: a promise the planner weighs (None: none was given).
    promised_start: datetime | None = None
    team: str | None = None  # the submitting token's team (None: from the command line)


@dataclass(frozen=True, slots=True)
class TrafficHour:
    app: str
    hour: datetime
    requests: float


@dataclass(frozen=True, slots=True)
class ObservedTraffic:
    """Requests an app served in the first ``minutes`` of ``hour``: the hour in progress."""

    app: str
    hour: datetime
    requests: float
    minutes: float

    def hourly_rate(self) -> float:
        """The hour's requests at the rate seen so far."""
        return self.requests * 60.0 / self.minutes


@dataclass(frozen=True, slots=True)
class AppForecast:
    """One hour of one app's demand forecast that a run planned with."""

    app: str
    hour: datetime
    p50: float
    p90: float
    gpus: int


@dataclass(frozen=True, slots=True)
class Assignment:
    """A job and the GPUs it holds in one committed hour."""

    job: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Commit:
    """The allocation of one wall-clock hour, committed once.

    A commit is known by its hour and ``seq``: ``seq`` 0 is the hour's commit, and the
    amendments that a later version may make within the hour will count up from 1. An
    executor keys what it has done by this pair (:attr:`key`), so a resent commit is a no-op.
    ``run_id`` is the run it came from (None once ``gpuplan prune`` has removed that run).
    """

    hour: datetime
    run_id: int | None
    assignments: tuple[Assignment, ...]
    seq: int = 0

    @property
    def key(self) -> str:
        """The commit's id in an executor's records: ``<hour ISO>#<seq>``."""
        return delivery_key(self.hour, self.seq)


def delivery_key(hour: datetime, seq: int) -> str:
    """What an executor knows a commit (``seq`` 0) or an amendment (``seq`` >= 1) by."""
    return f"{hour.isoformat()}#{seq}"


class DeliveryState(StrEnum):
    """Where a commit stands with one executor (the outbox, ``storage`` table ``deliveries``)."""

    PENDING = "pending"
    ACKNOWLEDGED = "acknowledged"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One commit's or amendment's delivery to one executor: sent until the executor
    acknowledges it."""

    item: Commit | Amendment
    executor: str
    state: DeliveryState
    attempts: int
    last_error: str | None
    acknowledged_at: datetime | None


@dataclass(frozen=True, slots=True)
class Amendment:
    """Additions to an hour already committed, made later in that hour (``seq`` 1, 2, ...).

    Additions only: GPUs for a job the hour's commit (or an earlier amendment) holds, or a
    queued batch job's block. Nothing committed is moved or removed, so the hour's
    allocation is its commit with every amendment's assignments added.
    """

    hour: datetime
    seq: int
    made_at: datetime
    run_id: int | None
    assignments: tuple[Assignment, ...]

    @property
    def key(self) -> str:
        """The amendment's id in an executor's records: ``<hour ISO>#<seq>``, as a commit's."""
        return delivery_key(self.hour, self.seq)


@dataclass(frozen=True)
class PlanRun:
    """One planning run: its inputs (a contract scenario), its grid and how it scored.

    ``start`` is the wall-clock hour of step 0. ``scenario`` and ``grid`` are in the
    formats of CONTRACT.md, so an exported run replays offline.
    """

    start: datetime
    created_at: datetime
    mode: RunMode
    policy: str
    inputs_hash: str
    objective: float
    bound: float | None
    latency_ms: float
    status: str
    scenario: dict[str, Any]
    grid: list[list[str | None]]
    metrics: dict[str, float]
    forecasts: tuple[AppForecast, ...] = ()
    id: int | None = None
    committed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class Scope(StrEnum):
    """What an API token may do: ``read`` the GETs and the dashboard, ``submit`` and cancel the
    team's own jobs, ``admin`` traffic, any job and tokens."""

    READ = "read"
    SUBMIT = "submit"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A bearer token as stored: only the SHA-256 of its secret, never the secret."""

    id: str
    secret_sha256: str
    team: str
    scopes: frozenset[Scope]
    max_priority: float | None
    created_at: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class WebSession:
    """A dashboard sign-in: the SHA-256 of its cookie, the token it was opened with, its CSRF token."""

    id_sha256: str
    token_id: str
    csrf: str
    created_at: datetime
    expires_at: datetime
