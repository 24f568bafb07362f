"""Plan runs (grid, forecasts, metrics) and the commits of their hours."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    delete,
    exc,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from contract.errors import InputError
from contract.records import (
    Amendment,
    AppForecast,
    Assignment,
    Commit,
    DeliveryState,
    Job,
    JobState,
    PlanRun,
    RunMode,
)
from storage.sql.engine import SqlBase, _require_finite, _require_hour
from storage.sql.jobs import insert_jobs
from storage.tables import (
    AmendmentRow,
    CommitAssignmentRow,
    CommitRow,
    DeliveryRow,
    JobRow,
    PlanRunRow,
    RunForecastRow,
    table_of,
)

log = logging.getLogger(__name__)


class RunStore(SqlBase):
    """Plan runs and commits; a commit starts the jobs it places."""

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
        _check_assignments(commit.assignments, "commit.assignments")

    def record_run(
        self, run: PlanRun, commit: Commit | None = None, *, deliver_to: str | None = None
    ) -> PlanRun:
        self._check_run(run, commit)
        with self._session() as session:
            run_id = _insert_run(session, run)
            committed = commit is not None and self._commit_hour(session, run_id, commit, run.created_at)
            if committed:
                table = table_of(PlanRunRow)
                session.execute(update(table).where(table.c.id == run_id).values(committed=True))
                if deliver_to is not None:
                    assert commit is not None
                    session.add(_pending(commit.hour, commit.seq, deliver_to, run.created_at))
            session.flush()
            return replace(run, id=run_id, committed=committed)

    def record_submits(
        self, jobs: Sequence[Job], run: PlanRun, *, forecasts_of: PlanRun | None = None
    ) -> PlanRun:
        self._check_run(run, None)
        # on a bare connection (no ORM session): stored for every batch of submits the API answers
        with self._writing() as connection:
            insert_jobs(connection, jobs)
            return replace(run, id=_insert_run(connection, run, forecasts_of), committed=False)

    @staticmethod
    def _commit_hour(session: Session, run_id: int, commit: Commit, created_at: datetime) -> bool:
        """Write the hour's commit unless it has one or a later hour is committed; move the queued
        jobs it starts to running."""
        exists = select(CommitRow.hour).where(CommitRow.hour == commit.hour)
        if session.scalar(exists) is not None:
            return False
        later = session.scalar(select(CommitRow.hour).order_by(CommitRow.hour.desc()).limit(1))
        if later is not None and later > commit.hour:
            # Commits only move forward: a clock stepped back must not re-decide the past.
            log.warning(
                "hour %s is before the latest committed hour %s; not committed",
                commit.hour.isoformat(),
                later.isoformat(),
            )
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
        _start_queued(session, commit.assignments, commit.hour)
        return True

    def prune_runs(self, before: datetime) -> int:
        with self._session() as session:
            # Forecasts go with their runs (ON DELETE CASCADE); commits keep their hour and lose the id.
            result = session.execute(delete(PlanRunRow).where(PlanRunRow.created_at < before))
            return int(result.rowcount or 0)  # type: ignore[attr-defined]

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

    def _commits(self, session: Session | Connection, rows: Sequence[Any]) -> list[Commit]:
        """The commits of ``rows`` (commit rows, or rows of their ``hour`` and ``run_id``), with
        their assignments read in ``session``."""
        if not rows:
            return []
        by_hour: dict[datetime, list[Assignment]] = {row.hour: [] for row in rows}
        hours = list(by_hour)
        query = select(CommitAssignmentRow.hour, CommitAssignmentRow.job, CommitAssignmentRow.gpus).where(
            CommitAssignmentRow.hour >= hours[0], CommitAssignmentRow.hour <= hours[-1]
        )
        for a in session.execute(query):
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
        query = select(CommitRow.hour, CommitRow.run_id).order_by(CommitRow.hour.desc()).limit(1)
        if before is not None:
            query = query.where(CommitRow.hour < before)
        with self._reading() as connection:
            rows = list(connection.execute(query))
            return self._commits(connection, rows)[0] if rows else None

    # -- amendments ----------------------------------------------------------------------
    def record_amendment(self, amendment: Amendment, *, deliver_to: str | None = None) -> Amendment:
        _require_hour(amendment.hour, "amendment.hour")
        _check_assignments(amendment.assignments, "amendment.assignments")
        with self._session() as session:
            if session.get(CommitRow, amendment.hour) is None:
                raise InputError("amendment.hour", "an hour that is committed", amendment.hour.isoformat())
            last = session.scalar(
                select(func.max(AmendmentRow.seq)).where(AmendmentRow.hour == amendment.hour)
            )
            seq = (last or 0) + 1
            session.add(
                AmendmentRow(
                    hour=amendment.hour,
                    seq=seq,
                    run_id=amendment.run_id,
                    created_at=amendment.made_at,
                    assignments=[{"job": a.job, "gpus": list(a.gpus)} for a in amendment.assignments],
                )
            )
            _start_queued(session, amendment.assignments, amendment.made_at)
            if deliver_to is not None:
                session.add(_pending(amendment.hour, seq, deliver_to, amendment.made_at))
            session.flush()
            return replace(amendment, seq=seq)

    def amendments(self, since: datetime | None = None, until: datetime | None = None) -> list[Amendment]:
        query = select(AmendmentRow).order_by(AmendmentRow.hour, AmendmentRow.seq)
        if since is not None:
            query = query.where(AmendmentRow.hour >= since)
        if until is not None:
            query = query.where(AmendmentRow.hour < until)
        with self._session(read_only=True) as session:
            return [amendment_from_row(row) for row in session.scalars(query)]


def amendment_from_row(row: AmendmentRow) -> Amendment:
    return Amendment(
        hour=row.hour,
        seq=row.seq,
        made_at=row.created_at,
        run_id=row.run_id,
        assignments=tuple(
            Assignment(str(a["job"]), tuple(sorted(int(g) for g in a["gpus"]))) for a in row.assignments
        ),
    )


def _check_assignments(assignments: Sequence[Assignment], field: str) -> None:
    jobs = [a.job for a in assignments]
    if len(set(jobs)) != len(jobs):
        raise InputError(field, "one entry per job", sorted(jobs))
    for assignment in assignments:
        if not assignment.gpus:
            raise InputError(f"{field}[{assignment.job}].gpus", "at least one GPU", [])


def _start_queued(session: Session, assignments: Sequence[Assignment], at: datetime) -> None:
    """The queued jobs ``assignments`` place move to running on their GPUs, started ``at``.

    A job committed for the hour it was submitted in starts at its submission, not at the top
    of the hour: the start recorded is never before the job existed.
    """
    by_job = {a.job: a.gpus for a in assignments}
    queued = session.scalars(
        select(JobRow).where(JobRow.id.in_(list(by_job)), JobRow.state == JobState.QUEUED)
    )
    for job in queued:
        gpus = by_job[job.id]
        started = max(at, job.submitted_at)
        job.state, job.first_gpu, job.gpus, job.started_at = (JobState.RUNNING, min(gpus), len(gpus), started)


def _pending(hour: datetime, seq: int, executor: str, at: datetime) -> DeliveryRow:
    """An outbox row: the delivery of the hour's commit (``seq`` 0) or amendment ``seq``, pending."""
    return DeliveryRow(
        hour=hour,
        seq=seq,
        executor=executor,
        state=DeliveryState.PENDING,
        attempts=0,
        last_error=None,
        created_at=at,
        acknowledged_at=None,
    )


