"""Submitted jobs and the job history (the forecasters' schema, training_data/README.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Row,
    Table,
    extract,
    func,
    insert,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from contract.errors import InputError
from contract.records import (
    Job,
    JobEstimate,
    JobState,
    Outcome,
)
from contract.scenario import JobKind
from storage.tables import (
    HISTORY_COMMON,
    AmendmentRow,
    CommitRow,
    GpuMapRow,
    HistoryRow,
    JobCountsRow,
    JobRow,
    PlanRunRow,
    TokenRow,
    table_of,
)

if TYPE_CHECKING:
    import pandas as pd

from storage.sql.engine import SqlBase, _chunks, _plain, _require_hour

log = logging.getLogger(__name__)


class JobStore(SqlBase):
    """Jobs through their life, and the history finished jobs append to."""

    # -- jobs ----------------------------------------------------------------------------
    @staticmethod
    def _job(row: JobRow | Row[Any]) -> Job:
        """A stored job from its ORM row, or from a plain row of the jobs table (a read that
        changes nothing skips the ORM's bookkeeping: a queue of a thousand reads twice as fast)."""
        estimate = None
        if row.estimate_gpus is not None and row.estimate_hours_p50 is not None:
            estimate = JobEstimate(
                row.estimate_gpus,
                row.estimate_hours_p50,
                row.estimate_hours_p90 or row.estimate_hours_p50,
                _by_model(row.estimate_by_model),
            )
        return Job(
            id=row.id,
            kind=JobKind(row.kind),
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
            promised_start=row.promised_start,
            team=row.team,
        )

    @staticmethod
    def _job_row(session: Session, job_id: str) -> JobRow:
        row = session.scalar(select(JobRow).where(JobRow.id == job_id))
        if row is None:
            raise InputError("job_id", "the id of a submitted job", job_id)
        return row

    def add_job(self, job: Job) -> None:
        self.add_jobs([job])

    def add_jobs(self, jobs: Sequence[Job]) -> None:
        with self._session() as session:
            insert_jobs(session, jobs)

    def job(self, job_id: str) -> Job | None:
        with self._reading() as connection:
            row = connection.execute(select(table_of(JobRow)).where(JobRow.id == job_id)).first()
            return None if row is None else self._job(row)

    def jobs(
        self, states: Sequence[JobState] | None = None, *, submitted_since: datetime | None = None
    ) -> list[Job]:
        query = select(table_of(JobRow)).order_by(JobRow.seq)
        if states is not None:
            query = query.where(JobRow.state.in_([JobState(s) for s in states]))
        if submitted_since is not None:
            query = query.where(JobRow.submitted_at >= submitted_since)
        with self._reading() as connection:
            return [self._job(row) for row in connection.execute(query)]

    def set_promises(self, promises: Mapping[str, datetime]) -> None:
        for promised_start in promises.values():
            _require_hour(promised_start, "promised_start")
        with self._session() as session:
            for job_id, promised_start in promises.items():
                row = self._job_row(session, job_id)
                if row.promised_start is None:
                    row.promised_start = promised_start

    def marks(self) -> tuple[int, ...]:
        with self._reading() as connection:
            return tuple(int(n or 0) for n in connection.execute(_MARKS).one())

    def set_estimate(self, job_id: str, estimate: JobEstimate) -> None:
        with self._session() as session:
            row = self._job_row(session, job_id)
            row.estimate_gpus = estimate.gpus
            row.estimate_hours_p50 = estimate.hours_p50
            row.estimate_hours_p90 = estimate.hours_p90
            row.estimate_by_model = _by_model_json(estimate)

    def set_started(self, job_id: str, at: datetime) -> None:
        with self._session() as session:
            row = self._job_row(session, job_id)
            if row.state is not JobState.RUNNING:
                raise InputError("job_id", "a running job", f"{job_id} ({row.state.value})")
            row.started_at = at

    def requeue_job(self, job_id: str) -> Job:
        with self._session() as session:
            row = self._job_row(session, job_id)
            if row.state is not JobState.RUNNING:
                raise InputError("job_id", "a running job", f"{job_id} ({row.state.value})")
            row.state, row.first_gpu, row.gpus, row.started_at = JobState.QUEUED, None, None, None
            session.flush()
            return self._job(row)

    def finish_job(
        self, job_id: str, at: datetime, outcome: Outcome, history: Callable[[Job], pd.DataFrame | None]
    ) -> Job:
        """Mark the job done at ``at`` and append the rows ``history`` gives for it, in one transaction."""
        outcome = Outcome(outcome)
        with self._session() as session:
            row = self._job_row(session, job_id)
            rows = history(self._job(row))
            if rows is not None:
                self._insert_history(session, rows)
            row.state, row.ended_at, row.outcome = JobState.DONE, at, outcome
            session.flush()
            return self._job(row)

    # -- job history ---------------------------------------------------------------------
    @staticmethod
    def _history_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
        """The common columns as ``job_history`` columns; every other one into ``features``."""
        import pandas as pd

        features = [c for c in frame.columns if c not in HISTORY_COMMON]
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
        """Every stored history row, by submit time: the common columns, then the features by name."""
        import pandas as pd

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
        frame = pd.DataFrame.from_records(records, columns=None if records else list(HISTORY_COMMON))
        for column in ("submit_time", "start_time", "end_time"):
            frame[column] = pd.to_datetime(frame[column], utc=True)
        frame["gpus"] = frame["gpus"].astype("int64")
        return frame

    def append_history(self, rows: pd.DataFrame) -> int:
        """Append validated rows; a job id already in the history is skipped (not counted)."""
        with self._session() as session:
            return self._insert_history(session, rows)


def _count(table: Any, *where: Any) -> Any:
    return select(func.count()).select_from(table).where(*where).scalar_subquery()


#: INSERT with ON CONFLICT, per back end.
_INSERT: dict[str, Callable[[Table], postgresql.Insert | sqlite.Insert]] = {
    "postgresql": postgresql.insert,
    "sqlite": sqlite.insert,
}


def _kept(column: Any) -> Any:
    """A count the database keeps (:class:`JobCountsRow`), read from its one row."""
    return select(column).where(JobCountsRow.id == 1).scalar_subquery()


#: The marks' query (:meth:`JobStore.marks`), built once: building it took three times the
#: processor time of running it, and the served API reads the marks for every request. The
#: jobs are counted by the database as they are written (:class:`JobCountsRow`): the jobs
#: table keeps every job ever submitted, and a read that counted it grew with the history
#: (docs/api.md, "The history's size"); the other tables counted here stay small.
_MARKS = select(
    select(func.coalesce(func.max(PlanRunRow.id), 0)).scalar_subquery(),
    _kept(JobCountsRow.jobs),
    _kept(JobCountsRow.running),
    _kept(JobCountsRow.done),
    _count(CommitRow),
    _count(AmendmentRow),
    # The stored GPU map's reading, in whole seconds since the epoch: a new reading replaces
    # the rows with a later ``read_at`` (the executor's clock), so the mark moves with it.
    select(func.coalesce(func.max(extract("epoch", GpuMapRow.read_at)), 0)).scalar_subquery(),
    _count(TokenRow, TokenRow.revoked_at.is_not(None)),
)


def _duplicate(job_id: str) -> InputError:
    return InputError("id", "a job id not used before", job_id, hint="Every submitted job needs its own id.")


def insert_jobs(session: Session | Connection, jobs: Sequence[Job]) -> None:
    """New jobs inserted in ``session``'s transaction; ``InputError`` for an id taken or repeated
    (raised inside the transaction, so that the caller's rolls back)."""
    ids = [job.id for job in jobs]
    repeated = next((job_id for job_id in ids if ids.count(job_id) > 1), None)
    if repeated is not None:
        raise _duplicate(repeated)
    for job in jobs:
        if job.promised_start is not None:
            _require_hour(job.promised_start, "promised_start")
    # Plain INSERTs of the rows (no ORM objects: nothing reads them back), a quarter of the
    # processor time of adding and flushing the objects; an id taken (by another process
    # too, meanwhile) inserts nothing and is missing from what the INSERT returns.
    bind = session.get_bind() if isinstance(session, Session) else session
    table = table_of(JobRow)
    statement = _INSERT[bind.dialect.name](table).on_conflict_do_nothing(index_elements=[table.c.id])
    inserted = set(session.scalars(statement.returning(table.c.id), [_job_values(job) for job in jobs]))
    taken = next((job_id for job_id in ids if job_id not in inserted), None)
    if taken is not None:
        raise _duplicate(taken)


def _job_values(job: Job) -> dict[str, object]:
    estimate = job.estimate
    return {
        "id": job.id,
        "kind": job.kind,
        "priority": job.priority,
        "spec": dict(job.spec),
        "submitted_at": job.submitted_at,
        "state": job.state,
        "estimate_gpus": None if estimate is None else estimate.gpus,
        "estimate_hours_p50": None if estimate is None else estimate.hours_p50,
        "estimate_hours_p90": None if estimate is None else estimate.hours_p90,
        "estimate_by_model": None if estimate is None else _by_model_json(estimate),
        "first_gpu": job.first_gpu,
        "gpus": job.gpus,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        "outcome": job.outcome,
        "promised_start": job.promised_start,
        "team": job.team,
    }


def _by_model_json(estimate: JobEstimate) -> dict[str, list[float]] | None:
    """A job's hours per GPU model as the column stores them: model -> [P50, P90]."""
    if estimate.by_model is None:
        return None
    return {model: [float(p50), float(p90)] for model, (p50, p90) in estimate.by_model.items()}


def _by_model(stored: Mapping[str, Any] | None) -> dict[str, tuple[float, float]] | None:
    if stored is None:
        return None
    return {str(model): (float(hours[0]), float(hours[1])) for model, hours in stored.items()}
