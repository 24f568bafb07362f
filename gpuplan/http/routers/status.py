"""``/v1/status`` and ``/healthz``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gpuplan.http.deps import Context, Reader

router = APIRouter(tags=["status"])


@router.get("/v1/status")
def get_status(token: Reader, ctx: Context, team: str | None = None) -> dict[str, Any]:
    """The document of ``gpuplan status --json``; ``?team=`` keeps one team's jobs."""
    return ctx.status(team)


@router.get("/healthz")
def healthz(ctx: Context) -> dict[str, object]:
    """Alive, and when the last cycle ran and succeeded (no token needed)."""
    return ctx.health.as_dict()