def _insert_run(session: Session | Connection, run: PlanRun, forecasts_of: PlanRun | None = None) -> int:
    """The run's row and its forecasts inserted in ``session``'s transaction, uncommitted: plain
    INSERTs (no ORM objects: nothing reads them back), a fraction of the processor time of adding
    and flushing objects; the forecasts copied from ``forecasts_of``'s rows when they are its
    (:func:`_copied_forecasts`). Returns the run's id."""
    table = table_of(PlanRunRow)
    values = {
        "start": run.start,
        "created_at": run.created_at,
        "mode": RunMode(run.mode),
        "policy": run.policy,
        "inputs_hash": run.inputs_hash,
        "objective": run.objective,
        "bound": run.bound,
        "latency_ms": run.latency_ms,
        "status": run.status,
        "scenario": run.scenario,
        "grid": run.grid,
        "metrics": dict(run.metrics),
        "committed": False,
        "extra": dict(run.extra),
    }
    run_id: int = session.execute(insert(table).values(values).returning(table.c.id)).scalar_one()
    if run.forecasts and not _copied_forecasts(session, run, run_id, forecasts_of):
        session.execute(
            insert(table_of(RunForecastRow)),
            [
                {
                    "run_id": run_id,
                    "app": f.app,
                    "hour": f.hour,
                    "p50": f.p50,
                    "p90": f.p90,
                    "gpus": f.gpus,
                }
                for f in run.forecasts
            ],
        )
    return run_id


def _copied_forecasts(
    session: Session | Connection, run: PlanRun, run_id: int, source: PlanRun | None
) -> bool:
    """``run``'s forecasts stored as a copy of the stored run ``source``'s rows, in the database
    (one statement, where inserting the rows sends each), when they are ``source``'s; False
    when they are not, or the source's rows are gone (the run pruned): nothing is copied then."""
    if source is None or source.id is None or source.forecasts != run.forecasts:
        return False
    table = table_of(RunForecastRow)
    hours = [table.c.app, table.c.hour, table.c.p50, table.c.p90, table.c.gpus]
    rows = select(literal(run_id, table.c.run_id.type), *hours).where(table.c.run_id == source.id)
    copied = session.execute(insert(table).from_select([table.c.run_id, *hours], rows).returning(table.c.app))
    if len(copied.all()) == len(run.forecasts):
        return True
    session.execute(delete(table).where(table.c.run_id == run_id))
    return False
