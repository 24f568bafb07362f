"""Teams: the scenario's teams section, constraint 7 (lending without preemption) in the checker
and in every policy's plan, the fair share in the objective, and scenarios without teams
unchanged."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.errors import InputError
from contract.scenario import BatchJob, Instance
from gpuplan.cli import main
from scheduler import baselines
from scheduler.check import check_plan
from scheduler.lending import Ledger, excesses, frames
from scheduler.metrics import score
from scheduler.model import Placement
from scheduler.policies import PolicyName, SolveOptions, plan
from scheduler.teams import weighted
from tests.strategies import instance_of, pooled_scenarios, scenarios

WORK = SolveOptions(wall_clock=False, time_limit_s=0.5, workers=1)
BASELINES = (PolicyName.FIFO, PolicyName.FIFO_BACKFILL, PolicyName.PRIORITY_BACKFILL, PolicyName.FASTEST_FREE)
TEAMS = ("red", "blue", "green")
#: The checker's line for `b1` of :func:`lender_and_borrower` (P90 5) holding `a`'s quota at step 4.
REFUSED_LOAN = (
    "constraint 7 (teams: GPUs beyond a team's quota only where lent, to P90 ends before the "
    "owner's need): job b1, GPU -, step 4: on GPU model default queued work holds 4 GPUs beyond "
    "its teams' quotas (to its P90 ends); the quotas' owners can lend 0 then"
)


def lender_and_borrower(p90: int) -> dict[str, Any]:
    """8 GPUs, `a` and `b` 4 each; `b1` (all 8 GPUs, 3 steps, P90 ``p90``) borrows `a`'s 4, whose
    own job `a1` arrives at step 4."""
    return {
        "gpus": 8,
        "horizon": 8,
        "teams": [{"name": "a", "quota": {"default": 4}}, {"name": "b", "quota": {"default": 4}}],
        "jobs": [
            {
                "id": "b1",
                "kind": "training",
                "priority": 10,
                "gpus": 8,
                "duration": 3,
                "team": "b",
                "p90_duration": p90,
            },
            {
                "id": "a1",
                "kind": "training",
                "priority": 1,
                "gpus": 4,
                "duration": 2,
                "team": "a",
                "release": 4,
            },
        ],
    }


def grid_with(instance: Instance, runs: dict[str, tuple[int, int]]) -> list[list[str | None]]:
    """A grid of each job in ``runs`` (job -> (first GPU, start)) for its steps there."""
    grid: list[list[str | None]] = [[None] * instance.horizon_steps for _ in range(instance.gpus)]
    for job_id, (first, start) in runs.items():
        job = instance.jobs_by_id[job_id]
        assert isinstance(job, BatchJob)
        for g in range(first, first + job.gpus):
            for t in range(start, instance.run_end(job, start, first)):
                grid[g][t] = job_id
    return grid


def test_the_checker_refuses_a_loan_whose_p90_outlasts_the_owners_return() -> None:
    instance = instance_of(lender_and_borrower(p90=5))
    violations = check_plan(instance, grid_with(instance, {"b1": (0, 0), "a1": (0, 4)}))
    assert [(v.constraint, v.job, v.step) for v in violations] == [(7, "b1", 4)]
    assert str(violations[0]) == REFUSED_LOAN


def test_a_loan_whose_p90_ends_before_the_owner_returns_is_legal() -> None:
    instance = instance_of(lender_and_borrower(p90=4))
    assert check_plan(instance, grid_with(instance, {"b1": (0, 0), "a1": (0, 4)})) == []
    for policy in (PolicyName.FAST, PolicyName.FULL, *BASELINES):
        grid = plan(instance, policy, WORK).grid
        assert grid[0][:3] == ("b1",) * 3 and grid[0][4:6] == ("a1",) * 2, policy


def test_every_policy_waits_with_a_loan_that_could_outlast_the_owners_return() -> None:
    instance = instance_of(lender_and_borrower(p90=5))
    for policy in (PolicyName.FAST, PolicyName.FULL, *BASELINES):
        grid = plan(instance, policy, WORK).grid
        assert check_plan(instance, grid) == []
        start = min(t for t in range(8) if grid[7][t] == "b1")
        assert start >= 6, policy  # after a1 (steps 4-5), never before it
        assert grid[0][4:6] == ("a1",) * 2, policy


def test_the_owners_forecast_is_a_need_that_stops_a_loan() -> None:
    doc = lender_and_borrower(p90=3)
    doc["jobs"] = doc["jobs"][:1]
    doc["teams"][0]["forecast"] = {"default": [0, 0, 2, 0, 0, 0, 0, 0]}
    instance = instance_of(doc)
    assert [v.step for v in check_plan(instance, grid_with(instance, {"b1": (0, 0)}))] == [2]
    assert check_plan(instance, grid_with(instance, {"b1": (0, 3)})) == []


def test_a_waiting_owner_job_stops_a_loan_even_when_the_plan_delays_it() -> None:
    """`a1` is released at step 0: while it waits, its quota may not be lent."""
    doc = lender_and_borrower(p90=3)
    doc["jobs"][1]["release"] = 0
    instance = instance_of(doc)
    assert [v.step for v in check_plan(instance, grid_with(instance, {"b1": (0, 0), "a1": (0, 3)}))] == [
        0,
        1,
        2,
    ]
    assert check_plan(instance, grid_with(instance, {"a1": (0, 0), "b1": (0, 2)})) == []


def test_unowned_gpus_are_free_to_borrow() -> None:
    doc = lender_and_borrower(p90=8)
    doc["teams"] = [{"name": "a", "quota": {"default": 4}}, {"name": "b"}]
    doc["jobs"][0]["gpus"] = 4
    instance = instance_of(doc)
    assert check_plan(instance, grid_with(instance, {"b1": (4, 0), "a1": (0, 4)})) == []


def test_fair_share_weighs_a_team_by_its_share_of_past_use() -> None:
    doc = lender_and_borrower(p90=3)
    doc["teams"] = [
        {"name": "a", "weight": 1, "past_gpu_hours": 0},
        {"name": "b", "weight": 1, "past_gpu_hours": 100},
    ]
    instance = instance_of(doc)
    assert instance.team_factors == {"a": 2.0, "b": 0.5}  # 2 ** (1 - 0 / 0.5), 2 ** (1 - 1 / 0.5)
    grid = grid_with(instance, {"b1": (0, 0)})
    plain = instance_of({**copy.deepcopy(doc), "teams": [{"name": "a"}, {"name": "b"}]})
    assert score(instance, grid).value == pytest.approx(0.5 * score(plain, grid).value)


def test_fair_share_decides_who_gets_what_neither_owns() -> None:
    """Two teams without quotas, one 4-GPU slot now: the team that used less goes first,
    though the other's job has the higher priority; inside a team, priority still decides."""
    doc: dict[str, Any] = {
        "gpus": 4,
        "horizon": 4,
        "teams": [
            {"name": "heavy", "past_gpu_hours": 900},
            {"name": "light", "past_gpu_hours": 100},
        ],
        "jobs": [
            {"id": "h", "kind": "training", "priority": 12, "gpus": 4, "duration": 2, "team": "heavy"},
            {"id": "l", "kind": "training", "priority": 10, "gpus": 4, "duration": 2, "team": "light"},
            {"id": "l2", "kind": "training", "priority": 11, "gpus": 4, "duration": 2, "team": "light"},
        ],
    }
    instance = instance_of(doc)
    for policy in (PolicyName.FAST, PolicyName.FULL):
        grid = plan(instance, policy, WORK).grid
        assert grid[0][:4] == ("l2", "l2", "l", "l"), policy


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"teams": [{"name": "a", "quota": {"h100": 2}}]},
            "`teams[0].quota.h100` must be a GPU model of the cluster ['default']; got 'h100'.",
        ),
        (
            {"teams": [{"name": "a", "quota": {"default": -1}}]},
            "`teams[0].quota.default` must be an integer >= 0; got -1.",
        ),
        (
            {"teams": [{"name": "a", "quota": {"default": 9}}]},
            "`teams[0].quota.default` must be an integer <= 8; got 9.",
        ),
        ({"teams": [{"name": "a", "weight": 0}]}, "`teams[0].weight` must be a number > 0; got 0."),
        (
            {"teams": [{"name": "a"}, {"name": "a"}]},
            "`teams[1].name` must be a name used by no other team; got 'a'.",
        ),
        (
            {"teams": [{"name": "a", "past_gpu_hours": -2}]},
            "`teams[0].past_gpu_hours` must be a number of GPU-hours >= 0; got -2.0.",
        ),
        (
            {"fair_share": {"half_life_days": 7}},
            "`fair_share` must be absent in a scenario without a `teams` section",
        ),
        (
            {"teams": [{"name": "a"}], "fair_share": {"half_life_days": 0}},
            "`fair_share.half_life_days` must be a number > 0; got 0.",
        ),
        (
            {"teams": [{"name": "a", "forecast": {"default": [1]}}]},
            "`teams[0].forecast.default` must be a list of 4 integers (one per step); got '1 values'.",
        ),
    ],
)
def test_a_bad_teams_section_is_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    doc = {"gpus": 8, "horizon": 4, "jobs": [], **change}
    with pytest.raises(InputError, match=re.escape(message)):
        instance_of(doc)


