"""The FIFO deadline: a queued job whose start under FIFO (``bridge.fifo_starts``, counted at its
submit) has come is lifted to the aging ceiling (``bridge.queued_priorities``), so that a job
starved by a stream of higher-priority work starts no later than FIFO starts it."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from contract.errors import InputError
from contract.records import Cluster, Job
from contract.scenario_io import parse_scenario
from gpuplan.app.core.bridge import OVERDUE_STEP, Snapshot, fifo_starts, planned_hours, scenario_document
from gpuplan.app.core.config import PlanWith, ServiceConfig, load_config
from gpuplan.app.cycle.tick import plan_snapshot
from scheduler.policies import PolicyName
from tests.app.core.test_aging import HOUR, T0, _job


def _running(job: Job, started_at: datetime) -> Job:
    assert job.estimate is not None
    return replace(job, started_at=started_at, first_gpu=0, gpus=job.estimate.gpus)


def _first_start(policy: PolicyName, *, fifo_deadline: bool, hours: int = 48) -> int | None:
    """The hour at which an old priority-20 job of 4 GPUs for 2 hours, submitted half an hour
    before T0 behind a running job of 8 GPUs with 2.5 of its hours left then, is committed to
    start, while a priority-90 job that fills the 8 GPUs for an hour arrives every hour: each
    hour one plan of ``policy``, its step 0 what runs. FIFO's start: T0 + 2 h."""
    cluster = Cluster(gpus=8)
    config = replace(
        ServiceConfig(cluster=cluster, apps=()), plan_wall_clock=False, fifo_deadline=fifo_deadline
    )
    ahead = _running(_job("ahead", 50.0, T0 - HOUR, hours=3.0), T0 - HOUR)
    old = _job("old", 20.0, T0 - HOUR / 2, gpus=4, hours=2.0)
    for hour in range(hours):
        now = T0 + hour * HOUR
        snapshot = Snapshot(
            start=now,
            cluster=cluster,
            queued=[old, _job(f"fresh-{hour}", 90.0, now)],
            running=[ahead] if hour < 2 else [],
            demand=[],
            realtime_sets={},
        )
        _, plan = plan_snapshot(snapshot, config, policy, budget_ms=50.0)
        if any(row[0] == "old" for row in plan.grid):
            return hour
    return None


def test_a_starved_job_starts_no_later_than_fifo_starts_it() -> None:
    fifo = _first_start(PolicyName.FIFO, fifo_deadline=False)
    assert fifo == 2
    assert _first_start(PolicyName.FAST, fifo_deadline=False) is None  # starved without the deadline
    start = _first_start(PolicyName.FAST, fifo_deadline=True)
    assert start is not None
    assert start <= fifo


def test_fifo_starts_count_the_work_ahead_as_it_stood_at_submit() -> None:
    """8 GPUs: a job running 4 hours from T0; q0 (4 GPUs, 2 h) submitted at T0 + 1 h behind its
    3 hours left (24 GPU-hours: 3 h); q1 submitted at T0 + 2 h behind 2 hours of it and q0
    (16 + 8 GPU-hours: 3 h). The starts stay where they were as the plans move on."""
    cluster = Cluster(gpus=8)
    running = _running(_job("running", 50.0, T0, hours=4.0), T0)
    queued = [
        _job("q0", 50.0, T0 + HOUR, gpus=4, hours=2.0),
        _job("q1", 50.0, T0 + 2 * HOUR, gpus=4, hours=2.0),
    ]
    expected = {"q0": T0 + 4 * HOUR, "q1": T0 + 5 * HOUR}
    for now in (T0 + 2 * HOUR, T0 + 3 * HOUR):
        snapshot = Snapshot(
            start=now, cluster=cluster, queued=queued, running=[running], demand=[], realtime_sets={}
        )
        assert fifo_starts(snapshot, PlanWith.P90) == expected


