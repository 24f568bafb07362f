"""``/v1/apps/{app}/traffic``: push an app's hourly request counts (idempotent per hour).

A count for the hour in progress is what the app served so far in it; when that rate needs
more GPUs than the hour holds for the app, the answer comes after the hot path's re-plan
and the amendment of the hour it made.
"""

from __future__ import annotations

from fastapi import APIRouter

from gpuplan.http.deps import Admin
from gpuplan.http.models import TrafficHourIn, TrafficOut

router = APIRouter(prefix="/v1/apps", tags=["traffic"])


@router.post("/{app}/traffic", response_model=TrafficOut)
def post_traffic(app: str, body: list[TrafficHourIn], call: Admin) -> dict[str, object]:
    """Store ``[{"hour", "requests"}]``; a repeated hour replaces the stored count. The hourly
    recalibration feeds the finished hours to the app's demand profile; the hour in progress
    is observed (``observed_minutes``) and may amend the hour (``amendment``)."""
    stored, surge = call.ctx.push_traffic(app, [(row.hour, row.requests) for row in body])
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