@pytest.mark.parametrize(
    ("job", "teams", "message"),
    [
        (
            {"team": "x"},
            [{"name": "a"}],
            "`jobs[0].team` must be one of the scenario's teams ['a']; got 'x'.",
        ),
        (
            {"team": "a"},
            None,
            "`jobs[0].team` must be absent in a scenario without a `teams` section; got 'a'.",
        ),
        ({"p90_duration": 1}, None, "`jobs[0].p90_duration` must be an integer >= 2; got 1."),
    ],
)
def test_a_bad_team_or_p90_on_a_job_is_refused(
    job: dict[str, Any], teams: list[Any] | None, message: str
) -> None:
    doc: dict[str, Any] = {
        "gpus": 8,
        "horizon": 4,
        "jobs": [{"id": "j", "kind": "training", "priority": 1, "gpus": 2, "duration": 2, **job}],
    }
    if teams is not None:
        doc["teams"] = teams
    with pytest.raises(InputError, match=re.escape(message)):
        instance_of(doc)


@st.composite
def team_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """A scenario of one pool or several, with 1-3 teams holding random quotas per GPU model (at
    most a model's GPUs, their sum sometimes above it), most work in a team, batch jobs with P90s
    above their durations, some forecasts and past use."""
    doc = draw(st.one_of(scenarios(max_gpus=16, max_jobs=8), pooled_scenarios(max_pool_gpus=8, max_jobs=8)))
    models: dict[str, int] = {}
    for pool in doc.get("pools", [{"gpu_model": "default", "gpus": doc.get("gpus", 0)}]):
        models[pool["gpu_model"]] = models.get(pool["gpu_model"], 0) + pool["gpus"]
    names = TEAMS[: draw(st.integers(1, 3))]
    horizon = doc["horizon"]
    teams = []
    for name in names:
        team: dict[str, Any] = {
            "name": name,
            "quota": {m: draw(st.integers(0, gpus)) for m, gpus in models.items() if draw(st.booleans())},
            "weight": draw(st.sampled_from([1, 2, 3])),
            "past_gpu_hours": draw(st.sampled_from([0, 10, 100])),
        }
        if draw(st.integers(0, 3)) == 0:
            model = draw(st.sampled_from(sorted(models)))
            team["forecast"] = {
                model: draw(st.lists(st.integers(0, models[model]), min_size=horizon, max_size=horizon))
            }
        teams.append(team)
    doc["teams"] = teams
    for job in doc["jobs"]:
        if draw(st.integers(0, 4)):
            job["team"] = draw(st.sampled_from(names))
        if job["kind"] != "realtime" and draw(st.booleans()):
            job["p90_duration"] = job["duration"] + draw(st.integers(0, 4))
    return doc


