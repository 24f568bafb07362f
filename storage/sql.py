"""The SQL store: one implementation of :class:`storage.store.Store` for SQLite and PostgreSQL.

Each public method is one transaction on a connection of its own from the pool, so a
store may be shared by threads. Rows become value objects (``storage/records.py``)
before a method returns; database errors become :class:`StoreError`.

SQLite is set up for two processes on one file: write-ahead logging (readers never
wait for the writer), a 30 s busy timeout (a second writer waits instead of failing)
and ``BEGIN IMMEDIATE`` for every transaction that may write, so a transaction takes
the write lock before it reads what it decides on (a deferred one could read, lose
the race to upgrade its lock and fail). Read-only methods use a deferred ``BEGIN``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    create_engine,
    delete,
    event,
    exc,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from contract.errors import InputError
from storage.records import (
    App,
    AppForecast,
    Assignment,
    Cluster,
    Commit,
    DownWindowRecord,
    Job,
    JobEstimate,
    JobState,
    Outcome,
    PlanRun,
    RunMode,
    TrafficHour,
)
from storage.store import DEFAULT_URL, Store, StoreError
from storage.tables import (
    SCHEMA_REVISION,
    AppRow,
    ClusterRow,
    CommitAssignmentRow,
    CommitRow,
    DownWindowRow,
    HistoryRow,
    JobRow,
    LockRow,
    PlanRunRow,
    ProfileRow,
    RunForecastRow,
    TrafficRow,
)

if TYPE_CHECKING:
    import pandas as pd
    from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")
EXPECTED_URL = "a database URL: sqlite:///PATH (e.g. sqlite:///var/gpuplan.db), sqlite:// or postgresql+psycopg://USER@HOST[:PORT]/DB"
SQLITE_BUSY_TIMEOUT_S = 30.0
DEFAULT_LOCK_TTL = timedelta(minutes=10)
# Only one process upgrades the schema at a time (PostgreSQL; SQLite's write lock does it).
_UPGRADE_LOCK = "gpuplan schema upgrade"
# Execution option: this transaction only reads, so SQLite may BEGIN DEFERRED.
_READ_ONLY = "gpuplan_read_only"
_HOST = socket.gethostname()
_IN_CLAUSE_CHUNK = 500


def _json_dumps(value: object) -> str:
    # NaN and Infinity are not JSON: PostgreSQL would refuse them, so SQLite must too.
    return json.dumps(value, allow_nan=False)


def parse_url(url: str) -> URL:
    """The SQLAlchemy URL of a ``--db`` value; InputError naming ``--db`` when it is not one we serve."""
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError) as error:
        raise InputError("--db", EXPECTED_URL, url, hint=str(error)) from None
    backend = parsed.get_backend_name()
    if backend == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3 is the driver we ship
    if parsed.drivername not in {"sqlite", "sqlite+pysqlite", "postgresql+psycopg"}:
        raise InputError(
            "--db",
            EXPECTED_URL,
            parsed.render_as_string(hide_password=True),
            hint="Other back ends are not supported.",
        )
    return parsed


def _sqlite_file(parsed: URL) -> Path | None:
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _create_engine(parsed: URL) -> Engine:
    if parsed.get_backend_name() == "postgresql":
        try:
            return create_engine(
                parsed,
                pool_pre_ping=True,  # a restarted server leaves dead connections in the pool
                pool_size=5,
                connect_args={"connect_timeout": 10},
                json_serializer=_json_dumps,
            )
        except ImportError as error:
            raise StoreError(
                "PostgreSQL needs the psycopg driver: pip install 'gpuplan[postgres]'"
            ) from error
    if _sqlite_file(parsed) is None:
        # In memory: one shared connection, or every new connection would see an empty database.
        engine = create_engine(
            parsed,
            poolclass=StaticPool,
            connect_args={"check_same_thread": False},
            json_serializer=_json_dumps,
        )
    else:
        engine = create_engine(
            parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S}, json_serializer=_json_dumps
        )
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _set_wal(cursor: Any) -> None:
    """Switch a new database to write-ahead logging, waiting out another process's lock.

    Changing the journal mode needs an exclusive lock, and SQLite answers "database is
    locked" at once, without its busy handler, while another process holds one (two
    daemons starting together on an empty database). So retry until the busy timeout.
    """
    import sqlite3

    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_on_connect(dbapi_connection: Any, _record: object) -> None:
    # SQLAlchemy's recipe: take BEGIN away from the sqlite3 module, which would skip it
    # before SELECTs and DDL (no repeatable reads, no transactional migrations).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys = ON")
    _set_wal(cursor)
    # With WAL, NORMAL loses no committed transaction when a process dies (only on power loss).
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()


def _sqlite_on_begin(connection: Connection) -> None:
    options = connection.get_execution_options()
    if options.get("isolation_level") == "AUTOCOMMIT":
        return  # asked for no transaction (e.g. to checkpoint or VACUUM)
    connection.exec_driver_sql("BEGIN DEFERRED" if options.get(_READ_ONLY) else "BEGIN IMMEDIATE")


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for the migrations shipped in ``storage/migrations`` (no alembic.ini).

    ``env.py`` runs on ``connection`` when one is given (the store's own, inside its transaction).
    """
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest migration this code ships."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "storage/migrations/versions holds no migration"
    return head


