"""The simulation with the config's teams: the workload's team column, each job its team's, the
teams' measures (share, entitlement, reclaim wait, fairness, P90 overruns on lent GPUs), and the
hard-quota and lend-anything baselines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contract.errors import InputError
from contract.scenario_io import parse_scenario
from gpuplan.app.lab.simulate import Setup, SimOptions, SimPolicy, run_policy, week_grid
from gpuplan.app.lab.simulate.cycles import hard_quotas
from gpuplan.app.lab.simulate.fairness import TeamMetrics, fairness_of, jain
from gpuplan.app.lab.simulate.measures import measure
from gpuplan.app.lab.workload import read_workload
from scheduler.check import check_plan
from scheduler.policies import PolicyName, plan
from tests.app.lab.two_pools import one_day, write_config, write_workload

HEADER = "id,submit_hour,kind,priority,gpus,actual_hours,forecast_hours,gpu_models,team"
#: `p1` (product, all 8 H100 GPUs) borrows research's 4 with a P90 of 2 hours, ends at 6; research's
#: `r1` (4 GPUs, its quota) arrives at hour 3 and waits for it.
OVERRUN = (
    "p1,0,training,60,8,6,2,h100,product",
    "r1,3,training,50,4,2,2,h100,research",
)


def _config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path,
        "teams.yaml",
        "teams:\n  - {name: research, quota: {h100: 4, a100: 2}, weight: 2}\n  - {name: product, quota: {h100: 4, a100: 2}}\n",
    )


def _workload(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    return write_workload(tmp_path, header, *rows)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    folder = tmp_path_factory.mktemp("teams")
    return one_day(folder, _config(folder), _workload(folder, *OVERRUN))


def test_the_workload_s_team_column_names_a_config_team(tmp_path: Path) -> None:
    jobs = read_workload(
        _workload(tmp_path, "a,0,training,1,1,1,1,any,research", "b,0,training,1,1,1,1,any,"),
        cluster_gpus=16,
        models=["h100", "a100"],
        teams=["research"],
    )
    assert [(job.id, job.team) for job in jobs] == [("a", "research"), ("b", None)]
    with pytest.raises(InputError, match=re.escape("`team` must be one of the config's teams ['research']")):
        read_workload(
            _workload(tmp_path, "a,0,training,1,1,1,1,any,ops"),
            cluster_gpus=16,
            models=["h100", "a100"],
            teams=["research"],
        )
    with pytest.raises(InputError, match=re.escape("`columns` must be a team column only with the config")):
        read_workload(
            _workload(tmp_path, "a,0,training,1,1,1,1,any,ops"), cluster_gpus=16, models=["h100", "a100"]
        )


def test_jain_s_index() -> None:
    assert jain([1.0, 1.0, 1.0]) == 1.0
    assert jain([1.0, 0.0]) == 0.5
    assert jain([]) == 1.0


def _team(entitlement: float, backlog_share: float, backlog_hours: float = 10.0) -> TeamMetrics:
    return TeamMetrics(
        gpu_hours=0.0,
        share=0.0,
        entitlement=entitlement,
        backlog_hours=backlog_hours,
        backlog_share=backlog_share,
        wait_p50_h=0.0,
        wait_p90_h=0.0,
        reclaim_wait_h_p90=0.0,
    )


def test_fairness_is_jains_index_of_each_backlogged_teams_part_of_its_entitlement_uncapped() -> None:
    """A team at 170% of its entitlement beside one at 90% is not fair sharing (a cap at 100%
    would read 0.997); a team without an hour of backlog, or without an entitlement, is not judged."""
    teams = {"a": _team(0.2, 0.34), "b": _team(0.3, 0.27)}
    assert fairness_of(teams) == pytest.approx(jain([1.7, 0.9])) and fairness_of(teams) < 0.95
    idle = {**teams, "idle": _team(0.3, 0.0, backlog_hours=0.5), "none": _team(0.0, 0.1)}
    assert fairness_of(idle) == fairness_of(teams)
    assert fairness_of({"a": _team(0.2, 0.2), "b": _team(0.3, 0.3)}) == pytest.approx(1.0)


def test_a_borrower_past_its_p90_makes_the_owner_wait_and_is_counted(setup: Setup) -> None:
    run = run_policy(setup, SimPolicy.FAST, SimOptions())
    instance, grid = week_grid(setup, run)
    assert check_plan(instance, grid) == []
    assert run.started["p1"] == setup.start  # lent: its P90 end (hour 2) comes before r1's arrival
    metrics = measure(setup, run)
    assert metrics.teams is not None
    research = metrics.teams.teams["research"]
    assert metrics.teams.lent_p90_overruns == 1
    assert research.reclaim_wait_h_p90 >= 2.5  # from hour 3 to p1's end at 6 (less the sampling)
    assert research.entitlement == pytest.approx(6 / 16)
    json = metrics.as_json()
    assert set(json["teams"]) == {"research", "product"} and "fairness" in json
    assert set(json["teams"]["research"]) >= {
        "gpu_hours",
        "share",
        "entitlement",
        "wait_p50_h",
        "wait_p90_h",
        "reclaim_wait_h_p90",
    }


def test_with_hard_quotas_nothing_is_lent(setup: Setup) -> None:
    run = run_policy(setup, SimPolicy.FIFO_QUOTA, SimOptions())
    instance, grid = week_grid(setup, run)
    assert check_plan(instance, grid) == []
    assert "p1" not in run.started  # 8 GPUs beyond product's 4: never, though research's lie idle
    metrics = measure(setup, run)
    assert metrics.teams is not None and metrics.teams.lent_p90_overruns == 0
    lend = run_policy(setup, SimPolicy.FIFO_LEND, SimOptions())
    assert lend.started["p1"] == setup.start  # any idle GPU: taken at once


def test_hard_quotas_make_every_owner_need_its_whole_quota() -> None:
    doc = {
        "gpus": 8,
        "horizon": 4,
        "teams": [{"name": "a", "quota": {"default": 4}}, {"name": "b", "quota": {"default": 4}}],
        "jobs": [{"id": "b1", "kind": "training", "priority": 5, "gpus": 8, "duration": 1, "team": "b"}],
    }
    assert plan(parse_scenario(doc, source="t"), PolicyName.FIFO).metrics.completed == 1
    quota = parse_scenario(hard_quotas(doc), source="t")
    assert plan(quota, PolicyName.FIFO).metrics.completed == 0
    assert hard_quotas({"gpus": 8, "jobs": []}) == {"gpus": 8, "jobs": []}


def test_the_configs_lending_horizon_reaches_the_simulated_daemon(tmp_path: Path) -> None:
    """With ``lending_horizon_hours: 1`` research's idle quota is lent only to work whose P90 end
    comes within an hour: `p1` (P90 2 hours) no longer starts at once, as it does without it."""
    config = write_config(
        tmp_path,
        "teams.yaml",
        "teams:\n  - {name: research, quota: {h100: 4, a100: 2}, weight: 2}\n  - {name: product, quota: {h100: 4, a100: 2}}\n"
        "lending_horizon_hours: 1\n",
    )
    setup = one_day(tmp_path, config, _workload(tmp_path, *OVERRUN))
    assert setup.lending_horizon_hours == 1.0
    run = run_policy(setup, SimPolicy.FAST, SimOptions())
    instance, grid = week_grid(setup, run)
    assert check_plan(instance, grid) == []
    assert run.started.get("p1") != setup.start
