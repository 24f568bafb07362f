"""The store interface: what the use cases read and write, in value objects.

One implementation, :class:`storage.sql.SqlStore`, serves SQLite (a file by default,
``sqlite://`` in memory for throwaway stores) and PostgreSQL. :func:`storage.factory.open_store`
opens one by URL and upgrades its schema (Alembic) before anything else happens.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.records import (
    Amendment,
    ApiToken,
    App,
    Cluster,
    Commit,
    Delivery,
    GpuMapReading,
    Job,
    JobEstimate,
    JobState,
    ObservedTraffic,
    Outcome,
    PlanRun,
    TrafficHour,
    WebSession,
)

if TYPE_CHECKING:
    import pandas as pd


class EncodedJSON(dict[str, Any]):
    """A JSON object and the text it is stored as, encoded once by whoever made it (a submit
    run's scenario, whose inputs' hash comes from the same encoding): the store writes the
    text as it is instead of encoding the object again."""

    def __init__(self, value: Mapping[str, Any], text: str) -> None:
        super().__init__(value)
        self.text = text


def marks_after_submits(marks: tuple[int, ...], run_id: int, jobs: int) -> tuple[int, ...]:
    """The marks (:meth:`Store.marks`) after :meth:`Store.record_submits` stored ``jobs`` jobs
    and the run ``run_id`` on a store at ``marks``, when nothing else moved them."""
    return (run_id, marks[1] + jobs, *marks[2:])


def revoked_tokens(marks: tuple[int, ...]) -> int:
    """How many tokens were revoked, as of ``marks`` (:meth:`Store.marks`: the last count)."""
    return marks[-1]


class Store(abc.ABC):
    """Everything the service persists. Each method is one transaction unless it says otherwise."""

    # -- lifecycle -----------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def url(self) -> str:
        """The database's URL, its password hidden."""

    @property
    @abc.abstractmethod
    def dialect(self) -> str:
        """The back end: ``sqlite`` or ``postgresql``."""

    @property
    @abc.abstractmethod
    def file(self) -> Path | None:
        """The database's file (SQLite); None in memory and on a server."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every connection (the contract tests check none is left open)."""

    @abc.abstractmethod
    def cycle_lock(self, name: str) -> AbstractContextManager[bool]:
        """Hold the named cross-process lock for a cycle; yields False when another holds it.

        PostgreSQL: a session advisory lock (``pg_try_advisory_lock``). SQLite: a row in a
        locks table taken inside ``BEGIN IMMEDIATE`` with an owner and an expiry, so a
        process killed with -9 does not hold it forever.
        """

    @abc.abstractmethod
    def leadership(self, owner: str) -> AbstractContextManager[bool]:
        """Try to become the one daemon that plans and acts, and stay it while the context is
        open; yields False when another leads.

        PostgreSQL: a session-level advisory lock on a connection of its own, which the server
        frees when that connection ends, however the process ends; ``owner`` is recorded for
        :meth:`leader`. SQLite: always True (daemons on one file share the work, one cycle at
        a time under :meth:`cycle_lock`).
        """

    @abc.abstractmethod
    def still_leads(self) -> bool:
        """Whether this store's :meth:`leadership` still holds: False once its lock is gone
        (the server ended the lock's connection, the network parted), so a daemon that lost
        the lead stops acting. SQLite: always True."""

    @abc.abstractmethod
    def leader(self) -> str | None:
        """The ``owner`` of the leading daemon, while one leads (always None on SQLite)."""

    # -- cluster and apps ----------------------------------------------------------------
    @abc.abstractmethod
    def cluster(self) -> Cluster | None: ...

    @abc.abstractmethod
    def save_cluster(self, cluster: Cluster) -> None:
        """Replace the cluster row and its down windows."""

    @abc.abstractmethod
    def apps(self) -> list[App]: ...

    @abc.abstractmethod
    def save_app(self, app: App) -> None:
        """Insert or replace by id."""

    @abc.abstractmethod
    def profile(self, app: str) -> bytes | None:
        """The app's demand profile as saved (a JSON document of its fitted numbers), if any."""

    @abc.abstractmethod
    def save_profile(self, app: str, blob: bytes, *, through: datetime) -> None:
        """Replace the app's profile; ``through`` is the last traffic hour it has seen."""

    @abc.abstractmethod
    def profile_through(self, app: str) -> datetime | None: ...

    @abc.abstractmethod
    def gpu_map(self) -> GpuMapReading | None:
        """The executor's last stored reading of its partition; None before any."""

    @abc.abstractmethod
    def save_gpu_map(self, reading: GpuMapReading) -> None:
        """Replace the stored reading of the partition; :meth:`marks` move when its ``read_at``
        differs from the stored one's by a second or more (a reading is stored when it changed,
        stamped with the moment it was read)."""

    # -- jobs ----------------------------------------------------------------------------
    @abc.abstractmethod
    def add_job(self, job: Job) -> None:
        """Insert a new job; a duplicate id raises ``contract.errors.InputError`` naming ``id``."""

    @abc.abstractmethod
    def add_jobs(self, jobs: Sequence[Job]) -> None:
        """Insert new jobs in one transaction (a batch of submits): all of them, or, when an id
        is taken or repeated, none (``InputError`` naming ``id`` and the first such id)."""

    @abc.abstractmethod
    def job(self, job_id: str) -> Job | None: ...

    @abc.abstractmethod
    def jobs(
        self, states: Sequence[JobState] | None = None, *, submitted_since: datetime | None = None
    ) -> list[Job]:
        """Jobs in the given states (all when None), in submission order; with
        ``submitted_since``, only those submitted at or after it."""

    @abc.abstractmethod
    def set_promises(self, promises: Mapping[str, datetime]) -> None:
        """Keep each ``promised_start`` (an hour) as its job's promise, in one transaction; a job
        keeps its first promise."""

    @abc.abstractmethod
    def marks(self) -> tuple[int, ...]:
        """A cheap token of the stored state that moves whenever a run, a job, a job's state,
        a commit, an amendment or a GPU map is stored, or a token revoked (the latest run id,
        the jobs and the running and done ones counted, the commits and amendments counted,
        the GPU map's ``read_at`` in whole seconds, the revoked tokens counted; the last is
        last): what a cache of reads, or a warm start from a stored plan, compares to know
        that nothing moved under it, and a cache of tokens to know that none it holds was
        revoked."""

    @abc.abstractmethod
    def set_estimate(self, job_id: str, estimate: JobEstimate) -> None: ...

    @abc.abstractmethod
    def set_started(self, job_id: str, at: datetime) -> None:
        """A running job's start as its executor reports it (Slurm's, a moment after the commit
        or amendment that released it); ``InputError`` for a job that is not running."""

    @abc.abstractmethod
    def requeue_job(self, job_id: str) -> Job:
        """A running job back to the queue, holding no GPUs (it did not start where it was
        committed); ``InputError`` for a job that is not running."""

    @abc.abstractmethod
    def finish_job(
        self, job_id: str, at: datetime, outcome: Outcome, history: Callable[[Job], pd.DataFrame | None]
    ) -> Job:
        """Mark a job done at ``at`` and append ``history(job)``'s rows to the history, in one transaction.

        ``history`` sees the stored job inside the transaction and holds the rules (which
        jobs may end so, what their history row is); whatever it raises leaves the job and
        the history as they were. Raises ``InputError`` naming ``job_id`` for an unknown job."""

    # -- job history (the forecasters' documented schema, training_data/README.md) -------
    @abc.abstractmethod
    def history(self) -> pd.DataFrame:
        """The whole job history: the common columns, then each row's features by name."""

    @abc.abstractmethod
    def append_history(self, rows: pd.DataFrame) -> int:
        """Append rows (already validated); returns how many were added."""

    # -- traffic -------------------------------------------------------------------------
    @abc.abstractmethod
    def add_traffic(self, rows: Sequence[TrafficHour]) -> None:
        """Insert or replace hourly request counts."""

    @abc.abstractmethod
    def traffic(
        self, app: str, since: datetime | None = None, until: datetime | None = None
    ) -> list[TrafficHour]:
        """Hours ``since <= hour < until``, ascending."""

    @abc.abstractmethod
    def observe_traffic(self, rows: Sequence[ObservedTraffic]) -> None:
        """Insert or replace each app's count of the hour in progress (one per app, the last wins)."""

    @abc.abstractmethod
    def observed_traffic(self, hour: datetime) -> list[ObservedTraffic]:
        """The apps' counts observed in ``hour`` (an app last seen in another hour has none), by app."""

    # -- plan runs and commits -----------------------------------------------------------
    @abc.abstractmethod
    def record_submits(
        self, jobs: Sequence[Job], run: PlanRun, *, forecasts_of: PlanRun | None = None
    ) -> PlanRun:
        """Queue ``jobs`` (their promises set) and store ``run``, the plan that places them
        (never committed), in one transaction: all of it or, when an id is taken or
        repeated, none (``InputError`` as :meth:`add_jobs`). The marks then move as one
        (:meth:`marks`: the latest run id to the run's, the jobs counted by ``len(jobs)``).
        ``forecasts_of``: a stored run the plan was made from; when ``run``'s forecasts are
        its, they are stored as a copy of its rows."""

    @abc.abstractmethod
    def record_run(
        self, run: PlanRun, commit: Commit | None = None, *, deliver_to: str | None = None
    ) -> PlanRun:
        """Store a run with its grid and forecasts and, if given, commit its hour: one transaction.

        The commit is written only when no commit exists for ``commit.hour`` and no later
        hour is committed (checked inside the transaction, with a unique key on the hour as
        the last guard): commits only move forward. Then the jobs it starts move from queued
        to running on their GPUs and, with ``deliver_to``, the commit's delivery to that
        executor is put in the outbox, pending. Returns the stored run with its ``id`` and
        ``committed`` set.
        """

    @abc.abstractmethod
    def run(self, run_id: int | None = None) -> PlanRun | None:
        """A run by id, or the latest (by id) when None."""

    @abc.abstractmethod
    def runs(
        self, *, mode: str | None = None, start: datetime | None = None, limit: int = 50
    ) -> list[PlanRun]:
        """Newest first, without grids' heavy parts trimmed (whole runs)."""

    @abc.abstractmethod
    def commit(self, hour: datetime) -> Commit | None: ...

    @abc.abstractmethod
    def commits(self, since: datetime | None = None, until: datetime | None = None) -> list[Commit]:
        """Committed hours ``since <= hour < until``, ascending."""

    @abc.abstractmethod
    def last_commit(self, before: datetime | None = None) -> Commit | None:
        """The latest commit with ``hour < before`` (any when None)."""

    @abc.abstractmethod
    def record_amendment(self, amendment: Amendment, *, deliver_to: str | None = None) -> Amendment:
        """Store additions to a committed hour as its next amendment, one transaction.

        ``amendment.seq`` is ignored: the store numbers the hour's amendments 1, 2, ...
        The queued jobs it places move to running, started at ``made_at``, and, with
        ``deliver_to``, its delivery to that executor is put in the outbox, pending, after
        the hour's commit. An hour with no commit is refused. Legality against the hour is
        the caller's (``gpuplan.app.cycle.amend``).
        """

    @abc.abstractmethod
    def amendments(self, since: datetime | None = None, until: datetime | None = None) -> list[Amendment]:
        """Amendments of the hours ``since <= hour < until``, by hour then ``seq``."""

    @abc.abstractmethod
    def prune_runs(self, before: datetime) -> int:
        """Delete the runs created before ``before`` with their forecasts; returns how many.

        Commits and the job history stay: a commit of a pruned run keeps its hour and
        assignments, and its ``run_id`` becomes None."""

    # -- the outbox: deliveries of commits to executors ----------------------------------
    @abc.abstractmethod
    def pending_deliveries(self, executor: str) -> list[Delivery]:
        """The commits and amendments ``executor`` has not acknowledged yet, by hour and seq."""

    @abc.abstractmethod
    def deliveries(self, since: datetime | None = None) -> list[Delivery]:
        """Every delivery of commits and amendments from hour ``since`` on, by hour, seq and executor."""

    @abc.abstractmethod
    def record_delivery(
        self, delivery: Delivery, *, at: datetime, acknowledged: bool, error: str | None = None
    ) -> Delivery:
        """Count one attempt of ``delivery``: acknowledged at ``at``, or failed with ``error``."""

    # -- API tokens and dashboard sessions (hashes only) ---------------------------------
    @abc.abstractmethod
    def add_token(self, token: ApiToken) -> None: ...

    @abc.abstractmethod
    def tokens(self) -> list[ApiToken]:
        """Every token, revoked ones too, oldest first."""

    @abc.abstractmethod
    def token_by_hash(self, secret_sha256: str) -> ApiToken | None: ...

    @abc.abstractmethod
    def revoke_token(self, token_id: str, at: datetime) -> ApiToken:
        """Mark it revoked at ``at`` (once) and end its sessions; InputError naming ``ID`` if unknown."""

    @abc.abstractmethod
    def add_web_session(self, web_session: WebSession) -> None:
        """Store a session (and drop the expired ones)."""

    @abc.abstractmethod
    def web_session(self, id_sha256: str) -> tuple[WebSession, ApiToken] | None:
        """The session and the token it was opened with."""

    @abc.abstractmethod
    def end_web_session(self, id_sha256: str) -> None: ...