ANY = "any team"


def p90_held(
    instance: Instance, grid: tuple[tuple[str | None, ...], ...], mask: int, t: int, team: str | None = ANY
) -> int:
    """GPUs of ``mask`` that batch work (of ``team``; by default anyone's) holds at ``t`` were
    every queued job to run to its P90 end."""
    held = 0
    ours = {j.id for j in instance.batch_jobs if team in (ANY, j.team)}
    for g, row in enumerate(grid):
        if mask >> g & 1 and row[t] in ours:
            held |= 1 << g
    for job in instance.queued_jobs:
        if job.id not in ours:
            continue
        rows = [g for g, row in enumerate(grid) if job.id in row]
        if rows:
            start = grid[rows[0]].index(job.id)
            if start <= t < instance.p90_end(job, start, rows[0]):
                held |= sum(1 << g for g in rows) & mask
    return held.bit_count()


def owners_room(instance: Instance, grid: tuple[tuple[str | None, ...], ...]) -> list[str]:
    """Where a team below its quota on a model, with a waiting job that fits what is left of it,
    finds fewer GPUs of the model free than that job (were every batch job to run to its P90 and
    every service to take its demand), though the fixed work holds nothing beyond quotas and the
    quotas fit the model: the guarantee of docs/teams.md, restated from the grid alone."""
    bad = []
    for model in dict.fromkeys(p.gpu_model for p in instance.pools):
        pools = [p for p in instance.pools if p.gpu_model == model]
        mask = sum(p.mask for p in pools)
        quota = {team.name: team.quota.get(model, 0) for team in instance.teams}
        for t in range(instance.horizon_steps):
            up = (mask & ~instance.down_masks[t]).bit_count()
            demand = dict.fromkeys([*quota, None], 0)
            for rt in instance.realtime_jobs:
                if instance.realtime_pool(rt) in pools:
                    demand[rt.team] += rt.demand[t]
            running = dict.fromkeys([*quota, None], 0)
            for r in instance.running_batch.values():
                job = instance.jobs_by_id[r.job_id]
                if r.mask & mask and t < r.remaining_steps:
                    running[job.team] += r.gpus
            if demand[None] + running[None] or any(demand[n] + running[n] > q for n, q in quota.items()):
                continue
            if sum(quota.values()) > up:
                continue
            free = up - p90_held(instance, grid, mask, t) - sum(demand.values())
            for job in instance.queued_jobs:
                if job.team is None or not quota[job.team] or job.release_step > t:
                    continue
                if not any(p in pools for p in instance.allowed_pools(job)):
                    continue
                rows = [g for g, row in enumerate(grid) if job.id in row]
                if rows and grid[rows[0]].index(job.id) <= t:
                    continue
                team = job.team
                own = p90_held(instance, grid, mask, t, team)
                if job.gpus + own + demand[team] <= quota[team] and free < job.gpus:
                    bad.append(f"{model} step {t}: {team}'s {job.id} waits with {free} GPUs free")
    return bad


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=team_scenarios())
def test_no_plan_lends_a_quota_its_owner_could_use(doc: dict[str, Any]) -> None:
    instance = instance_of(doc)
    for policy in (PolicyName.FAST, *BASELINES):
        grid = plan(instance, policy, WORK).grid
        assert check_plan(instance, grid) == [], policy
        assert owners_room(instance, grid) == [], policy


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=team_scenarios())
def test_the_fast_mode_with_teams_never_scores_below_a_baseline(doc: dict[str, Any]) -> None:
    instance = instance_of(doc)
    fast = plan(instance, PolicyName.FAST, WORK).metrics.objective
    for policy in (PolicyName.FIFO, PolicyName.FIFO_BACKFILL, PolicyName.PRIORITY_BACKFILL):
        assert fast >= plan(instance, policy, WORK).metrics.objective - 1e-6, policy


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=team_scenarios())
def test_the_full_mode_keeps_constraint_7_and_never_scores_below_fast(doc: dict[str, Any]) -> None:
    instance = instance_of(doc)
    full = plan(instance, PolicyName.FULL, WORK)
    assert check_plan(instance, full.grid) == []
    assert owners_room(instance, full.grid) == []
    assert full.metrics.objective >= plan(instance, PolicyName.FAST, WORK).metrics.objective - 1e-6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.one_of(scenarios(max_gpus=16, max_jobs=8), pooled_scenarios(max_jobs=6)))
