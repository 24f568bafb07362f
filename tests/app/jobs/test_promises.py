"""The promise at submit: the plan's start, moved by the higher-priority work the recent
arrivals say will come ahead of the job (``gpuplan.app.jobs.promises``), kept apart from the
plan's start in the submit's answer, the job's view and the store."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contract.errors import InputError
from contract.records import Cluster, Job, JobEstimate, PlanRun, RunMode
from contract.scenario import JobKind
from gpuplan.app.core.bridge import STEP, planned_places, run_record
from gpuplan.app.core.config import PlanWith, PromiseTerms, ServiceConfig
from gpuplan.app.jobs.promises import MAX_LOAD, batch_gpus, expected_starts
from gpuplan.app.jobs.submit import submit
from gpuplan.app.views.status import job_view
from storage.factory import open_store

T = datetime(2026, 12, 2, 10, tzinfo=UTC)


def _job(job_id: str, priority: float, *, gpus: int = 4, hours: float = 6.0, ago: float = 0.0) -> Job:
    return Job(
        id=job_id,
        kind=JobKind.BATCH_INFERENCE,
        priority=priority,
        spec={"kind": "batch_inference"},
        submitted_at=T - timedelta(hours=ago),
        estimate=JobEstimate(gpus=gpus, hours_p50=hours / 2, hours_p90=hours),
    )


def _run(cells: dict[str, tuple[range, range]], *, gpus: int = 8, realtime: tuple[str, ...] = ()) -> PlanRun:
    """A 24-step run starting at T: each job on its GPUs over its steps."""
    grid: list[list[str | None]] = [[None] * 24 for _ in range(gpus)]
    for job, (on, steps) in cells.items():
        for gpu in on:
            for step in steps:
                grid[gpu][step] = job
    jobs: list[dict[str, Any]] = [{"id": app, "kind": "realtime"} for app in realtime]
    return run_record(
        {"jobs": jobs, "down": []},
        start=T,
        created_at=T,
        mode=RunMode.SUBMIT,
        policy="fast",
        grid=grid,
        metrics={},
        latency_ms=0.0,
    )


# The low-priority job waits 6 hours behind other work; the top one too, on the other half.
RUN = _run({"low": (range(4), range(6, 12)), "top": (range(4, 8), range(6, 12)), "now": (range(4), range(3))})
JOBS = [_job("low", 10), _job("top", 60), _job("now", 10)]


def _starts(
    run: PlanRun, arrivals: list[Job], lookback: int = 12, plan_with: PlanWith = PlanWith.P90
) -> dict[str, datetime]:
    places = planned_places(run)
    planned = {job.id: places[job.id][0] for job in JOBS if job.id in places}
    capacity = batch_gpus(run)
    return expected_starts(
        planned, JOBS, arrivals, T, capacity=capacity, lookback_hours=lookback, plan_with=plan_with
    )


def test_a_wait_is_promised_longer_by_the_share_of_batch_gpus_higher_priority_arrivals_claim() -> None:
    # 2 GPUs x 12 h of priority-50 work in the last 12 hours: 2 of the 8 batch GPUs an hour.
    arrivals = [_job("a", 50, gpus=2, hours=12, ago=12)]
    starts = _starts(RUN, arrivals)
    # low waits 6 h in the plan; a quarter of the GPUs go ahead of it: 6 / (1 - 1/4) = 8 h
    assert starts["low"] == T + 8 * STEP
    # nothing outranks top, and now starts at once: both keep the plan's start
    assert starts["top"] == T + 6 * STEP and starts["now"] == T
    # the same arrival at P50 hours claims half as much: 6 / (1 - 1/8) = 6.86, to the hour 7
    assert _starts(RUN, arrivals, plan_with=PlanWith.P50)["low"] == T + 7 * STEP
    # with no lookback the promise is the plan's start
    assert _starts(RUN, arrivals, lookback=0) == {"low": T + 6 * STEP, "top": T + 6 * STEP, "now": T}


def test_only_the_lookback_counts_and_the_hours_before_the_first_arrival_do_not() -> None:
    old = _job("old", 99, gpus=8, hours=100, ago=13)  # before the 12 hours: not counted
    assert _starts(RUN, [old])["low"] == T + 6 * STEP
    # The only arrival came 6 hours ago: its 24 GPU-hours over 6 hours are half the GPUs.
    assert _starts(RUN, [old, _job("a", 50, gpus=2, hours=12, ago=6)])["low"] == T + 12 * STEP
    # Work submitted after the job (later in the order of submission) is in the plan it is
    # promised from: not counted again.
    later = [JOBS[0], _job("a", 50, gpus=2, hours=12, ago=0)]
    assert _starts(RUN, later)["low"] == T + 6 * STEP
    # before it, the same work in its first hour is more than the batch GPUs: the load's cap
    assert _starts(RUN, later[::-1])["low"] == T + round(6 / (1 - MAX_LOAD)) * STEP


def test_real_time_gpus_leave_fewer_for_batch_work_and_the_load_is_capped() -> None:
    app = _run(
        {"low": (range(4), range(6, 12)), "now": (range(4), range(3)), "chat": (range(4, 8), range(24))},
        realtime=("chat",),
    )
    assert batch_gpus(app) == 4
    arrivals = [_job("a", 50, gpus=2, hours=12, ago=12)]
    assert _starts(app, arrivals)["low"] == T + 12 * STEP  # half of 4 GPUs: 6 / (1 - 1/2)
    flood = [_job("a", 50, gpus=8, hours=200, ago=12)]
    assert _starts(app, flood)["low"] == T + round(6 / (1 - MAX_LOAD)) * STEP
    # a job the plan does not place has no promise
    assert "top" not in _starts(app, arrivals)


def test_the_submit_answers_and_keeps_the_promise_apart_from_the_plans_start(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/promise.db")
    config = ServiceConfig(cluster=Cluster(gpus=8), apps=(), models_dir=tmp_path / "models")
    try:
        store.save_cluster(config.cluster)
        urgent = {"kind": "batch_inference", "priority": 90, "gpus": 8, "hours": 4}
        first = submit(store, {**urgent, "id": "u-1"}, T - 3 * STEP, config)
        second = submit(store, {**urgent, "id": "u-2"}, T - 2 * STEP, config)
        assert first.promised_start == first.planned_start  # nothing arrived before them
        assert second.promised_start == second.planned_start
        spec = {"id": "low", "kind": "batch_inference", "priority": 10, "gpus": 8, "hours": 2}
        answer = submit(store, spec, T, config)
        # 64 GPU-hours of priority 90 in the 3 hours before: every GPU (the load at its cap)
        assert answer.planned_start is not None and answer.promised_start is not None
        lead = (answer.planned_start - T) / STEP
        assert answer.promised_start == answer.planned_start + round(lead * MAX_LOAD / (1 - MAX_LOAD)) * STEP
        assert answer.promised_start > answer.planned_start
        stored = store.job("low")
        assert stored is not None and stored.promised_start == answer.promised_start
        assert answer.as_dict()["promised_start"] == answer.promised_start.isoformat()
        view = job_view(store, stored)
        assert view["promised_start"] == answer.promised_start.isoformat()
        assert view["planned_start"] == answer.planned_start.isoformat()
        # Without the lookback the promise is the plan's start.
        plain = replace(config, promises=replace(config.promises, lookback_hours=0))
        again = submit(store, {**spec, "id": "low-2"}, T, plain)
        assert again.promised_start == again.planned_start
    finally:
        store.close()


def test_the_lookback_is_a_config_term_checked_for_its_range() -> None:
    assert PromiseTerms().lookback_hours == 12
    with pytest.raises(
        InputError, match=re.escape("`promise_lookback_hours` must be an integer in [0, 168]; got 169.")
    ):
        PromiseTerms(lookback_hours=169)
