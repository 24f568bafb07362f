"""``/v1/reports/...``: the reports' JSON rows (``?format=csv`` for CSV), the command line's options."""

from __future__ import annotations

import io
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response

from gpuplan.app.core.bridge import floor_hour
from gpuplan.app.views.report_queries import (
    ROW_TYPES,
    commits_query,
    coverage_query,
    idle_query,
    teams_query,
    utilization_query,
)
from gpuplan.http.deps import Call, Reader
from gpuplan.http.models import error_responses
from gpuplan.table import row_records, write_rows_csv

router = APIRouter(prefix="/v1/reports", tags=["reports"])
FOUND = error_responses(404)


class Format(StrEnum):
    JSON = "json"
    CSV = "csv"


def _rows(name: str, rows: Any, output: Format) -> tuple[bytes, str]:
    row_type = ROW_TYPES[name]
    if output is Format.CSV:
        text = io.StringIO()
        write_rows_csv(row_type, rows, text)
        return text.getvalue().encode(), "text/csv"
    return bytes(JSONResponse(row_records(row_type, rows)).body), "application/json"


def _cached(call: Call, key: tuple[Any, ...], build: Callable[[], tuple[bytes, str]]) -> Response:
    """A report's answer, rebuilt once per change (a refused query is never kept)."""
    ctx = call.ctx
    body, media_type = ctx.cached(("report", floor_hour(ctx.clock()), *key), build, call.marks)
    return Response(body, media_type=media_type)


@router.get("/idle-windows", responses=FOUND)
def get_idle_windows(
    *,
    call: Reader,
    run_id: str = "latest",
    min_gpus: int = Query(1, ge=1),
    min_hours: float = Query(1, gt=0, allow_inf_nan=False),
    gpus: int | None = None,
    hours: float | None = Query(None, allow_inf_nan=False),
    limit: int | None = Query(None, ge=1),
    pool: str | None = Query(None, description="that pool of the plan's only (a cluster of several pools)"),
    format: Format = Format.JSON,
) -> Response:
    """Free aligned GPU blocks of a stored plan; with ``gpus`` and ``hours``, bookable starts.
    On a cluster of several pools a block lies in one pool, and each row names it (``pool``)."""

    def build() -> tuple[bytes, str]:
        query = idle_query(
            call.ctx.store,
            run_id,
            min_gpus=min_gpus,
            min_hours=min_hours,
            gpus=gpus,
            hours=hours,
            limit=limit,
            pool=pool,
        )
        if query.windows is not None:
            return _rows("idle-windows", query.windows.rows, format)
        return _rows("bookable", query.bookable or [], format)

    return _cached(
        call, ("idle-windows", run_id, min_gpus, min_hours, gpus, hours, limit, pool, format), build
    )


@router.get("/coverage-risk", responses=FOUND)
def get_coverage_risk(
    *,
    call: Reader,
    run_id: str = "latest",
    quantile: float = Query(0.9, gt=0, lt=1, allow_inf_nan=False),
    since: str | None = None,
    pool: str | None = Query(None, description="the apps of that pool of the plan's only"),
    format: Format = Format.JSON,
) -> Response:
    """Hours where a real-time app holds fewer GPUs than it needs (each row's ``pool``: the
    app's, on a cluster of several pools)."""

    def build() -> tuple[bytes, str]:
        _, report = coverage_query(call.ctx.store, run_id, quantile=quantile, since=since, pool=pool)
        return _rows("coverage-risk", report.rows, format)

    return _cached(call, ("coverage-risk", run_id, quantile, since, pool, format), build)


@router.get("/utilization", responses=error_responses())
def get_utilization(
    *,
    call: Reader,
    since: str | None = None,
    team: str | None = None,
    pool: str | None = Query(None, description="that pool of the config's only (a cluster of several pools)"),
    format: Format = Format.JSON,
) -> Response:
    """GPUs of each committed hour by job kind, idle and down (``team``: that team's jobs alone,
    every other GPU idle); on a cluster of several pools, one row per hour and pool (``pool``)."""
    pools = call.ctx.config.pools

    def build() -> tuple[bytes, str]:
        report = utilization_query(call.ctx.store, since=since, team=team, pools=pools, pool=pool)
        return _rows("utilization", report.rows, format)

    return _cached(call, ("utilization", since, team, pool, format), build)


@router.get("/commits", responses=error_responses())
def get_commits(
    *,
    call: Reader,
    since: str | None = None,
    team: str | None = None,
    pool: str | None = Query(None, description="that pool of the config's only (a cluster of several pools)"),
    format: Format = Format.JSON,
) -> Response:
    """Every committed hour: which job holds which GPUs (``team``: that team's jobs only; each
    row's ``pool`` on a cluster of several pools, ``pool``: that pool's rows)."""
    pools = call.ctx.config.pools

    def build() -> tuple[bytes, str]:
        rows = commits_query(call.ctx.store, since=since, team=team, pools=pools, pool=pool)
        return _rows("commits", rows, format)

    return _cached(call, ("commits", since, team, pool, format), build)


@router.get("/teams", responses=error_responses())
def get_teams(
    *,
    call: Reader,
    since: str | None = Query(None, description="from this time (default: a week before `until`)"),
    until: str | None = Query(None, description="up to this time (default: now)"),
    format: Format = Format.JSON,
) -> Response:
    """GPU-hours per team and GPU model in ``[since, until)`` against each team's entitlement
    (quota x the window's hours), as ``gpuplan report teams``; refused (422, naming ``teams``)
    when the config names no teams."""
    config, now = call.ctx.config, call.ctx.clock()

    def build() -> tuple[bytes, str]:
        report = teams_query(
            call.ctx.store, config.teams, pools=config.pools, since=since, until=until, now=now
        )
        return _rows("teams", report.rows, format)

    return _cached(call, ("teams", since, until, format), build)
