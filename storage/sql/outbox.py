"""The outbox: each commit's and amendment's delivery to an executor, until it is acknowledged."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from contract.errors import InputError
from contract.records import Amendment, Commit, Delivery, DeliveryState
from storage.sql.runs import RunStore, amendment_from_row
from storage.tables import AmendmentRow, CommitRow, DeliveryRow

#: The longest error text kept with a delivery (a traceback's last line is what an operator needs).
MAX_ERROR_CHARS = 2000


class OutboxStore(RunStore):
    """Deliveries are written with their commit (``record_run``) and read and updated here."""

    def pending_deliveries(self, executor: str) -> list[Delivery]:
        query = (
            select(DeliveryRow)
            .where(DeliveryRow.executor == executor, DeliveryRow.state == DeliveryState.PENDING)
            .order_by(DeliveryRow.hour, DeliveryRow.seq)
        )
        with self._session(read_only=True) as session:
            rows = list(session.scalars(query))
            return self._deliveries(session, rows)

    def deliveries(self, since: datetime | None = None) -> list[Delivery]:
        query = select(DeliveryRow).order_by(DeliveryRow.hour, DeliveryRow.seq, DeliveryRow.executor)
        if since is not None:
            query = query.where(DeliveryRow.hour >= since)
        with self._session(read_only=True) as session:
            return self._deliveries(session, list(session.scalars(query)))

    def _deliveries(self, session: Session, rows: list[DeliveryRow]) -> list[Delivery]:
        hours = sorted({row.hour for row in rows})
        commit_rows = list(
            session.scalars(select(CommitRow).where(CommitRow.hour.in_(hours)).order_by(CommitRow.hour))
        )
        items: dict[tuple[datetime, int], Commit | Amendment] = {
            (c.hour, c.seq): c for c in self._commits(session, commit_rows)
        }
        if any(row.seq > 0 for row in rows):
            amendment_rows = session.scalars(select(AmendmentRow).where(AmendmentRow.hour.in_(hours)))
            items.update({(row.hour, row.seq): amendment_from_row(row) for row in amendment_rows})
        return [
            Delivery(
                item=items[(row.hour, row.seq)],
                executor=row.executor,
                state=row.state,
                attempts=row.attempts,
                last_error=row.last_error,
                acknowledged_at=row.acknowledged_at,
            )
            for row in rows
        ]

    def record_delivery(
        self, delivery: Delivery, *, at: datetime, acknowledged: bool, error: str | None = None
    ) -> Delivery:
        with self._session() as session:
            item = delivery.item
            row = session.get(DeliveryRow, (item.hour, item.seq, delivery.executor))
            if row is None:
                raise InputError("delivery", "a delivery the store holds", item.key)
            row.attempts += 1
            if acknowledged:
                row.state, row.acknowledged_at, row.last_error = DeliveryState.ACKNOWLEDGED, at, None
            else:
                row.last_error = None if error is None else error[:MAX_ERROR_CHARS]
            return Delivery(item, row.executor, row.state, row.attempts, row.last_error, row.acknowledged_at)
