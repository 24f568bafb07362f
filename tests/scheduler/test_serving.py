"""Services that may serve on one of several pools (``demand_by_pool``): read, scored on the
pool they serve on, checked there, and placed by both modes where the plan scores highest."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from contract.errors import InputError
from scheduler.check import check_plan
from scheduler.metrics import score
from scheduler.model import Allocation, build_grid
from scheduler.policies import PolicyName, SolveOptions, plan
from tests.strategies import instance_of, pooled_scenarios

WORK = SolveOptions(wall_clock=False, time_limit_s=0.5, workers=1)
BASELINES = (PolicyName.FIFO, PolicyName.FIFO_BACKFILL, PolicyName.PRIORITY_BACKFILL, PolicyName.FASTEST_FREE)
HORIZON = 6


def two_pools(*jobs: dict[str, Any], running: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Pool `h100` (GPUs 0-3) and pool `a100` (GPUs 4-7), and a service `chat` that needs one
    H100 or two A100s at every step."""
    chat = {
        "id": "chat",
        "kind": "realtime",
        "priority": 10,
        "swap_cap": 4,
        "demand_by_pool": {"a100": [2] * HORIZON, "h100": [1] * HORIZON},
    }
    return {
        "pools": [{"name": "h100", "gpus": 4}, {"name": "a100", "gpus": 4}],
        "horizon": HORIZON,
        "jobs": [chat, *jobs],
        "running": running or [],
    }


def held(grid: Any, job_id: str) -> set[int]:
    return {gpu for gpu, row in enumerate(grid) for cell in row if cell == job_id}


def test_a_service_serves_by_default_where_it_needs_fewest_gpus_or_where_it_runs() -> None:
    instance = instance_of(two_pools())
    (chat,) = instance.realtime_jobs
    assert list(chat.demand_by_pool or {}) == ["h100", "a100"]  # the cluster's order
    assert (chat.pool, chat.demand) == ("h100", (1,) * HORIZON)
    assert (chat.worth_on("h100"), chat.worth_on("a100")) == (1.0, 0.5)
    running = instance_of(two_pools(running=[{"id": "chat", "gpus": [5]}]))
    assert running.realtime_jobs[0].pool == "a100"


def test_a_served_request_is_worth_the_same_on_either_pool() -> None:
    """Served in full on two A100s or on one H100: the same value, no penalty."""
    instance = instance_of(two_pools())
    on_h100 = build_grid(instance, Allocation(batch={}, realtime={"chat": (0b1,) * HORIZON}))
    on_a100 = build_grid(instance, Allocation(batch={}, realtime={"chat": (0b11 << 4,) * HORIZON}))
    for grid in (on_h100, on_a100):
        assert check_plan(instance, grid) == []
        metrics = score(instance, grid)
        assert metrics.penalty == 0 and metrics.rt_coverage == 1.0
    assert score(instance, on_h100).value == pytest.approx(score(instance, on_a100).value)
    short = build_grid(instance, Allocation(batch={}, realtime={"chat": (1 << 4,) * HORIZON}))
    assert score(instance, short).rt_coverage == 0.5  # one A100 of the two it needs there


def test_the_checker_keeps_a_service_on_one_of_its_pools() -> None:
    doc = two_pools()
    doc["pools"].append({"name": "l40s", "gpus": 2})
    instance = instance_of(doc)
    split = build_grid(instance, Allocation(batch={}, realtime={"chat": (0b1 | 1 << 4,) * HORIZON}))
    assert [(v.constraint, v.gpu) for v in check_plan(instance, split)] == [(6, 4)] * HORIZON
    elsewhere = build_grid(instance, Allocation(batch={}, realtime={"chat": (1 << 8,) * HORIZON}))
    violations = check_plan(instance, elsewhere)
    assert violations and {v.constraint for v in violations} == {6}
    assert "on pool l40s, not one of ['h100', 'a100']" in str(violations[0])


