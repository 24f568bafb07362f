"""The config's teams in a cycle's plan: the scenario carries them, each job its token's team and
its P90, and the plan keeps constraint 7 (a loan given back before the owner's job arrives)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from contract.records import Cluster, Job, JobEstimate
from contract.scenario import JobKind, Team
from gpuplan.app.core.bridge import Snapshot
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.cycle.tick import plan_snapshot
from scheduler.check import check_plan
from scheduler.policies import Plan, PolicyName
from tests.strategies import instance_of

T0 = datetime(2026, 12, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
TEAMS = (Team("research", quota={"default": 4}, weight=2), Team("product", quota={"default": 4}))


def _job(job_id: str, team: str | None, *, gpus: int, p50: float, p90: float, **more: object) -> Job:
    return Job(
        id=job_id,
        kind=JobKind.TRAINING,
        priority=10.0,
        spec={"id": job_id, "kind": "training", "priority": 10.0, "gpus": gpus, "hours": p50},
        submitted_at=T0,
        estimate=JobEstimate(gpus=gpus, hours_p50=p50, hours_p90=p90),
        team=team,
        **more,  # type: ignore[arg-type]
    )


def _config(**more: Any) -> ServiceConfig:
    config = ServiceConfig(cluster=Cluster(gpus=8), apps=(), plan_wall_clock=False)
    return replace(config, teams=TEAMS, **more)


def test_the_cycles_scenario_carries_the_teams_and_each_jobs_team_and_p90() -> None:
    running = _job("run", "research", gpus=4, p50=5, p90=6, started_at=T0 - 2 * HOUR, first_gpu=0)
    running = replace(running, gpus=4)
    queued = [_job("wide", "product", gpus=8, p50=2, p90=3), _job("stray", "nobody", gpus=1, p50=1, p90=1)]
    snapshot = Snapshot(
        start=T0, cluster=Cluster(gpus=8), queued=queued, running=[running], demand=[], realtime_sets={}
    )
    document, plan = plan_snapshot(snapshot, _config(), PolicyName.FAST, budget_ms=20.0)
    teams = {team["name"]: team for team in document["teams"]}
    assert teams["research"]["quota"] == {"default": 4} and teams["product"]["past_gpu_hours"] == 0.0
    assert 7.8 < teams["research"]["past_gpu_hours"] < 8.0  # 4 GPUs x 2 hours, a little decayed
    jobs = {job["id"]: job for job in document["jobs"]}
    assert jobs["wide"]["team"] == "product" and jobs["wide"]["p90_duration"] == 3
    assert "team" not in jobs["stray"]  # a team the config does not name: no team
    assert document["fair_share"] == {"half_life_days": 7.0}
    assert check_plan(instance_of(document), plan.grid) == []


def test_a_cycle_lends_idle_quota_and_not_quota_its_owner_waits_for() -> None:
    """`wide` (product, 8 GPUs) borrows research's 4 idle GPUs at once; with research's own job
    waiting, that job starts first and `wide` after it, though `wide` is worth more."""
    for owner_waits in (False, True):
        owner = [_job("own", "research", gpus=4, p50=1, p90=1)] if owner_waits else []
        wide = replace(_job("wide", "product", gpus=8, p50=2, p90=2), priority=50.0)
        snapshot = Snapshot(
            start=T0, cluster=Cluster(gpus=8), queued=[wide, *owner], running=[], demand=[], realtime_sets={}
        )
        document, plan = plan_snapshot(snapshot, _config(), PolicyName.FAST, budget_ms=20.0)
        assert check_plan(instance_of(document), plan.grid) == []
        assert [row[0] for row in plan.grid] == (["own"] * 4 + [None] * 4 if owner_waits else ["wide"] * 8)


def _plan_after(finished: list[Job]) -> tuple[dict[str, Any], Plan, dict[str, dict[str, Any]]]:
    """The cycle's scenario and plan with only ``finished`` jobs, and the scenario's teams by name."""
    snapshot = Snapshot(
        start=T0,
        cluster=Cluster(gpus=8),
        queued=[],
        running=[],
        demand=[],
        realtime_sets={},
        finished=finished,
    )
    document, plan = plan_snapshot(snapshot, _config(), PolicyName.FAST, budget_ms=20.0)
    return document, plan, {team["name"]: team for team in document["teams"]}


def test_past_use_counts_the_finished_jobs_runs_decayed_by_the_half_life() -> None:
    """A finished job of 4 GPUs that ran 2 hours, ending one half-life ago, counts just under
    half of its 8 GPU-hours; a job of a team the config does not name counts nothing."""
    half_life = 7 * 24 * HOUR
    done = replace(
        _job("old", "research", gpus=4, p50=2, p90=2, first_gpu=0),
        gpus=4,
        started_at=T0 - half_life - 2 * HOUR,
        ended_at=T0 - half_life,
        submitted_at=T0 - half_life - 3 * HOUR,
    )
    stray = replace(done, id="stray", team="nobody")
    _, _, teams = _plan_after([done, stray])
    # 8 GPU-hours aged one half-life to one half-life and 2 hours: just under half of them.
    assert 3.95 < teams["research"]["past_gpu_hours"] < 4.0
    assert teams["product"]["past_gpu_hours"] == 0.0
    assert "forecast" not in teams["research"]  # submitted more than a week ago: no arrivals expected


def test_a_teams_forecast_is_its_last_weeks_submitted_gpu_hours_per_hour() -> None:
    """A week of submissions asking 7 x 24 x 2.5 GPU-hours reads 2.5 GPUs per step: 3, 2, 3, 2
    (whole GPUs whose running sum follows the rate), on the scenario's one model."""
    week = 7 * 24
    asked = [
        replace(
            _job(f"j{k}", "product", gpus=1, p50=week * 2.5 / 4, p90=week), submitted_at=T0 - (k + 1) * HOUR
        )
        for k in range(4)
    ]
    late = replace(_job("late", "product", gpus=8, p50=100, p90=100), submitted_at=T0 - 8 * 24 * HOUR)
    finished = [replace(job, ended_at=T0 - HOUR) for job in (*asked, late)]
    document, plan, teams = _plan_after(finished)
    forecast = teams["product"]["forecast"]["default"]
    assert len(forecast) == document["horizon"]
    assert forecast[:4] == [3, 2, 3, 2] and sum(forecast) == round(2.5 * document["horizon"])
    assert "forecast" not in teams["research"]
    assert check_plan(instance_of(document), plan.grid) == []


