"""The simulation of a cluster of several pools: each job where its models allow, for its hours
there; every plan of every cycle legal; per-pool measures; the workload's per-model columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.records import PlanRun
from contract.scenario_io import parse_scenario
from gpuplan.app.lab.simulate import Setup, SimOptions, SimPolicy, run_policy, week_grid
from gpuplan.app.lab.simulate.loop import SimHooks
from gpuplan.app.lab.simulate.measures import job_pool_of, measure
from scheduler.check import check_plan
from storage.store import Store
from tests.app.lab.two_pools import one_day, write_config, write_workload
from tests.service_fixtures import run_cli

HEADER = "id,submit_hour,kind,priority,gpus,actual_hours,forecast_hours,gpu_models,forecast_hours:a100,actual_hours:a100"
ROWS = (
    "t1,0,training,60,4,5.5,5,any,10,11",
    "t2,0.5,training,50,8,3,3,h100,,",
    "b1,1,batch_inference,30,2,2,2,a100,4,4.5",
    "q1,2,quantization,40,1,1,1,any,,",
    "t3,2,training,70,8,6,6,any,12,12",
    "t4,3,training,45,4,4,4,any,8,8",
)


def _config(tmp_path: Path) -> Path:
    return write_config(tmp_path, "pools.yaml")


def _workload(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    return write_workload(tmp_path, header, *rows)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    folder = tmp_path_factory.mktemp("pools")
    return one_day(folder, _config(folder), _workload(folder, *ROWS))


def test_the_config_s_pools_and_the_apps_pool_are_the_simulated_cluster(setup: Setup) -> None:
    assert [(p.name, p.first_gpu, p.gpus) for p in setup.pools] == [("h100", 0, 8), ("a100", 8, 8)]
    chat = setup.app_pool("chat")
    assert chat is not None and chat.name == "a100"
    by_id = {job.id: job for job in setup.jobs}
    # hours per model stated: the reference's forecast_hours and the a100 column
    assert setup.estimates["t1"].by_model == {"h100-80gb": (5.0, 5.0), "a100-40gb": (10.0, 10.0)}
    assert setup.estimates["t2"].by_model is not None and list(setup.estimates["t2"].by_model) == [
        "h100-80gb"
    ]
    # a job runs its actual_hours:M on a pool of M, else actual_hours in its forecast's ratio
    assert setup.actual_hours(by_id["t1"], 8) == 11.0 and setup.actual_hours(by_id["t1"], 4) == 5.5
    q1 = setup.estimates["q1"]
    assert q1.by_model is not None
    ratio = q1.by_model["a100-40gb"][0] / q1.hours_p50
    assert ratio > 1 and setup.actual_hours(by_id["q1"], 8) == pytest.approx(ratio)


@pytest.mark.parametrize("policy", [SimPolicy.FAST, SimPolicy.FASTEST_FREE, SimPolicy.FIFO])
def test_every_cycle_s_plan_is_legal_and_each_job_runs_on_a_pool_it_may(
    setup: Setup, policy: SimPolicy
) -> None:
    checked: list[int | None] = []

    def planned(store: Store, run: PlanRun) -> None:
        instance = parse_scenario(run.scenario, source=f"run {run.id}")
        violations = check_plan(instance, tuple(tuple(row) for row in run.grid))
        assert not violations, f"{policy.value} at {run.created_at}: {violations[:3]}"
        assert [p.name for p in instance.pools] == ["h100", "a100"]
        checked.append(run.id)

    run = run_policy(setup, policy, SimOptions(plan_budget_ms=20.0), hooks=SimHooks(planned=planned))
    assert len(checked) >= 24  # one plan an hour at least
    instance, grid = week_grid(setup, run)
    assert check_plan(instance, grid) == []
    pools = {job: job_pool_of(setup, run, job) for job in run.started}
    assert {"t2", "b1"} <= set(pools)
    assert pools["t2"] is not None and pools["t2"].name == "h100"  # h100 only
    assert pools["b1"] is not None and pools["b1"].name == "a100"  # a100 only
    metrics = measure(setup, run)
    assert set(metrics.pools) == {"h100", "a100"}
    assert sum(p.value for p in metrics.pools.values()) == pytest.approx(metrics.value)
    gpu_hours = sum(p.utilization * p.gpus for p in metrics.pools.values())
    assert gpu_hours == pytest.approx(metrics.utilization * setup.cluster.gpus)
    assert metrics.pools["h100"].rt_served == 1.0  # no app there


def test_the_json_reports_each_pool_per_policy_and_fastest_free_is_a_policy(tmp_path: Path) -> None:
    result = run_cli(
        "simulate",
        "--config",
        _config(tmp_path),
        "--days",
        1,
        "--workload",
        _workload(tmp_path, *ROWS),
        "--policy",
        "fast,fastest-free",
        "--json",
    )
    assert result.code == 0, result.err
    answer = json.loads(result.out)
    assert [p["name"] for p in answer["cluster"]["pools"]] == ["h100", "a100"]
    assert answer["cluster"]["apps"][0]["pool"] == "a100"
    assert set(answer["policies"]) == {"fast", "fastest-free"}
    for metrics in answer["policies"].values():
        assert set(metrics["pools"]) == {"h100", "a100"}
        assert set(metrics["pools"]["a100"]) == {
            "gpu_model",
            "gpus",
            "utilization",
            "value",
            "rt_served",
            "started",
        }


def test_a_one_pool_json_has_no_pools(tmp_path: Path) -> None:
    jobs = _workload(
        tmp_path,
        "t1,0,training,60,4,5.5,5",
        header="id,submit_hour,kind,priority,gpus,actual_hours,forecast_hours",
    )
    result = run_cli(
        "simulate", "--days", 1, "--gpus", 16, "--policy", "fastest-free", "--workload", jobs, "--json"
    )
    assert result.code == 0, result.err
    answer = json.loads(result.out)
    assert "pools" not in answer["cluster"] and "pools" not in answer["policies"]["fastest-free"]


@pytest.mark.parametrize(
    ("header", "row", "pooled", "message"),
    [
        (
            "id,submit_hour,kind,priority,gpus,actual_hours,forecast_hours,forecast_hours:l40s",
            "t1,0,training,60,4,5.5,5,9",
            True,
            (
                "`columns` must be hours per GPU model as forecast_hours:M or actual_hours:M, M a GPU model "
                "of the cluster's pools ['h100-80gb', 'a100-40gb']; got 'forecast_hours:l40s'"
            ),
        ),
        (
            "id,submit_hour,kind,priority,gpus,actual_hours,forecast_hours,gpu_models",
            "t1,0,training,60,4,5.5,5,h100|l40s",
            True,
            "`gpu_models` must be 'any' or GPU models of the cluster's pools",
        ),
        (
            "id,submit_hour,kind,priority,gpus,actual_hours,forecast_hours,actual_hours:a100",
            "t1,0,training,60,4,5.5,5,-2",
            True,
            "`actual_hours:a100` must be a number of hours > 0, or empty",
        ),
        (
            "id,submit_hour,kind,priority,gpus,actual_hours,forecast_hours,gpu_models",
            "t1,0,training,60,4,5.5,5,any",
            False,
            "`columns` must be gpu_models and hours per GPU model only on a cluster of several pools",
        ),
    ],
)
def test_bad_per_model_columns_are_one_line_naming_the_field(
    tmp_path: Path, header: str, row: str, pooled: bool, message: str
) -> None:
    cluster = ("--config", _config(tmp_path)) if pooled else ("--gpus", 16)
    result = run_cli("simulate", *cluster, "--days", 1, "--workload", _workload(tmp_path, row, header=header))
    assert result.code == 2
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.err
