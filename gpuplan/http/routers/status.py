"""``/v1/status`` and ``/healthz``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from gpuplan.http.deps import Context, Reader

router = APIRouter(tags=["status"])


@router.get("/v1/status", response_class=Response)
async def get_status(call: Reader, team: str | None = None) -> Response:
    """The document of ``gpuplan status --json``; ``?team=`` keeps one team's jobs."""
    return Response(await call.ctx.served_status(team, call.marks), media_type="application/json")


@router.get("/healthz")
def healthz(ctx: Context) -> dict[str, object]:
    """Alive, and when the last cycle ran and succeeded (no token needed)."""
    return ctx.health.as_dict()
