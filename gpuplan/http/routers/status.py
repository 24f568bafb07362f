"""``/v1/status`` and ``/healthz``."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import Response

from gpuplan.http.deps import Context, Reader
from gpuplan.http.models import MAX_PAGE, error_responses

router = APIRouter(tags=["status"])


@router.get("/v1/status", response_class=Response, responses=error_responses())
async def get_status(
    call: Reader,
    team: str | None = None,
    limit: int | None = Query(None, ge=1, le=MAX_PAGE, description="at most this many queue rows"),
    offset: int = Query(0, ge=0, description="the queue rows from this one on"),
    pool: str | None = Query(None, description="that pool's rows only (a cluster of several pools)"),
) -> Response:
    """The document of ``gpuplan status --json``; ``?team=`` keeps one team's jobs, ``?pool=``
    one pool's (its count, the work on its GPUs, the jobs planned there); ``limit`` and
    ``offset`` page the queue (``X-Total-Count``: the queue's length)."""
    page = None if limit is None and not offset else (offset, limit or MAX_PAGE)
    body, total = await call.ctx.served_status(team, call.marks, page, pool)
    return Response(body, media_type="application/json", headers={"X-Total-Count": str(total)})


@router.get("/healthz")
def healthz(ctx: Context) -> dict[str, object]:
    """Alive, and when the last cycle ran and succeeded (no token needed)."""
    return ctx.health.as_dict()
