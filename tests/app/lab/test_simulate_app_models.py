"""The simulation of an app that lists several GPU models (``apps[i].gpu_models``): every plan
chooses its pool from its demand on each, and the measures count its need where it served, at
that pool's requests per GPU-hour."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from contract.records import PlanRun
from contract.scenario_io import parse_scenario
from forecasting.gpu_mapping import gpus_needed
from forecasting.realtime_training import BUNDLED_TRAFFIC_DIR
from gpuplan.app.core.bridge import STEP, pool_of
from gpuplan.app.lab.simulate import Setup, SimOptions, SimPolicy, run_policy, week_grid
from gpuplan.app.lab.simulate.loop import SimHooks
from gpuplan.app.lab.simulate.measures import hourly, measure, realtime_hours
from scheduler.check import check_plan
from storage.store import Store
from tests.app.lab.two_pools import one_day, write_workload
from tests.service_fixtures import run_cli

#: Requests per GPU-hour on each model: the A100s need 2.5x the GPUs for the same traffic. The
#: A100s come first: the app's one rate (``requests_per_gpu_hour``, what it was measured at
#: before) is theirs, its default pool (the fewest GPU-hours) the H100s.
RATES = {"a100": 40.0, "h100": 100.0}
CONFIG_TEXT = (
    "cluster:\n  pools:\n    - {{name: a100, gpu_model: a100, gpus: 8}}\n"
    "    - {{name: h100, gpu_model: h100, gpus: 8}}\n"
    "apps:\n  - {{id: chat, priority: 90, swap_cap: 2, gpu_models: {{h100: {h100}, a100: {a100}}},\n"
    "     traffic: {traffic}}}\n"
)
TRAFFIC = BUNDLED_TRAFFIC_DIR / "alibaba_genai_lora_hourly.csv"
CONFIG = CONFIG_TEXT.format(traffic=TRAFFIC, **{model: int(rate) for model, rate in RATES.items()})
HEADER = "id,submit_hour,kind,priority,gpus,actual_hours,forecast_hours,gpu_models"
ROWS = (
    "t1,0,training,60,4,5.5,5,any",
    "t2,0.5,training,50,8,3,3,h100",
    "q1,2,quantization,40,1,1,1,any",
    "t3,2,training,70,8,6,6,any",
)


def _setup(folder: Path, config_text: str) -> Setup:
    config = folder / "pools.yaml"
    config.write_text(config_text, encoding="utf-8")
    return one_day(folder, config, write_workload(folder, HEADER, *ROWS))


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return _setup(tmp_path_factory.mktemp("app-models"), CONFIG)


@pytest.mark.parametrize("policy", [SimPolicy.FAST, SimPolicy.FIFO])
def test_an_app_of_two_models_is_planned_on_either_and_served_at_its_pool_s_rate(
    setup: Setup, policy: SimPolicy
) -> None:
    scenarios: list[dict[str, object]] = []

    def planned(store: Store, run: PlanRun) -> None:
        chat = next(job for job in run.scenario["jobs"] if job["id"] == "chat")
        assert set(chat["demand_by_pool"]) == {"h100", "a100"} and "pool" not in chat
        instance = parse_scenario(run.scenario, source=f"run {run.id}")
        assert check_plan(instance, tuple(tuple(row) for row in run.grid)) == []
        scenarios.append(chat)

    run = run_policy(setup, policy, SimOptions(plan_budget_ms=20.0), hooks=SimHooks(planned=planned))
    assert len(scenarios) >= 24
    instance, grid = week_grid(setup, run)
    assert check_plan(instance, grid) == []

    # The need the measures count: each hour's traffic at the rate of the pool chat held GPUs of.
    series = setup.series[0]
    requests = series.requests[series.history_hours : series.history_hours + setup.hours]
    held = {
        (commit.hour - setup.start) // STEP: a.gpus
        for commit in run.commits
        for a in commit.assignments
        if a.job == "chat"
    }
    on = {h: pool_of(setup.pools, min(gpus)) for h, gpus in held.items() if gpus and 0 <= h < setup.hours}
    assert on, "chat never served"
    need = {h: int(gpus_needed(requests[h : h + 1], RATES[pool.name])[0]) for h, pool in on.items() if pool}
    assert setup.apps[0].requests_per_gpu_hour == RATES["a100"]
    if policy is SimPolicy.FIFO:  # a baseline keeps the app on its default pool: the H100s' rate counts
        assert {pool.name for pool in on.values() if pool} == {"h100"}
    counted = realtime_hours(setup, run)["chat"]
    for h, gpus in need.items():
        assert counted.demand[h] == gpus, f"hour {h} on {on[h]}"
    for pool in setup.pools:
        hours = [h for h, p in on.items() if p == pool]
        assert np.sum(hourly(setup, run, pool).rt_demand[hours]) == sum(need[h] for h in hours)
    metrics = measure(setup, run)
    assert sum(p.value for p in metrics.pools.values()) == pytest.approx(metrics.value)
    demand = sum(float(hourly(setup, run, pool).rt_demand.sum()) for pool in setup.pools)
    assert demand == pytest.approx(float(hourly(setup, run).rt_demand.sum()))


def test_an_amendment_adds_gpus_of_the_pool_the_app_serves_on_only(tmp_path: Path) -> None:
    # Needing most GPUs, chat fills the A100s; the traffic seen within an hour asks for more.
    setup = _setup(tmp_path, CONFIG_TEXT.format(traffic=TRAFFIC, a100=12, h100=30))
    run = run_policy(setup, SimPolicy.FAST, SimOptions(plan_budget_ms=20.0))
    committed = {c.hour: a.gpus for c in run.commits for a in c.assignments if a.job == "chat"}
    added = [(m.hour, a.gpus) for m in run.amendments for a in m.assignments if a.job == "chat"]
    for hour, gpus in added:
        pools = {pool_of(setup.pools, gpu) for gpu in (*committed.get(hour, ()), *gpus)}
        assert len(pools) == 1, f"chat on {pools} in {hour}"
    instance, grid = week_grid(setup, run)
    assert check_plan(instance, grid) == []


def test_the_json_gives_the_app_s_rate_on_each_of_its_pools(tmp_path: Path) -> None:
    config = tmp_path / "pools.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    workload = write_workload(tmp_path, HEADER, *ROWS)
    args = ("--config", config, "--days", 1, "--workload", workload, "--policy", "fifo", "--json")
    result = run_cli("simulate", *args)
    assert result.code == 0, result.err
    answer = json.loads(result.out)
    app = answer["cluster"]["apps"][0]
    assert app["pools"] == RATES and "pool" not in app
    served = answer["policies"]["fifo"]["pools"]
    assert served["a100"]["rt_served"] == 1.0  # nothing asked of it: chat served on the H100s
