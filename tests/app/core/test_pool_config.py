"""A daemon on a cluster of pools: the config's ``cluster.pools``, the plans over them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from contract.scenario_io import MAX_CLUSTER_GPUS, parse_scenario
from gpuplan.app.core.config import demo_config, load_config
from scheduler.check import check_plan
from scheduler.lns import MIN_BUDGET_MS
from storage.factory import open_store
from tests.service_fixtures import _in_tmp_path, models_dir, run_cli

__all__ = ["_in_tmp_path", "models_dir"]

T0 = datetime(2026, 11, 30, 10, 5, tzinfo=UTC)
POOLS = [{"name": "h100", "gpu_model": "h100", "gpus": 8}, {"name": "a100", "gpu_model": "a100", "gpus": 8}]


def _config(tmp_path: Path, cluster: dict, apps: list[dict] | None = None, **top: object) -> Path:
    traffic = str(demo_config().traffic[0].path)
    app = {"id": "chat", "peak_gpus": 3, "traffic": traffic, "swap_cap": 2, "priority": 90}
    path = tmp_path / "config.yaml"
    document = {
        "cluster": cluster,
        "apps": [app] if apps is None else apps,
        "demo_queue": True,
        "plan_budget_ms": MIN_BUDGET_MS,
        "plan_wall_clock": False,
        "review_every_hours": None,
        **top,
    }
    path.write_text(yaml.safe_dump(document))
    return path


def _cycle(config: Path, db: str, models: Path, at: datetime, out: Path) -> tuple[dict, list]:
    """One daemon cycle at ``at``, and the run it made as exported to ``out``: scenario, grid."""
    ran = run_cli(
        "daemon", "--once", "--config", config, "--db", db, "--models", models, "--at", at.isoformat()
    )
    assert ran.code == 0, ran.err
    exported = run_cli("export", "latest", "--db", db, "--out", out)
    assert exported.code == 0, exported.err
    return json.loads((out / "scenario.json").read_text()), json.loads((out / "plan.json").read_text())[
        "grid"
    ]


def test_a_two_pool_daemon_plans_each_job_inside_one_pool_and_refuses_a_job_wider_than_every_pool(
    tmp_path: Path, models_dir: Path
) -> None:
    traffic = str(demo_config().traffic[0].path)
    app = {"id": "chat", "peak_gpus": 3, "traffic": traffic, "swap_cap": 2, "priority": 90, "pool": "a100"}
    config = _config(tmp_path, {"pools": POOLS}, [app])
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    for hour, at in enumerate((T0, T0 + timedelta(hours=1))):  # the second plans over running work
        scenario, grid = _cycle(config, db, models_dir, at, tmp_path / f"export-{hour}")
        assert [(p["name"], p["gpus"]) for p in scenario["pools"]] == [("h100", 8), ("a100", 8)]
        instance = parse_scenario(scenario, source="exported")
        assert len(instance.pools) == 2 and instance.batch_jobs
        assert check_plan(instance, grid) == []
        pool_of = {gpu: pool.name for pool in instance.pools for gpu in range(pool.first_gpu, pool.end_gpu)}
        held: dict[str, set[str]] = {}
        for gpu, row in enumerate(grid):
            for cell in row:
                if cell is not None:
                    held.setdefault(cell, set()).add(pool_of[gpu])
        assert set().union(*held.values()) == {"h100", "a100"}  # the plan uses both pools
        straddling = {job: pools for job, pools in held.items() if len(pools) > 1}
        assert straddling == {}
        assert held.get("chat", {"a100"}) == {"a100"}
    spec = tmp_path / "job.yaml"
    spec.write_text(
        yaml.safe_dump({"id": "wide", "kind": "batch_inference", "priority": 9, "gpus": 16, "hours": 2})
    )
    refused = run_cli("submit", spec, "--config", config, "--db", db, "--at", "2026-11-30T11:10Z")
    assert refused.code == 2 and len(refused.err.strip().splitlines()) == 1, refused.err
    assert "`gpus` must be at most 8, the GPUs of the largest pool (h100); got 16" in refused.err
    store = open_store(db)
    try:
        assert store.job("wide") is None
        commits = store.commits()
        cluster = store.cluster()
    finally:
        store.close()
    assert cluster is not None and cluster.gpus == 16  # the stored record: the pools' sum
    assert commits and all(commit.assignments for commit in commits)
    for assignment in (a for commit in commits for a in commit.assignments):
        assert len({gpu // 8 for gpu in assignment.gpus}) == 1, assignment


def test_an_app_of_two_models_has_its_demand_on_each_pool_and_serves_on_one(
    tmp_path: Path, models_dir: Path
) -> None:
    """``gpu_models: {h100: 150, a100: 75}``: its demand on the A100s is what its requests need
    at half the rate, and the plan holds it on one of the two pools."""
    traffic = str(demo_config().traffic[0].path)
    app = {
        "id": "chat",
        "traffic": traffic,
        "swap_cap": 2,
        "priority": 90,
        "gpu_models": {"a100": 75, "h100": 150},
    }
    path = _config(tmp_path, {"pools": POOLS}, [app])
    config = load_config(path)
    assert config.app_rates == {"chat": {"h100": 150.0, "a100": 75.0}} and config.app_pools == {}
    assert config.apps[0].requests_per_gpu_hour == 150.0  # on its first pool, the cluster's order
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    for hour, at in enumerate((T0, T0 + timedelta(hours=1))):  # the second with the app running
        scenario, grid = _cycle(path, db, models_dir, at, tmp_path / f"export-{hour}")
        (chat,) = [job for job in scenario["jobs"] if job["id"] == "chat"]
        assert "pool" not in chat and "demand" not in chat
        by_pool = chat["demand_by_pool"]
        assert list(by_pool) == ["h100", "a100"] and sum(by_pool["h100"]) > 0
        # Half the rate: at least as many GPUs at every step, more in all (up to each pool's 8).
        assert all(h <= a for h, a in zip(by_pool["h100"], by_pool["a100"], strict=True))
        assert sum(by_pool["a100"]) > sum(by_pool["h100"])
        instance = parse_scenario(scenario, source="exported")
        assert check_plan(instance, grid) == []
        held = {gpu // 8 for gpu, row in enumerate(grid) for cell in row if cell == "chat"}
        assert len(held) == 1  # one pool for the whole plan
        if hour:  # a running app stays on its pool
            running = [r for r in scenario["running"] if r["id"] == "chat"]
            assert running and {g // 8 for g in running[0]["gpus"]} == held


def test_a_single_pool_config_writes_no_pools(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, {"gpus": 8}))
    assert config.cluster.gpus == 8 and config.pools == () and config.app_pools == {}
    one = load_config(_config(tmp_path, {"pools": POOLS[:1]}))
    assert one.cluster.gpus == 8 and [p.name for p in one.pools] == ["h100"]


@pytest.mark.parametrize(
    ("cluster", "apps", "message"),
    [
        (
            {"pools": [POOLS[0], {"name": "a100", "gpus": 0}]},
            None,
            "`cluster.pools[1].gpus` must be an integer >= 1; got 0",
        ),
        (
            {"pools": [POOLS[0], {**POOLS[1], "name": "h100"}]},
            None,
            "`cluster.pools[1].name` must be a name used by no other pool; got 'h100'",
        ),
        (
            {"pools": [{**POOLS[0], "gpus": MAX_CLUSTER_GPUS}, POOLS[1]]},
            None,
            f"`cluster.pools` must be pools of at most {MAX_CLUSTER_GPUS} GPUs in all; got '{MAX_CLUSTER_GPUS + 8}",
        ),
        ({"pools": []}, None, "`cluster.pools` must be a list of at least one pool"),
        ({"gpus": 12, "pools": POOLS}, None, "`cluster.gpus` must be the sum of the pools' GPUs (16)"),
        (
            {"pools": POOLS},
            [{"id": "chat", "requests_per_gpu_hour": 10, "pool": "l40s"}],
            "`apps[0].pool` must be one of the cluster's pools ['h100', 'a100']; got 'l40s'",
        ),
        (
            {"gpus": 8},
            [{"id": "chat", "requests_per_gpu_hour": 10, "pool": "h100"}],
            "`apps[0].pool` must be absent on a cluster without cluster.pools",
        ),
        (
            {"pools": POOLS},
            [{"id": "chat", "gpu_models": {"h100": 120, "l40s": 60}}],
            "`apps[0].gpu_models.l40s` must be a GPU model of the cluster's pools ['h100', 'a100']; got 'l40s'",
        ),
        (
            {"pools": POOLS},
            [{"id": "chat", "gpu_models": {"h100": 120, "a100": 0}}],
            "`apps[0].gpu_models.a100` must be requests per GPU-hour on that model, a number > 0; got 0",
        ),
        (
            {"pools": POOLS},
            [{"id": "chat", "gpu_models": {"h100": -5}}],
            "`apps[0].gpu_models.h100` must be requests per GPU-hour on that model, a number > 0; got -5",
        ),
        (
            {"pools": POOLS},
            [{"id": "chat", "gpu_models": {"h100": 120}, "pool": "h100"}],
            "`apps[0].pool` must be absent beside apps[0].gpu_models (its requests per GPU-hour per model)",
        ),
        (
            {"pools": POOLS},
            [{"id": "chat", "gpu_models": {"h100": 120}, "requests_per_gpu_hour": 100}],
            "`apps[0].requests_per_gpu_hour` must be absent beside apps[0].gpu_models",
        ),
        (
            {"pools": POOLS},
            [{"id": "chat", "gpu_models": {}}],
            "`apps[0].gpu_models` must be a mapping of GPU model -> requests per GPU-hour",
        ),
        (
            {"gpus": 8},
            [{"id": "chat", "gpu_models": {"h100": 120}}],
            "`apps[0].gpu_models` must be absent on a cluster without cluster.pools",
        ),
    ],
)
def test_a_bad_pools_config_is_refused_in_one_line_and_nothing_is_stored(
    tmp_path: Path, cluster: dict, apps: list[dict] | None, message: str
) -> None:
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    refused = run_cli("daemon", "--once", "--config", _config(tmp_path, cluster, apps), "--db", db)
    assert refused.code == 2
    assert message in refused.err and len(refused.err.strip().splitlines()) == 1, refused.err
    store = open_store(db)
    try:
        assert store.cluster() is None and store.apps() == []
    finally:
        store.close()
