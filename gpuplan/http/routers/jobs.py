"""``/v1/jobs``: submit, look up, cancel."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gpuplan.app.jobs import known_job
from gpuplan.app.status import job_view
from gpuplan.http.deps import Reader, Submitter
from gpuplan.http.models import ErrorOut, JobSpecIn, SubmitOut

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorOut} for code in (401, 403, 404, 413, 422)}


@router.post("", status_code=201, response_model=SubmitOut, responses=ERRORS)
async def post_job(body: JobSpecIn, call: Submitter) -> dict[str, object]:
    """Queue a job (the spec of ``gpuplan submit``); answers with its forecast and planned start."""
    return (await call.ctx.served_submit(call.token, body.spec(), source="request body")).as_dict()


@router.get("/{job_id}", responses=ERRORS)
def get_job(job_id: str, call: Reader) -> dict[str, Any]:
    """State, forecast, planned or actual start, GPUs and outcome."""
    return job_view(call.ctx.store, known_job(call.ctx.store, job_id, call.token))


@router.delete("/{job_id}", responses=ERRORS)
def delete_job(job_id: str, call: Submitter) -> dict[str, Any]:
    """Cancel: a queued job leaves the queue; a running one is stopped through the executor."""
    return job_view(call.ctx.store, call.ctx.cancel(call.token, job_id))