def test_idle_quota_is_lent_only_to_work_that_gives_it_back_within_the_lending_horizon() -> None:
    """Beyond ``lending_horizon_hours`` (here 4) each team's forecast is its whole quota, so
    an 8-GPU product job borrowing research's idle 4 GPUs starts now only if its P90 end comes
    within the horizon: at 3 hours it does, at 6 it does not (and not later either: every step
    past the horizon keeps the quota), though research has nothing queued or forecast. Without
    the setting (the default) the forecast is the arrivals' alone and the 6-hour job starts."""
    for horizon, p90, starts in ((4.0, 3, True), (4.0, 6, False), (None, 6, True)):
        wide = _job("wide", "product", gpus=8, p50=2, p90=p90)
        snapshot = Snapshot(
            start=T0, cluster=Cluster(gpus=8), queued=[wide], running=[], demand=[], realtime_sets={}
        )
        config = _config(lending_horizon_hours=horizon)
        document, plan = plan_snapshot(snapshot, config, PolicyName.FAST, budget_ms=20.0)
        assert check_plan(instance_of(document), plan.grid) == []
        research = next(team for team in document["teams"] if team["name"] == "research")
        if horizon is None:
            assert "forecast" not in research
        else:
            assert research["forecast"]["default"] == [0] * 4 + [4] * 20
        assert [row[0] for row in plan.grid] == (["wide"] * 8 if starts else [None] * 8)
