"""``/v1/runs``: a stored plan run, and its export in the contract's formats."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gpuplan.app.views.report_queries import stored_run
from gpuplan.app.views.status import run_export, run_summary
from gpuplan.http.deps import Reader
from gpuplan.http.models import error_responses

router = APIRouter(prefix="/v1/runs", tags=["runs"])
FOUND = error_responses(404)


@router.get("/{run_id}", responses=FOUND)
def get_run(run_id: str, call: Reader) -> dict[str, Any]:
    """``latest`` or a run id: the run record (``gpuplan export``'s run.json)."""
    return run_summary(stored_run(call.ctx.store, run_id)[0])


@router.get("/{run_id}/export", responses=FOUND)
def get_export(run_id: str, call: Reader) -> dict[str, Any]:
    """``{"scenario", "plan", "run"}``: what ``gpuplan export`` writes, in CONTRACT.md's formats."""
    return run_export(stored_run(call.ctx.store, run_id)[0])
