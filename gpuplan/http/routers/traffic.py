"""``/v1/apps/{app}/traffic``: push an app's hourly request counts (idempotent per hour)."""

from __future__ import annotations

from fastapi import APIRouter

from gpuplan.http.deps import Admin, Context
from gpuplan.http.models import TrafficHourIn, TrafficOut

router = APIRouter(prefix="/v1/apps", tags=["traffic"])


@router.post("/{app}/traffic", response_model=TrafficOut)
def post_traffic(app: str, body: list[TrafficHourIn], token: Admin, ctx: Context) -> dict[str, object]:
    """Store ``[{"hour", "requests"}]``; a repeated hour replaces the stored count. The hourly
    recalibration feeds the finished hours to the app's demand profile."""
    hours = ctx.push_traffic(app, [(row.hour, row.requests) for row in body])
    return {"app": app, "hours": hours}
