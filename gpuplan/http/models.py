"""Pydantic models at the boundary: request bodies (unknown fields refused) and answers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contract.scenario import JobKind
from contract.scenario_io import MAX_PRIORITY


class JobSpecIn(BaseModel):
    """The spec of ``gpuplan submit JOB.yaml`` as JSON: the common fields below plus the job's
    features by name (``gpuplan forecast job --schema``). Any other field is refused.

    This model documents the body in the OpenAPI schema only, from the same constants: the
    body is checked by the command line's checks (:func:`gpuplan.app.jobs.submit.check_spec`), one
    set for every face."""

    model_config = ConfigDict(extra="allow")

    id: str | None = Field(None, strict=True, description="1-128 letters, digits, '.', '_', ':' or '-'")
    kind: str = Field(json_schema_extra={"enum": [kind.value for kind in JobKind.batch()]})
    priority: float = Field(1, strict=True, gt=0, le=MAX_PRIORITY, allow_inf_nan=False)
    gpus: int | None = Field(
        None, strict=True, ge=1, description="a power of two; with `hours`, skips the forecast"
    )
    hours: float | None = Field(None, strict=True, gt=0, allow_inf_nan=False)
    gpu_models: str | list[str] | None = Field(
        None,
        description="on a cluster of several pools: 'any' (the default) or the GPU models the job may "
        "run on (docs/pools.md)",
    )


class SubmitOut(BaseModel):
    job: str
    gpus: int
    hours_p50: float
    hours_p90: float
    planned_start: str | None = Field(description="ISO 8601, as `gpuplan submit --json` prints it")
    promised_start: str | None = Field(
        None,
        description="ISO 8601: the start promised, the plan's moved by the work expected to arrive "
        "ahead of the job (docs/closed-loop.md)",
    )
    first_gpu: int | None
    reason: str
    pool: str | None = Field(
        None,
        description="on a cluster of several pools only: the pool of the planned block (null: not "
        "planned); absent on a cluster of one pool",
    )


class TrafficHourIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hour: datetime = Field(description="an hour in ISO 8601 (minutes and seconds zero)")
    requests: float = Field(strict=True, ge=0, allow_inf_nan=False)


class AmendmentOut(BaseModel):
    hour: str
    seq: int
    additions: dict[str, list[int]] = Field(description="job or app -> the GPUs added in the hour")


class TrafficOut(BaseModel):
    app: str
    hours: int = Field(description="finished hours stored")
    observed_minutes: float | None = Field(None, description="the hour in progress: minutes its count covers")
    replanned: bool = Field(False, description="the count outran the app's GPUs: the hot path re-planned")
    amendment: AmendmentOut | None = None


class FieldError(BaseModel):
    field: str
    expected: str
    received: Any


class ErrorOut(BaseModel):
    message: str
    errors: list[FieldError] = []


#: The most rows one page of a list answers (``limit``).
MAX_PAGE = 1000

#: What each error status of the API means (docs/api.md's table).
ERROR_MEANINGS = {
    401: "no token, or a token that is unknown, revoked or expired",
    403: "the token lacks the scope, the team or the priority cap this needs",
    404: "the id in the path names nothing",
    413: "the body is over the cap",
    415: "the body is not JSON (its Content-Type)",
    422: "a field of the body or the query, or a query parameter the route does not take",
    503: "the database is down or busy",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """A route's error answers for OpenAPI: 401, 403, 422 and 503, and ``codes``."""
    return {
        code: {"model": ErrorOut, "description": ERROR_MEANINGS[code]}
        for code in sorted({401, 403, 422, 503, *codes})
    }