def test_an_overdue_job_is_lifted_to_the_ceiling_the_longest_overdue_highest() -> None:
    """At T0 + 10 h, with nothing ahead of them, 'oldest' and 'old' are past their FIFO start;
    'new', submitted now, is not. The ceiling: twice the top batch priority (180). The scenario
    stays the contract's; without the deadline the priorities are the jobs' own."""
    cluster = Cluster(gpus=8)
    now = T0 + 10 * HOUR
    queued = [_job("oldest", 20.0, T0), _job("old", 30.0, T0 + HOUR), _job("new", 90.0, now)]
    snapshot = Snapshot(start=now, cluster=cluster, queued=queued, running=[], demand=[], realtime_sets={})
    document = scenario_document(snapshot, PlanWith.P90, name="deadline", fifo_deadline=True)
    priorities = {job["id"]: job["priority"] for job in document["jobs"]}
    assert priorities == pytest.approx({"oldest": 180.0, "old": 180.0 * (1 - OVERDUE_STEP), "new": 90.0})
    parse_scenario(document, source="deadline")
    plain = scenario_document(snapshot, PlanWith.P90, name="plain")
    assert {job["id"]: job["priority"] for job in plain["jobs"]} == {"oldest": 20.0, "old": 30.0, "new": 90.0}


def test_the_config_turns_the_deadline_on_and_refuses_what_is_not_a_boolean(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"cluster": {"gpus": 8}, "fifo_deadline": True}))
    assert load_config(path).fifo_deadline is True
    path.write_text(yaml.safe_dump({"cluster": {"gpus": 8}}))
    assert load_config(path).fifo_deadline is False
    path.write_text(yaml.safe_dump({"cluster": {"gpus": 8}, "fifo_deadline": "yes"}))
    with pytest.raises(InputError, match=r"fifo_deadline.*true or false.*yes"):
        load_config(path)


def _brute_force_fifo_starts(snapshot: Snapshot, plan_with: PlanWith) -> dict[str, datetime]:
    """The starts of :func:`fifo_starts` by its definition: for each queued job, every job
    submitted before it, as it stood at that submit."""
    capacity = max(
        1.0,
        snapshot.cluster.gpus - sum(max(d.gpus[: snapshot.cluster.horizon_steps]) for d in snapshot.demand),
    )
    work = [job for job in (*snapshot.running, *snapshot.queued) if job.estimate is not None]
    due = {}
    for job in snapshot.queued:
        ahead = 0.0
        for other in work:
            if other.submitted_at < job.submitted_at:
                assert other.estimate is not None
                ran = (
                    0.0
                    if other.started_at is None
                    else max(0.0, (job.submitted_at - other.started_at) / HOUR)
                )
                hours = max(0.0, planned_hours(other.estimate, plan_with) - ran)
                ahead += (other.gpus or other.estimate.gpus) * hours
        due[job.id] = job.submitted_at + ahead / capacity * HOUR
    return due


@pytest.mark.parametrize("seed", range(20))
def test_fifo_starts_equal_the_definition_on_random_snapshots(seed: int) -> None:
    """Running jobs started before and after the queued jobs' submits, ties in submit times,
    jobs of several sizes: the prefix sums give the starts the job-by-job sum gives."""
    rng = random.Random(seed)
    now = T0 + 48 * HOUR
    cluster = Cluster(gpus=rng.choice((8, 24, 64)))

    def drawn(name: str) -> Job:
        submitted = T0 + rng.randrange(0, 96) * HOUR / 2
        return _job(name, 50.0, submitted, gpus=rng.randint(1, 8), hours=rng.uniform(0.5, 30.0))

    running = []
    for index in range(rng.randint(0, 12)):
        job = drawn(f"r{index}")
        running.append(_running(job, job.submitted_at + rng.randrange(0, 40) * HOUR / 2))
    queued = [drawn(f"q{index}") for index in range(rng.randint(1, 40))]
    snapshot = Snapshot(
        start=now, cluster=cluster, queued=queued, running=running, demand=[], realtime_sets={}
    )
    fast = fifo_starts(snapshot, PlanWith.P90)
    slow = _brute_force_fifo_starts(snapshot, PlanWith.P90)
    assert fast.keys() == slow.keys()
    for job_id, at in fast.items():
        assert abs((at - slow[job_id]) / HOUR) < 1e-9