def test_both_modes_serve_on_the_pool_a_running_job_leaves_free() -> None:
    """A running job holds every H100: both modes serve the app on two A100s; the baselines
    keep it on the H100s, where it goes unserved."""
    wide = {
        "id": "wide",
        "kind": "training",
        "priority": 1,
        "gpus": 4,
        "duration": HORIZON,
        "pools": ["h100"],
    }
    instance = instance_of(
        two_pools(wide, running=[{"id": "wide", "gpus": [0, 1, 2, 3], "remaining": HORIZON}])
    )
    for policy in (PolicyName.FAST, PolicyName.FULL):
        result = plan(instance, policy, WORK)
        on = held(result.grid, "chat")
        assert len(on) == 2 and min(on) >= 4, policy  # two of the A100s
        assert result.metrics.rt_coverage == 1.0
    for policy in BASELINES:
        result = plan(instance, policy, WORK)
        assert held(result.grid, "chat") == set() and result.metrics.rt_coverage == 0.0, policy


def test_a_running_service_stays_on_its_pool() -> None:
    """Running on the A100s, the app stays there though the H100s would serve it on fewer GPUs."""
    instance = instance_of(two_pools(running=[{"id": "chat", "gpus": [4, 5]}]))
    grid = plan(instance, PolicyName.FAST, WORK).grid
    assert held(grid, "chat") == {4, 5}


@pytest.mark.parametrize(
    ("change", "field", "expected"),
    [
        (lambda s: s["demand_by_pool"].update(l40s=[1] * HORIZON), "jobs[0].demand_by_pool.l40s",
         "one of the cluster's pools ['h100', 'a100']; got 'l40s'"),
        (lambda s: s.update(demand=[1] * HORIZON), "jobs[0].demand", "absent beside `demand_by_pool`"),
        (lambda s: s.update(pool="h100"), "jobs[0].pool", "absent beside `demand_by_pool`"),
        (lambda s: s.update(demand_by_pool={}), "jobs[0].demand_by_pool", "an object of pool name -> demand"),
        (lambda s: s["demand_by_pool"].update(a100=[1]), "jobs[0].demand_by_pool.a100",
         f"a list of {HORIZON} integers (one per step); got '1 values'"),
    ],
    ids=["unknown-pool", "beside-demand", "beside-pool", "empty", "wrong-length"],
)  # fmt: skip
def test_bad_demand_by_pool_is_one_line_naming_the_field(change: Any, field: str, expected: str) -> None:
    doc = two_pools()
    change(doc["jobs"][0])
    with pytest.raises(InputError, match=re.escape(f"`{field}` must be {expected}")) as raised:
        instance_of(doc)
    assert "\n" not in str(raised.value)


def test_demand_by_pool_needs_a_pools_section() -> None:
    doc = two_pools()
    del doc["pools"]
    doc["gpus"] = 8
    with pytest.raises(
        InputError, match=re.escape("`jobs[0].demand_by_pool` must be absent in a scenario without")
    ):
        instance_of(doc)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=pooled_scenarios(several_pools=True))
def test_every_plan_serves_each_service_on_one_of_its_pools_and_fast_never_below_its_default(
    doc: dict[str, Any],
) -> None:
    instance = instance_of(doc)
    for policy in (PolicyName.FAST, *BASELINES):
        grid = plan(instance, policy, WORK).grid
        assert check_plan(instance, grid) == [], policy
        for rt in instance.realtime_jobs:
            pools = {instance.pool_of_gpu(gpu).name for gpu in held(grid, rt.id)}
            assert pools <= set(rt.demand_by_pool or {rt.pool or instance.pools[0].name}), policy
            assert len(pools) <= 1, policy
    default = plan(instance.serving_on({}), PolicyName.FAST, WORK).metrics.objective
    assert plan(instance, PolicyName.FAST, WORK).metrics.objective >= default - 1e-6