def test_teams_without_quotas_or_past_use_plan_as_no_teams(doc: dict[str, Any]) -> None:
    plain = instance_of(doc)
    teamed = copy.deepcopy(doc)
    teamed["teams"] = [{"name": "a", "weight": 2}, {"name": "b"}]
    for k, job in enumerate(teamed["jobs"]):
        job["team"] = "ab"[k % 2]
    with_teams = instance_of(teamed)
    for policy in (PolicyName.FAST, PolicyName.FULL, *BASELINES):
        assert plan(with_teams, policy, WORK).grid == plan(plain, policy, WORK).grid, policy


def test_plan_and_validate_on_the_command_line_keep_constraint_7(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "teams.json"
    scenario.write_text(json.dumps(lender_and_borrower(p90=5)))
    out = tmp_path / "plan.json"
    assert main(["plan", str(scenario), "--policy", "fast", "--out", str(out)]) == 0
    assert main(["validate", str(scenario), str(out)]) == 0
    assert capsys.readouterr().out.startswith("legal: ")
    instance = instance_of(lender_and_borrower(p90=5))
    document = json.loads(out.read_text())
    document["grid"] = grid_with(instance, {"b1": (0, 0), "a1": (0, 4)})
    out.write_text(json.dumps(document))
    assert main(["validate", str(scenario), str(out)]) == 1
    assert capsys.readouterr().out.splitlines() == [REFUSED_LOAN]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=team_scenarios(), data=st.data())