def _require_hour(value: datetime, name: str) -> None:
    if value.tzinfo is None or value.minute or value.second or value.microsecond:
        raise InputError(name, "a timezone-aware hour (minutes and seconds zero)", value.isoformat())


def _require_finite(value: float | None, name: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(name, "a finite number", value)


def _plain(value: object) -> object:
    """A JSON-ready Python scalar from a pandas/numpy one."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def _chunks(values: Sequence[str], size: int = _IN_CLAUSE_CHUNK) -> Iterator[Sequence[str]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


def _lock_owner() -> str:
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex}"


def _owner_alive(owner: str) -> bool:
    """Whether the process named in a lock's owner may still run (False only when surely dead)."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != _HOST or not pid_text.isdigit():
        return True  # another machine: only the expiry can tell
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, under another user
    return True


class SqlStore(Store):
    """The store on SQLite or PostgreSQL through SQLAlchemy; open it with :meth:`open`."""

    def __init__(self, engine: Engine, *, lock_ttl: timedelta = DEFAULT_LOCK_TTL) -> None:
        self._engine = engine
        self._lock_ttl = lock_ttl
        self._url = engine.url.render_as_string(hide_password=True)

    @classmethod
    def open(cls, url: str = DEFAULT_URL, *, lock_ttl: timedelta = DEFAULT_LOCK_TTL) -> SqlStore:
        """Open the database at ``url`` (creating a SQLite file's folder) and upgrade its schema."""
        parsed = parse_url(url)
        path = _sqlite_file(parsed)
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise StoreError(
                    f"cannot create the folder of the SQLite database {path}: {error}"
                ) from error
        store = cls(_create_engine(parsed), lock_ttl=lock_ttl)
        try:
            store._upgrade()
        except BaseException:
            store.close()
            raise
        return store

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, for APScheduler's job store on the same database and for tests."""
        return self._engine

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._engine.dialect.name

    # -- plumbing ------------------------------------------------------------------------
    def _fail(self, error: Exception) -> StoreError:
        reason = str(getattr(error, "orig", None) or error).strip().splitlines()
        first = reason[0] if reason else type(error).__name__
        if isinstance(error, exc.OperationalError | exc.InterfaceError | exc.TimeoutError):
            return StoreError(f"cannot reach or use the database at {self._url}: {first}")
        return StoreError(f"the database at {self._url} refused the operation: {first}")

    @contextmanager
    def _session(self, *, read_only: bool = False) -> Iterator[Session]:
        """One transaction; SQLAlchemy's errors leave as StoreError (ValueError for unstorable values)."""
        try:
            with self._engine.connect() as connection:
                if read_only:
                    connection.execution_options(**{_READ_ONLY: True})
                with Session(bind=connection, expire_on_commit=False) as session, session.begin():
                    yield session
        except (exc.DBAPIError, exc.TimeoutError) as error:
            raise self._fail(error) from error
        except exc.StatementError as error:
            # A value the driver cannot take (NaN in JSON, a naive datetime): the caller's bug.
            raise ValueError(f"cannot store a value: {error.orig}") from error

    def _schema_revision(self) -> str | None:
        with self._engine.connect() as connection:
            connection.execution_options(**{_READ_ONLY: True})
            if not inspect(connection).has_table("alembic_version"):
                return None
            version: str | None = connection.scalar(text("SELECT version_num FROM alembic_version"))
            return version

    def _upgrade(self) -> None:
        try:
            if self._schema_revision() == SCHEMA_REVISION:
                return
        except (exc.DBAPIError, exc.TimeoutError) as error:
            raise self._fail(error) from error
        from alembic import command
        from alembic.util import CommandError

        try:
            with self._engine.connect() as connection, connection.begin():
                if self.dialect == "postgresql":
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": _UPGRADE_LOCK}
                    )
                command.upgrade(alembic_config(connection), "head")
        except (exc.DBAPIError, exc.TimeoutError) as error:
            raise self._fail(error) from error
        except CommandError as error:
            raise StoreError(
                f"cannot upgrade the schema of {self._url} to {head_revision()}: {error}. "
                "A database written by a newer gpuplan needs that version."
            ) from error

    def close(self) -> None:
        self._engine.dispose()

    # -- the cycle lock ------------------------------------------------------------------
    @contextmanager
    def cycle_lock(self, name: str) -> Iterator[bool]:
        if self.dialect == "postgresql":
            with self._advisory_lock(name) as held:
                yield held
        else:
            with self._row_lock(name) as held:
                yield held

    @contextmanager
    def _advisory_lock(self, name: str) -> Iterator[bool]:
        # A session lock on a connection of its own, outside any transaction: the server
        # frees it when this connection ends, however the process ends.
        try:
            connection = self._engine.connect()
        except (exc.DBAPIError, exc.TimeoutError) as error:
            raise self._fail(error) from error
        try:
            try:
                connection.execution_options(isolation_level="AUTOCOMMIT")
                held = bool(
                    connection.scalar(text("SELECT pg_try_advisory_lock(hashtext(:name))"), {"name": name})
                )
            except exc.DBAPIError as error:
                raise self._fail(error) from error
            try:
                yield held
            finally:
                if held:
                    try:
                        connection.execute(text("SELECT pg_advisory_unlock(hashtext(:name))"), {"name": name})
                    except exc.DBAPIError as error:
                        log.warning("could not release the lock %r (the server frees it): %s", name, error)
        finally:
            connection.close()

    @contextmanager
    def _row_lock(self, name: str) -> Iterator[bool]:
        owner = _lock_owner()
        now = datetime.now(UTC)  # the real clock: an expiry guards real processes, not replayed time
        with self._session() as session:  # BEGIN IMMEDIATE: one taker at a time
            row = session.get(LockRow, name)
            if row is not None and row.expires_at > now and _owner_alive(row.owner):
                held = False
            elif row is None:
                session.add(LockRow(name=name, owner=owner, expires_at=now + self._lock_ttl))
                held = True
            else:
                log.info("taking over the lock %r from %s (dead or expired)", name, row.owner)
                row.owner, row.expires_at = owner, now + self._lock_ttl
                held = True
        try:
            yield held
        finally:
            if held:
                try:
                    with self._session() as session:
                        session.execute(delete(LockRow).where(LockRow.name == name, LockRow.owner == owner))
                except StoreError as error:
                    log.warning("could not release the lock %r (it expires by itself): %s", name, error)

    # -- cluster and apps ----------------------------------------------------------------
    def cluster(self) -> Cluster | None:
        with self._session(read_only=True) as session:
            row = session.get(ClusterRow, 1)
            if row is None:
                return None
            windows = session.scalars(
                select(DownWindowRow)
                .where(DownWindowRow.cluster_id == 1)
                .order_by(DownWindowRow.gpu, DownWindowRow.starts_at, DownWindowRow.id)
            )
            return Cluster(
                gpus=row.gpus,
                step_minutes=row.step_minutes,
                horizon_steps=row.horizon_steps,
                decay=row.decay,
                rt_penalty=row.rt_penalty,
                down=tuple(DownWindowRecord(w.gpu, w.starts_at, w.ends_at) for w in windows),
            )

    def save_cluster(self, cluster: Cluster) -> None:
        with self._session() as session:
            session.execute(delete(DownWindowRow).where(DownWindowRow.cluster_id == 1))
            session.merge(
                ClusterRow(
                    id=1,
                    gpus=cluster.gpus,
                    step_minutes=cluster.step_minutes,
                    horizon_steps=cluster.horizon_steps,
                    decay=cluster.decay,
                    rt_penalty=cluster.rt_penalty,
                )
            )
            session.flush()  # the cluster row before the windows that refer to it
            session.add_all(
                DownWindowRow(cluster_id=1, gpu=w.gpu, starts_at=w.start, ends_at=w.end) for w in cluster.down
            )

    def apps(self) -> list[App]:
        with self._session(read_only=True) as session:
            return [
                App(r.id, r.priority, r.swap_cap, r.requests_per_gpu_hour, r.headroom)
                for r in session.scalars(select(AppRow).order_by(AppRow.id))
            ]

    def save_app(self, app: App) -> None:
        with self._session() as session:
            session.merge(
                AppRow(
                    id=app.id,
                    priority=app.priority,
                    swap_cap=app.swap_cap,
                    requests_per_gpu_hour=app.requests_per_gpu_hour,
                    headroom=app.headroom,
                )
            )

    def profile(self, app: str) -> bytes | None:
        with self._session(read_only=True) as session:
            row = session.get(ProfileRow, app)
            return None if row is None else bytes(row.blob)

    def save_profile(self, app: str, blob: bytes, *, through: datetime) -> None:
        with self._session() as session:
            session.merge(ProfileRow(app=app, blob=blob, through=through))

    def profile_through(self, app: str) -> datetime | None:
        with self._session(read_only=True) as session:
            return session.scalar(select(ProfileRow.through).where(ProfileRow.app == app))

    # -- jobs ----------------------------------------------------------------------------
    @staticmethod
    def _job(row: JobRow) -> Job:
        estimate = None
        if row.estimate_gpus is not None and row.estimate_hours_p50 is not None:
            estimate = JobEstimate(
                row.estimate_gpus, row.estimate_hours_p50, row.estimate_hours_p90 or row.estimate_hours_p50
            )
        return Job(
            id=row.id,
            kind=row.kind,
            priority=row.priority,
            spec=dict(row.spec),
            submitted_at=row.submitted_at,
            state=row.state,
            estimate=estimate,
            first_gpu=row.first_gpu,
            gpus=row.gpus,
            started_at=row.started_at,
            ended_at=row.ended_at,
            outcome=row.outcome,
        )

    @staticmethod
    def _job_row(session: Session, job_id: str) -> JobRow:
        row = session.scalar(select(JobRow).where(JobRow.id == job_id))
        if row is None:
            raise InputError("job_id", "the id of a submitted job", job_id)
        return row

    def add_job(self, job: Job) -> None:
        duplicate = InputError(
            "id", "a job id not used before", job.id, hint="Every submitted job needs its own id."
        )
        with self._session() as session:
            if session.scalar(select(JobRow.seq).where(JobRow.id == job.id)) is not None:
                raise duplicate
            estimate = job.estimate
            session.add(
                JobRow(
                    id=job.id,
                    kind=job.kind,
                    priority=job.priority,
                    spec=dict(job.spec),
                    submitted_at=job.submitted_at,
                    state=job.state,
                    estimate_gpus=None if estimate is None else estimate.gpus,
                    estimate_hours_p50=None if estimate is None else estimate.hours_p50,
                    estimate_hours_p90=None if estimate is None else estimate.hours_p90,
                    first_gpu=job.first_gpu,
                    gpus=job.gpus,
                    started_at=job.started_at,
                    ended_at=job.ended_at,
                    outcome=job.outcome,
                )
            )
            try:
                session.flush()
            except exc.IntegrityError:
                raise duplicate from None  # submitted by another process since the check

    def job(self, job_id: str) -> Job | None:
        with self._session(read_only=True) as session:
            row = session.scalar(select(JobRow).where(JobRow.id == job_id))
            return None if row is None else self._job(row)

    def jobs(self, states: Sequence[JobState] | None = None) -> list[Job]:
        query = select(JobRow).order_by(JobRow.seq)
        if states is not None:
            query = query.where(JobRow.state.in_([JobState(s) for s in states]))
        with self._session(read_only=True) as session:
            return [self._job(row) for row in session.scalars(query)]

    def set_estimate(self, job_id: str, estimate: JobEstimate) -> None:
        with self._session() as session:
            row = self._job_row(session, job_id)
            row.estimate_gpus = estimate.gpus
            row.estimate_hours_p50 = estimate.hours_p50
            row.estimate_hours_p90 = estimate.hours_p90

    def requeue_job(self, job_id: str) -> Job:
        with self._session() as session:
            row = self._job_row(session, job_id)
            if row.state is not JobState.RUNNING:
                raise InputError("job_id", "a running job", f"{job_id} ({row.state.value})")
            row.state, row.first_gpu, row.gpus, row.started_at = JobState.QUEUED, None, None, None
            session.flush()
            return self._job(row)

    def finish_job(
        self, job_id: str, at: datetime, outcome: Outcome, history_row: dict[str, object] | None = None
    ) -> Job:
        """Mark the job done and append its history row, validated against the history schema.

        Columns missing from ``history_row`` come from the stored job: ``job_id``, ``kind``,
        ``submit_time``, ``start_time`` (``at`` for a job that never started), ``end_time``
        (``at``), ``gpus`` (held, else estimated), ``outcome`` and the spec's features. Kinds
        the forecasters do not learn (``batch_inference``), and jobs submitted with stated
        hours instead of features, get no history row: there is nothing to learn from. A job
        that never started cannot end ``completed``: its zero duration would teach the estimators.
        """
        from features.job_features import SCHEMAS
        from training_data.history import KINDS, validate_history

        outcome = Outcome(outcome)
        with self._session() as session:
            row = self._job_row(session, job_id)
            if row.state is JobState.DONE:
                raise InputError(
                    "job_id",
                    "a queued or running job",
                    job_id,
                    hint=f"It already ended at {row.ended_at} ({row.outcome}).",
                )
            if row.started_at is None and outcome is Outcome.OK:
                raise InputError(
                    "outcome",
                    f"{Outcome.FAILED.value!r} or {Outcome.CANCELLED.value!r} for a job that never started",
                    outcome.value,
                    hint=f"Job {job_id} is still queued.",
                )
            # A job committed for the hour it was submitted in starts at its submission, not before.
            started = max(row.started_at or at, row.submitted_at)
            if at < started:
                raise InputError("at", f"at or after the job's start {started.isoformat()}", at.isoformat())
            given = set(row.spec) | set(history_row or {})
            if row.kind in KINDS and set(SCHEMAS[row.kind].names) <= given:
                import pandas as pd

                merged: dict[str, object] = {
                    **row.spec,
                    "job_id": row.id,
                    "kind": row.kind,
                    "submit_time": row.submitted_at,
                    "start_time": started,
                    "end_time": at,
                    "gpus": row.gpus or row.estimate_gpus or 1,
                    "outcome": outcome.value,
                    **(history_row or {}),
                }
                typed = validate_history(pd.DataFrame([merged]), source=f"the history row of job {job_id}")
                self._insert_history(session, typed)
            row.state, row.ended_at, row.outcome = JobState.DONE, at, outcome
            session.flush()
            return self._job(row)

    # -- job history ---------------------------------------------------------------------
    @staticmethod
    def _history_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
        """The common columns as ``job_history`` columns; every other one into ``features``."""
        import pandas as pd

        from training_data.history import COMMON_NAMES

        features = [c for c in frame.columns if c not in COMMON_NAMES]
        rows: list[dict[str, Any]] = []
        for record in frame.to_dict("records"):
            rows.append(
                {
                    "job_id": str(record["job_id"]),
                    "kind": str(record["kind"]),
                    **{
                        k: pd.Timestamp(record[k]).to_pydatetime()
                        for k in ("submit_time", "start_time", "end_time")
                    },
                    "gpus": int(record["gpus"]),
                    "outcome": str(record["outcome"]),
                    "features": {str(k): _plain(record[k]) for k in features if not pd.isna(record[k])},
                }
            )
        return rows

    def _insert_history(self, session: Session, frame: pd.DataFrame) -> int:
        rows = self._history_rows(frame)
        ids = [row["job_id"] for row in rows]
        present: set[str] = set()
        for chunk in _chunks(ids):
            present.update(session.scalars(select(HistoryRow.job_id).where(HistoryRow.job_id.in_(chunk))))
        fresh = [row for row in rows if row["job_id"] not in present]
        if fresh:
            session.execute(insert(HistoryRow), fresh)
        return len(fresh)

    def history(self) -> pd.DataFrame:
        """Every stored history row, by submit time; feature columns in the documented order."""
        import pandas as pd

        from training_data.history import HISTORY_COLUMNS

        with self._session(read_only=True) as session:
            records = [
                {
                    "job_id": r.job_id,
                    "kind": r.kind,
                    "submit_time": r.submit_time,
                    "start_time": r.start_time,
                    "end_time": r.end_time,
                    "gpus": r.gpus,
                    "outcome": r.outcome,
                    **r.features,
                }
                for r in session.scalars(
                    select(HistoryRow).order_by(HistoryRow.submit_time, HistoryRow.job_id)
                )
            ]
        frame = pd.DataFrame.from_records(records, columns=None if records else list(HISTORY_COLUMNS))
        extra = [c for c in frame.columns if c not in HISTORY_COLUMNS]
        frame = frame.reindex(columns=[*(c for c in HISTORY_COLUMNS if c in frame.columns), *extra])
        for column in ("submit_time", "start_time", "end_time"):
            frame[column] = pd.to_datetime(frame[column], utc=True)
        frame["gpus"] = frame["gpus"].astype("int64")
        return frame

    def append_history(self, rows: pd.DataFrame) -> int:
        """Append validated rows; a job id already in the history is skipped (not counted)."""
        with self._session() as session:
            return self._insert_history(session, rows)

    # -- traffic -------------------------------------------------------------------------
    def _upsert(
        self, session: Session, table: Table, rows: list[dict[str, Any]], keys: Sequence[str]
    ) -> None:
        if not rows:
            return
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            pg = pg_insert(table)
            session.execute(
                pg.on_conflict_do_update(
                    index_elements=list(keys), set_={c: pg.excluded[c] for c in rows[0] if c not in keys}
                ),
                rows,
            )
        else:
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            lite = sqlite_insert(table)
            session.execute(
                lite.on_conflict_do_update(
                    index_elements=list(keys), set_={c: lite.excluded[c] for c in rows[0] if c not in keys}
                ),
                rows,
            )

    def add_traffic(self, rows: Sequence[TrafficHour]) -> None:
        for row in rows:
            _require_hour(row.hour, "traffic.hour")
        latest = {(r.app, r.hour.astimezone(UTC)): r.requests for r in rows}  # the last of duplicates wins
        with self._session() as session:
            self._upsert(
                session,
                TrafficRow.__table__,  # type: ignore[arg-type]  # a declarative class's Table
                [
                    {"app": app, "hour": hour, "requests": requests}
                    for (app, hour), requests in latest.items()
                ],
                ("app", "hour"),
            )

    def traffic(
        self, app: str, since: datetime | None = None, until: datetime | None = None
    ) -> list[TrafficHour]:
        query = select(TrafficRow).where(TrafficRow.app == app).order_by(TrafficRow.hour)
        if since is not None:
            query = query.where(TrafficRow.hour >= since)
        if until is not None:
            query = query.where(TrafficRow.hour < until)
        with self._session(read_only=True) as session:
            return [TrafficHour(r.app, r.hour, r.requests) for r in session.scalars(query)]

    # -- plan runs and commits -----------------------------------------------------------
    @staticmethod
    def _check_run(run: PlanRun, commit: Commit | None) -> None:
        _require_finite(run.objective, "run.objective")
        _require_finite(run.latency_ms, "run.latency_ms")
        _require_finite(run.bound, "run.bound", optional=True)
        for name, value in run.metrics.items():
            _require_finite(value, f"run.metrics.{name}")
        if commit is None:
            return
        _require_hour(commit.hour, "commit.hour")
        jobs = [a.job for a in commit.assignments]
        if len(set(jobs)) != len(jobs):
            raise InputError("commit.assignments", "one entry per job", sorted(jobs))
        for assignment in commit.assignments:
            if not assignment.gpus:
                raise InputError(f"commit.assignments[{assignment.job}].gpus", "at least one GPU", [])

    def record_run(self, run: PlanRun, commit: Commit | None = None) -> PlanRun:
        self._check_run(run, commit)
        with self._session() as session:
            row = PlanRunRow(
                start=run.start,
                created_at=run.created_at,
                mode=RunMode(run.mode),
                policy=run.policy,
                inputs_hash=run.inputs_hash,
                objective=run.objective,
                bound=run.bound,
                latency_ms=run.latency_ms,
                status=run.status,
                scenario=run.scenario,
                grid=run.grid,
                metrics=dict(run.metrics),
                committed=False,
                extra=dict(run.extra),
            )
            session.add(row)
            session.flush()  # the run's id, for its forecasts and its commit
            if run.forecasts:
                session.execute(
                    insert(RunForecastRow),
                    [
                        {
                            "run_id": row.id,
                            "app": f.app,
                            "hour": f.hour,
                            "p50": f.p50,
                            "p90": f.p90,
                            "gpus": f.gpus,
                        }
                        for f in run.forecasts
                    ],
                )
            committed = commit is not None and self._commit_hour(session, row.id, commit, run.created_at)
            if committed:
                row.committed = True
            session.flush()
            return replace(run, id=row.id, committed=committed)

    @staticmethod
    def _commit_hour(session: Session, run_id: int, commit: Commit, created_at: datetime) -> bool:
        """Write the hour's commit unless it has one; move the queued jobs it starts to running."""
        exists = select(CommitRow.hour).where(CommitRow.hour == commit.hour)
        if session.scalar(exists) is not None:
            return False
        try:
            # A savepoint: losing the race for the hour must not lose the run.
            with session.begin_nested():
                session.add(CommitRow(hour=commit.hour, run_id=run_id, created_at=created_at))
                session.flush()  # the hour's key first: a racing commit fails here
                if commit.assignments:
                    session.execute(
                        insert(CommitAssignmentRow),
                        [
                            {"hour": commit.hour, "job": a.job, "gpus": list(a.gpus)}
                            for a in commit.assignments
                        ],
                    )
        except exc.IntegrityError:
            # PostgreSQL: another transaction committed this hour between our check and insert.
            if session.scalar(exists) is not None:
                log.info(
                    "hour %s was committed by another process; this run is stored uncommitted", commit.hour
                )
                return False
            raise
        by_job = {a.job: a.gpus for a in commit.assignments}
        queued = session.scalars(
            select(JobRow).where(JobRow.id.in_(list(by_job)), JobRow.state == JobState.QUEUED)
        )
        for job in queued:
            gpus = by_job[job.id]
            job.state, job.first_gpu, job.gpus, job.started_at = (
                JobState.RUNNING,
                min(gpus),
                len(gpus),
                commit.hour,
            )
        return True

    def _runs(self, session: Session, rows: Sequence[PlanRunRow]) -> list[PlanRun]:
        forecasts: dict[int, list[AppForecast]] = {row.id: [] for row in rows}
        if rows:
            query = (
                select(RunForecastRow)
                .where(RunForecastRow.run_id.in_(list(forecasts)))
                .order_by(RunForecastRow.run_id, RunForecastRow.app, RunForecastRow.hour)
            )
            for f in session.scalars(query):
                forecasts[f.run_id].append(AppForecast(f.app, f.hour, f.p50, f.p90, f.gpus))
        return [
            PlanRun(
                start=row.start,
                created_at=row.created_at,
                mode=row.mode,
                policy=row.policy,
                inputs_hash=row.inputs_hash,
                objective=row.objective,
                bound=row.bound,
                latency_ms=row.latency_ms,
                status=row.status,
                scenario=row.scenario,
                grid=row.grid,
                metrics=row.metrics,
                forecasts=tuple(forecasts[row.id]),
                id=row.id,
                committed=row.committed,
                extra=row.extra,
            )
            for row in rows
        ]

    def run(self, run_id: int | None = None) -> PlanRun | None:
        query = select(PlanRunRow)
        query = (
            query.order_by(PlanRunRow.id.desc()).limit(1)
            if run_id is None
            else query.where(PlanRunRow.id == run_id)
        )
        with self._session(read_only=True) as session:
            rows = list(session.scalars(query))
            return self._runs(session, rows)[0] if rows else None

    def runs(
        self, *, mode: str | None = None, start: datetime | None = None, limit: int = 50
    ) -> list[PlanRun]:
        query = select(PlanRunRow).order_by(PlanRunRow.id.desc()).limit(limit)
        if mode is not None:
            try:
                query = query.where(PlanRunRow.mode == RunMode(mode))
            except ValueError:
                raise InputError("mode", f"one of {[m.value for m in RunMode]}", mode) from None
        if start is not None:
            query = query.where(PlanRunRow.start == start)
        with self._session(read_only=True) as session:
            return self._runs(session, list(session.scalars(query)))

    def _commits(self, session: Session, rows: Sequence[CommitRow]) -> list[Commit]:
        if not rows:
            return []
        by_hour: dict[datetime, list[Assignment]] = {row.hour: [] for row in rows}
        hours = list(by_hour)
        query = select(CommitAssignmentRow).where(
            CommitAssignmentRow.hour >= hours[0], CommitAssignmentRow.hour <= hours[-1]
        )
        for a in session.scalars(query):
            if a.hour in by_hour:
                by_hour[a.hour].append(Assignment(a.job, tuple(sorted(a.gpus))))
        return [
            Commit(
                hour=row.hour,
                run_id=row.run_id,
                assignments=tuple(sorted(by_hour[row.hour], key=lambda a: (a.gpus[0], a.job))),
            )
            for row in rows
        ]

    def commit(self, hour: datetime) -> Commit | None:
        with self._session(read_only=True) as session:
            row = session.get(CommitRow, hour)
            return self._commits(session, [row])[0] if row is not None else None

    def commits(self, since: datetime | None = None, until: datetime | None = None) -> list[Commit]:
        query = select(CommitRow).order_by(CommitRow.hour)
        if since is not None:
            query = query.where(CommitRow.hour >= since)
        if until is not None:
            query = query.where(CommitRow.hour < until)
        with self._session(read_only=True) as session:
            return self._commits(session, list(session.scalars(query)))

    def last_commit(self, before: datetime | None = None) -> Commit | None:
        query = select(CommitRow).order_by(CommitRow.hour.desc()).limit(1)
        if before is not None:
            query = query.where(CommitRow.hour < before)
        with self._session(read_only=True) as session:
            rows = list(session.scalars(query))
            return self._commits(session, rows)[0] if rows else None
