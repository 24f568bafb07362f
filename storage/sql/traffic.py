"""Hourly request counts per app."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Table,
    select,
)
from sqlalchemy.orm import Session

from contract.errors import InputError
from contract.records import (
    ObservedTraffic,
    TrafficHour,
)
from storage.tables import (
    ObservedTrafficRow,
    TrafficRow,
    table_of,
)

if TYPE_CHECKING:
    pass

from storage.sql.engine import SqlBase, _require_hour

log = logging.getLogger(__name__)


class TrafficStore(SqlBase):
    """The apps' hourly traffic, upserted by hour."""

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
                table_of(TrafficRow),
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

    def observe_traffic(self, rows: Sequence[ObservedTraffic]) -> None:
        for row in rows:
            _require_hour(row.hour, "observed.hour")
            if not 0 < row.minutes <= 60:
                raise InputError("observed.minutes", "minutes of the hour seen, in (0, 60]", row.minutes)
        latest = {r.app: r for r in rows}
        with self._session() as session:
            self._upsert(
                session,
                table_of(ObservedTrafficRow),
                [
                    {
                        "app": r.app,
                        "hour": r.hour.astimezone(UTC),
                        "requests": r.requests,
                        "minutes": r.minutes,
                    }
                    for r in latest.values()
                ],
                ("app",),
            )

    def observed_traffic(self, hour: datetime) -> list[ObservedTraffic]:
        query = (
            select(ObservedTrafficRow).where(ObservedTrafficRow.hour == hour).order_by(ObservedTrafficRow.app)
        )
        with self._session(read_only=True) as session:
            return [ObservedTraffic(r.app, r.hour, r.requests, r.minutes) for r in session.scalars(query)]