def test_the_repair_s_ledger_counts_as_the_checker_does(doc: dict[str, Any], data: st.DataObject) -> None:
    """Under jobs taken out and put back one at a time, the ledger's first breach and its answer
    to "does this placement fit" are what :func:`excesses` counts afresh."""
    instance = instance_of(doc)
    models = frames(instance)
    placements = dict(baselines.fifo_backfill(weighted(instance)).batch)
    ledger = Ledger(instance, models, placements)
    jobs = {job.id: job for job in instance.queued_jobs}
    for _ in range(data.draw(st.integers(0, 6))):
        fresh = excesses(instance, ledger.placements, models)
        breach = ledger.breach()
        assert (breach is None) == (not fresh) == ledger.legal
        if breach is not None:
            assert (breach.model, breach.step, breach.borrowed, breach.lendable) == (
                fresh[0].model,
                fresh[0].step,
                fresh[0].borrowed,
                fresh[0].lendable,
            )
            assert sorted(breach.jobs) == sorted(fresh[0].jobs)
        if not ledger.placements:
            break
        job = jobs[data.draw(st.sampled_from(sorted(ledger.placements)))]
        placement = ledger.take_out(job)
        moved = Placement(
            start_step=data.draw(st.integers(job.release_step, instance.horizon_steps - 1)),
            first_gpu=placement.first_gpu,
        )
        assert ledger.fits(job, moved) == (
            not excesses(instance, {**ledger.placements, job.id: moved}, models)
        )
        if data.draw(st.booleans()):
            ledger.place(job, placement)
