"""``/v1/apps/{app}/traffic``: push an app's hourly request counts (idempotent per hour).

A count for the hour in progress is what the app served so far in it; when that rate needs
more GPUs than the hour holds for the app, the answer comes after the hot path's re-plan
and the amendment of the hour it made.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from gpuplan.http.body import body_schema, json_body, validated
from gpuplan.http.deps import Admin
from gpuplan.http.models import TrafficHourIn, TrafficOut, error_responses

router = APIRouter(prefix="/v1/apps", tags=["traffic"])
ERRORS = error_responses(404, 413, 415)


@router.post(
    "/{app}/traffic",
    response_model=TrafficOut,
    responses=ERRORS,
    openapi_extra=body_schema(list[TrafficHourIn], description="the app's hourly counts"),
)
async def post_traffic(app: str, request: Request, call: Admin) -> dict[str, object]:
    """Store ``[{"hour", "requests"}]``; a repeated hour replaces the stored count. The hourly
    recalibration feeds the finished hours to the app's demand profile; the hour in progress
    is observed (``observed_minutes``) and may amend the hour (``amendment``)."""
    body: list[TrafficHourIn] = validated(list[TrafficHourIn], await json_body(request))
    rows = [(row.hour, row.requests) for row in body]
    stored, surge = await run_in_threadpool(call.ctx.push_traffic, app, rows)
    amendment = None if surge is None else surge.amendment
    return {
        "app": app,
        "hours": stored.hours,
        "observed_minutes": None if stored.observed is None else round(stored.observed.minutes, 2),
        "replanned": surge is not None,
        "amendment": None
        if amendment is None
        else {
            "hour": amendment.hour.isoformat(),
            "seq": amendment.seq,
            "additions": {a.job: list(a.gpus) for a in amendment.assignments},
        },
    }
