"""Aging: a queued job's priority in the plan grows with its wait (``bridge.aged_priority``),
so that a job starved by a stream of higher-priority work comes to start."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from contract.records import App, Cluster, Job, JobEstimate
from contract.scenario import JobKind
from contract.scenario_io import parse_scenario
from gpuplan.app.core.bridge import (
    AppDemand,
    Snapshot,
    aged_priority,
    aging_ceiling,
    fifo_waits,
    scenario_document,
)
from gpuplan.app.core.config import AGING_HOURS, PlanWith, ServiceConfig
from gpuplan.app.cycle.tick import plan_snapshot
from scheduler.policies import PolicyName

T0 = datetime(2026, 12, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _job(job_id: str, priority: float, submitted_at: datetime, *, gpus: int = 8, hours: float = 1.0) -> Job:
    return Job(
        id=job_id,
        kind=JobKind.TRAINING,
        priority=priority,
        spec={"id": job_id, "kind": "training", "priority": priority, "gpus": gpus, "hours": hours},
        submitted_at=submitted_at,
        estimate=JobEstimate(gpus=gpus, hours_p50=hours, hours_p90=hours),
    )


def _first_start(aging_hours: float | None, hours: int) -> int | None:
    """The hour at which an old priority-20 job, queued at hour 0 beside a stream of
    priority-90 jobs that each fill the cluster for an hour (a new one every hour), is
    committed to start: each hour one plan of the fast mode, its step 0 what runs."""
    cluster = Cluster(gpus=8)
    config = replace(ServiceConfig(cluster=cluster, apps=()), plan_wall_clock=False, aging_hours=aging_hours)
    old = _job("old", 20.0, T0)
    for hour in range(hours):
        now = T0 + hour * HOUR
        fresh = _job(f"fresh-{hour}", 90.0, now)
        snapshot = Snapshot(
            start=now, cluster=cluster, queued=[old, fresh], running=[], demand=[], realtime_sets={}
        )
        _, plan = plan_snapshot(snapshot, config, PolicyName.FAST, budget_ms=50.0)
        if any(row[0] == "old" for row in plan.grid):
            return hour
    return None


def test_without_aging_a_stream_of_higher_priority_work_starves_an_old_job() -> None:
    assert _first_start(None, 120) is None


def test_with_aging_the_starved_job_starts_within_a_bound_and_not_before_its_wait_is_long() -> None:
    # 20 x (1 + (w / 64) ** 4) passes 90 at w = 64 x 3.5 ** 0.25 = 87.6 hours.
    start = _first_start(AGING_HOURS, 120)
    assert start is not None
    assert 80 <= start <= 96


def test_the_aged_priority_is_its_own_at_first_doubled_at_aging_hours_and_capped() -> None:
    assert aged_priority(20.0, 0.0, 64.0, 180.0) == 20.0
    assert aged_priority(20.0, 64.0, 64.0, 180.0) == pytest.approx(40.0)
    assert aged_priority(20.0, 24.0, 64.0, 180.0) < 20.5  # a day's wait is almost as it was
    assert aged_priority(20.0, 1_000.0, 64.0, 180.0) == 180.0
    assert aged_priority(200.0, 1_000.0, 64.0, 180.0) == 200.0  # never below its own
    assert aged_priority(20.0, 1_000.0, None, 180.0) == 20.0


def test_aging_is_an_input_the_contract_accepts_and_never_outweighs_an_app() -> None:
    """The aged scenario parses as the contract's; an aged job's priority stays below what an
    app's unserved GPU-hour costs, and at most twice the top batch priority."""
    cluster = Cluster(gpus=8, rt_penalty=0.5)
    app = App(id="chat", priority=100.0, swap_cap=2, requests_per_gpu_hour=10.0)
    now = T0 + 1_000 * HOUR
    queued = [_job("old", 20.0, T0), _job("new", 90.0, now)]
    snapshot = Snapshot(
        start=now,
        cluster=cluster,
        queued=queued,
        running=[],
        demand=[AppDemand(app, [10.0] * 48, [10.0] * 48)],
        realtime_sets={},
    )
    assert aging_ceiling(snapshot) == 150.0  # min(2 x 90, 100 x 1.5)
    document = scenario_document(snapshot, PlanWith.P90, name="aged", aging_hours=AGING_HOURS)
    priorities = {job["id"]: job["priority"] for job in document["jobs"]}
    assert priorities == {"old": 150.0, "new": 90.0, "chat": 100.0}
    parse_scenario(document, source="aged")
    plain = scenario_document(snapshot, PlanWith.P90, name="plain")
    assert {job["id"]: job["priority"] for job in plain["jobs"]}["old"] == 20.0


def test_fifo_waits_count_the_work_submitted_before_each_job_over_the_gpus_the_apps_leave() -> None:
    """8 GPUs, an app needing 2 on average: 6 for batch work. A running job has 2 of its 4
    hours left on 6 GPUs (12 GPU-hours), submitted first; then three queued jobs in arrival
    order of 6 GPU-hours each."""
    cluster = Cluster(gpus=8)
    app = App(id="chat", priority=100.0, swap_cap=2, requests_per_gpu_hour=10.0)
    now = T0 + 10 * HOUR
    running = replace(
        _job("running", 50.0, T0, gpus=6, hours=4.0), started_at=now - 2 * HOUR, first_gpu=0, gpus=6
    )
    queued = [_job(f"q{i}", 50.0, T0 + (i + 1) * HOUR, gpus=2, hours=3.0) for i in range(3)]
    snapshot = Snapshot(
        start=now,
        cluster=cluster,
        queued=queued,
        running=[running],
        demand=[AppDemand(app, [20.0] * 48, [20.0] * 48)],
        realtime_sets={},
    )
    assert fifo_waits(snapshot, PlanWith.P90) == pytest.approx({"q0": 2.0, "q1": 3.0, "q2": 4.0})


def test_a_job_ages_only_for_the_hours_it_waited_beyond_its_fifo_wait() -> None:
    """Two jobs waiting 100 hours: the one with nothing ahead of it is aged; the one behind
    200 hours of work, which FIFO would still have made wait, keeps its priority."""
    cluster = Cluster(gpus=8)
    now = T0 + 100 * HOUR
    ahead = _job("ahead", 20.0, T0 - HOUR, gpus=8, hours=200.0)
    behind = _job("behind", 20.0, T0)
    snapshot = Snapshot(
        start=now, cluster=cluster, queued=[ahead, behind], running=[], demand=[], realtime_sets={}
    )
    document = scenario_document(snapshot, PlanWith.P90, name="aged", aging_hours=AGING_HOURS)
    priorities = {job["id"]: job["priority"] for job in document["jobs"]}
    assert priorities["ahead"] > 20.0
    assert priorities["behind"] == 20.0
