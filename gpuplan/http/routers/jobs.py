"""``/v1/jobs``: submit, look up, cancel."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from contract.records import JobState
from gpuplan.app.cycle.finish import known_job
from gpuplan.app.views.status import job_list, job_view
from gpuplan.http.body import body_schema, json_body
from gpuplan.http.deps import Reader, Submitter
from gpuplan.http.models import MAX_PAGE, JobSpecIn, SubmitOut, error_responses

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
ERRORS = error_responses(404, 413, 415)
FOUND = error_responses(404)


@router.post(
    "",
    status_code=201,
    response_model=SubmitOut,
    response_model_exclude_unset=True,  # ``pool`` only on a cluster of several pools
    responses=ERRORS,
    openapi_extra=body_schema(JobSpecIn, description="the spec of `gpuplan submit JOB.json`"),
)
async def post_job(request: Request, call: Submitter) -> dict[str, object]:
    """Queue a job (the spec of ``gpuplan submit``, checked as it checks a file); answers with
    its forecast and planned start."""
    document = await json_body(request)
    return (await call.ctx.served_submit(call.token, document, source="request body")).as_dict()


@router.get("", responses=error_responses())
def list_jobs(
    *,
    call: Reader,
    response: Response,
    state: Annotated[JobState | None, Query(description="queued, running or done; all when absent")] = None,
    team: Annotated[str | None, Query(description="that team's jobs only")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="at most this many jobs")] = 100,
    offset: Annotated[int, Query(ge=0, description="the jobs from this one on, in submission order")] = 0,
) -> list[dict[str, Any]]:
    """The jobs in submission order, a page at a time (``X-Total-Count``: how many match)."""
    total, rows = job_list(
        call.ctx.store,
        states=None if state is None else [state],
        team=team,
        limit=limit,
        offset=offset,
        pools=call.ctx.config.pools,
    )
    response.headers["X-Total-Count"] = str(total)
    return rows


@router.get("/{job_id}", responses=FOUND)
def get_job(job_id: str, call: Reader) -> dict[str, Any]:
    """State, forecast, planned or actual start, GPUs and outcome."""
    return job_view(
        call.ctx.store, known_job(call.ctx.store, job_id, call.token), pools=call.ctx.config.pools
    )


@router.delete("/{job_id}", responses=FOUND)
def delete_job(job_id: str, call: Submitter) -> dict[str, Any]:
    """Cancel: a queued job leaves the queue; a running one is stopped through the executor."""
    return job_view(call.ctx.store, call.ctx.cancel(call.token, job_id), pools=call.ctx.config.pools)
