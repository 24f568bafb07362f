"""``/v1/jobs``: submit, look up, cancel."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from contract.records import Scope
from gpuplan.app.jobs import known_job
from gpuplan.app.status import job_view
from gpuplan.app.tokens import require
from gpuplan.http.deps import Context, Reader, Submitter
from gpuplan.http.models import ErrorOut, JobSpecIn, SubmitOut

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorOut} for code in (401, 403, 404, 413, 422)}


@router.post("", status_code=201, response_model=SubmitOut, responses=ERRORS)
async def post_job(body: JobSpecIn, token: Submitter, ctx: Context) -> dict[str, object]:
    """Queue a job (the spec of ``gpuplan submit``); answers with its forecast and planned start."""
    return (await ctx.served_submit(token, body.spec(), source="request body")).as_dict()


@router.get("/{job_id}", responses=ERRORS)
def get_job(job_id: str, token: Reader, ctx: Context) -> dict[str, Any]:
    """State, forecast, planned or actual start, GPUs and outcome."""
    return job_view(ctx.store, known_job(ctx.store, job_id, require(token, Scope.READ)))


@router.delete("/{job_id}", responses=ERRORS)
def delete_job(job_id: str, token: Submitter, ctx: Context) -> dict[str, Any]:
    """Cancel: a queued job leaves the queue; a running one is stopped through the executor."""
    return job_view(ctx.store, ctx.cancel(token, job_id))
