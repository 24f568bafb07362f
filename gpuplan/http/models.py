"""Pydantic models at the boundary: request bodies (unknown fields refused) and answers."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contract.scenario_io import MAX_PRIORITY


class JobSpecIn(BaseModel):
    """The spec of ``gpuplan submit JOB.yaml`` as JSON: the common fields below plus the job's
    features by name (``gpuplan forecast job --schema``). Any other field is refused."""

    model_config = ConfigDict(extra="allow")

    id: str | None = Field(None, strict=True, description="1-128 letters, digits, '.', '_', ':' or '-'")
    kind: Literal["training", "batch_inference", "quantization"]
    priority: float = Field(1, strict=True, gt=0, le=MAX_PRIORITY, allow_inf_nan=False)
    gpus: int | None = Field(
        None, strict=True, ge=1, description="a power of two; with `hours`, skips the forecast"
    )
    hours: float | None = Field(None, strict=True, gt=0, allow_inf_nan=False)

    def spec(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


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
