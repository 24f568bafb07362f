"""A cluster of several pools: the contract's pools section, the checker's pool rules, and
every policy's plan over pools (legal, and each job on the pool where it is worth most)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from contract.errors import InputError
from contract.scenario import Pool
from scheduler.check import check_plan
from scheduler.model import Allocation, Placement, build_grid
from scheduler.policies import PolicyName, SolveOptions, plan
from tests.strategies import instance_of, pooled_scenarios, scenarios, small_doc

WORK = SolveOptions(wall_clock=False, time_limit_s=0.5, workers=1)
BASELINES = (PolicyName.FIFO, PolicyName.FIFO_BACKFILL, PolicyName.PRIORITY_BACKFILL, PolicyName.FASTEST_FREE)


def two_pools(**job: Any) -> dict[str, Any]:
    """Pool `slow` (GPUs 0-7, first in the cluster) and pool `fast` (GPUs 8-15); one job."""
    return {
        "pools": [
            {"name": "slow", "gpu_model": "a100", "gpus": 8},
            {"name": "fast", "gpu_model": "h100", "gpus": 8},
        ],
        "horizon": 12,
        "jobs": [{"id": "j", "kind": "training", "priority": 10, "gpus": 4, **job}],
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=pooled_scenarios(several_pools=True))
def test_every_policy_plans_legally_over_pools(doc: dict[str, Any]) -> None:
    instance = instance_of(doc)
    for policy in (PolicyName.FAST, *BASELINES):
        grid = plan(instance, policy, WORK).grid
        assert check_plan(instance, grid) == [], policy
        for job in instance.queued_jobs:  # each placed job on one of its pools, its steps there
            rows = [g for g, row in enumerate(grid) if job.id in row]
            if rows:
                pool = instance.pool_of_gpu(rows[0])
                assert pool in instance.allowed_pools(job)
                assert pool.holds(rows[0], job.gpus)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=pooled_scenarios(max_pool_gpus=4, max_jobs=4, several_pools=True))
def test_full_mode_plans_legally_over_pools_and_never_below_fast(doc: dict[str, Any]) -> None:
    instance = instance_of(doc)
    full = plan(instance, PolicyName.FULL, WORK)
    assert check_plan(instance, full.grid) == []
    assert full.metrics.objective >= plan(instance, PolicyName.FAST, WORK).metrics.objective - 1e-6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=scenarios(max_gpus=16, max_jobs=8))
def test_one_named_pool_plans_as_the_cluster_without_pools(doc: dict[str, Any]) -> None:
    plain = instance_of(doc)
    named = instance_of({**copy.deepcopy(doc), "pools": [{"name": "h100", "gpus": doc["gpus"]}]})
    assert not named.pooled
    for policy in (PolicyName.FAST, *BASELINES):
        assert plan(named, policy, WORK).grid == plan(plain, policy, WORK).grid, policy


def test_a_job_twice_as_fast_on_a_free_pool_goes_there() -> None:
    instance = instance_of(two_pools(duration_by_pool={"slow": 6, "fast": 3}))
    for policy in (PolicyName.FAST, PolicyName.FULL, PolicyName.FASTEST_FREE):
        grid = plan(instance, policy, WORK).grid
        rows = [g for g, row in enumerate(grid) if "j" in row]
        assert rows and instance.pool_of_gpu(rows[0]).name == "fast", policy
        assert sum(cell == "j" for cell in grid[rows[0]]) == 3
    # FIFO takes the first pool with room: the slow one, where the job runs 6 steps.
    fifo = plan(instance, PolicyName.FIFO, WORK).grid
    assert [sum(cell == "j" for cell in row) for row in fifo][:8] == [6] * 4 + [0] * 4


def test_the_fast_pool_is_left_to_the_job_that_needs_it() -> None:
    """`wide` (priority 50, all 8 GPUs) may run only on the fast pool: `j`, faster there too,
    is worth more on the slow pool now than on the fast one after `wide`."""
    doc = two_pools(duration_by_pool={"slow": 4, "fast": 3})
    doc["jobs"].append(
        {"id": "wide", "kind": "training", "priority": 50, "gpus": 8, "duration": 10, "pools": ["fast"]}
    )
    instance = instance_of(doc)
    for policy in (PolicyName.FAST, PolicyName.FULL):
        grid = plan(instance, policy, WORK).grid
        assert all(row[0] == "wide" for row in grid[8:]), policy
        assert sum(row.count("j") for row in grid[:8]) == 16, policy


def test_defaults_one_pool_of_every_gpu() -> None:
    instance = instance_of(small_doc())
    assert instance.pools == (Pool("default", "default", 8, 0),)
    assert not instance.pooled


def test_pools_lie_side_by_side_and_jobs_carry_their_steps() -> None:
    doc = two_pools(pools=["fast"], duration=5)
    doc["jobs"].append(
        {
            "id": "q",
            "kind": "quantization",
            "priority": 1,
            "gpus": 2,
            "duration_by_pool": {"slow": 2, "fast": 1},
        }
    )
    instance = instance_of(doc)
    assert [(p.name, p.first_gpu, p.end_gpu) for p in instance.pools] == [("slow", 0, 8), ("fast", 8, 16)]
    j, q = instance.batch_jobs
    assert j.steps_by_pool == {"fast": 5} and q.steps_by_pool == {"slow": 2, "fast": 1}
    assert instance.gpus == 16


@pytest.mark.parametrize(
    ("change", "field", "got"),
    [
        (lambda d: d["jobs"][0].update(pools=["v100"]), "jobs[0].pools[0]", "'v100'"),
        (
            lambda d: d["jobs"][0].update(duration_by_pool={"v100": 2}),
            "jobs[0].duration_by_pool.v100",
            "'v100'",
        ),
        (lambda d: d["pools"][1].update(gpus=0), "pools[1].gpus", "0"),
        (lambda d: d["pools"][1].update(name="slow"), "pools[1].name", "'slow'"),
        (lambda d: d["jobs"][0].update(gpus=16), "jobs[0].gpus", "16"),
        (lambda d: d.update(gpus=12), "gpus", "12"),
        (
            lambda d: d["jobs"].append(
                {
                    "id": "r",
                    "kind": "realtime",
                    "priority": 1,
                    "swap_cap": 1,
                    "demand": [1] * 12,
                    "pool": "tpu",
                }
            ),
            "jobs[1].pool",
            "'tpu'",
        ),
        (lambda d: d["jobs"][0].pop("duration"), "jobs[0].duration", "'missing'"),
        (
            lambda d: d.update(running=[{"id": "j", "gpus": [6, 7, 8, 9], "remaining": 1}]),
            "running[0].gpus",
            "[6, 7, 8, 9]",
        ),
    ],
    ids=[
        "unknown-pool",
        "unknown-pool-duration",
        "empty-pool",
        "pool-named-twice",
        "too-big",
        "gpus-not-sum",
        "realtime-pool",
        "no-duration",
        "running-across-pools",
    ],
)
def test_bad_pools_name_field_expected_and_got(change: Any, field: str, got: str) -> None:
    doc = two_pools(duration=2)
    change(doc)
    with pytest.raises(InputError, match=re.escape(f"`{field}` must be ")) as raised:
        instance_of(doc)
    assert str(raised.value).count("\n") == 0 and f"got {got}" in str(raised.value)


def test_too_big_for_every_allowed_pool_names_the_pools() -> None:
    doc = {
        "pools": [{"name": "a", "gpus": 8}, {"name": "b", "gpus": 4}],
        "jobs": [{"id": "j", "kind": "training", "priority": 1, "gpus": 8, "duration": 1, "pools": ["b"]}],
    }
    with pytest.raises(
        InputError,
        match=re.escape("`jobs[0].gpus` must be at most 4 GPUs (the largest of its pools ['b']); got 8."),
    ):
        instance_of(doc)


@pytest.mark.parametrize(("job", "key"), [(0, "pools"), (0, "duration_by_pool"), (1, "pool")])
def test_pool_keys_need_a_pools_section(job: int, key: str) -> None:
    doc = small_doc()
    doc["jobs"][job][key] = {"h100": 2} if key == "duration_by_pool" else "h100"
    expected = f"`jobs[{job}].{key}` must be absent in a scenario without a `pools` section"
    with pytest.raises(InputError, match=re.escape(expected)):
        instance_of(doc)


def _grid(instance: Any, first_gpu: int, start: int = 0) -> Any:
    realtime = {rt.id: (0,) * instance.horizon_steps for rt in instance.realtime_jobs}
    return build_grid(instance, Allocation(batch={"j": Placement(start, first_gpu)}, realtime=realtime))


def test_checker_refuses_a_block_across_pools_off_its_pools_or_misaligned_in_one() -> None:
    doc = two_pools(pools=["fast"], duration_by_pool={"fast": 3})
    doc["pools"] = [{"name": "slow", "gpus": 6}, {"name": "fast", "gpus": 10}]
    instance = instance_of(doc)
    assert check_plan(instance, _grid(instance, 6)) == []  # aligned from the fast pool's GPU 6
    assert [v.constraint for v in check_plan(instance, _grid(instance, 8))] == [6]  # 8-11: not aligned in it
    assert [v.constraint for v in check_plan(instance, _grid(instance, 0))] == [6]  # not one of its pools
    for key in ("pools", "duration_by_pool"):
        doc["jobs"][0].pop(key)
    doc["jobs"][0]["duration"] = 3
    anywhere = instance_of(doc)
    assert [v.constraint for v in check_plan(anywhere, _grid(anywhere, 4))] == [6]  # 4-7 crosses pools


def test_checker_holds_a_job_to_its_pools_duration() -> None:
    instance = instance_of(two_pools(duration_by_pool={"slow": 6, "fast": 3}))
    grid = [list(row) for row in _grid(instance, 8)]
    assert check_plan(instance, grid) == []
    grid[8][3] = grid[9][3] = grid[10][3] = grid[11][3] = "j"  # a fourth step: the slow pool's length
    assert {v.constraint for v in check_plan(instance, grid)} == {2}


def test_checker_keeps_a_service_on_its_pool() -> None:
    doc = two_pools(duration=1)
    doc["jobs"].append(
        {"id": "r", "kind": "realtime", "priority": 1, "swap_cap": 12, "demand": [1] * 12, "pool": "fast"}
    )
    instance = instance_of(doc)
    held = {"r": (1 << 3,) * 12}
    grid = build_grid(instance, Allocation(batch={}, realtime=held))
    assert {v.constraint for v in check_plan(instance, grid)} == {6}
    assert (
        check_plan(instance, build_grid(instance, Allocation(batch={}, realtime={"r": (1 << 12,) * 12})))
        == []
    )


def test_the_plan_cycle_searches_each_pool_and_stays_legal() -> None:
    doc = two_pools(duration_by_pool={"slow": 6, "fast": 3})
    doc["jobs"] += [
        {"id": f"q{i}", "kind": "quantization", "priority": 1 + i, "gpus": 2 << (i % 2), "duration": 2 + i}
        for i in range(5)
    ]
    doc["jobs"].append(
        {"id": "r", "kind": "realtime", "priority": 3, "swap_cap": 1, "demand": [2] * 12, "pool": "slow"}
    )
    instance = instance_of(doc)
    cycle = plan(instance, PolicyName.FAST, SolveOptions(wall_clock=False, budget_ms=300))
    assert check_plan(instance, cycle.grid) == []
    assert cycle.metrics.unscheduled == 0 and cycle.metrics.rt_coverage == 1.0


def test_a_job_is_moved_off_the_pool_another_needs() -> None:
    """`x` (any pool, first by priority) is given pool `a` first; `y` may run only on `a`:
    the moves between pools take `x` to `b`, and both start at once."""
    doc = {
        "pools": [{"name": "a", "gpus": 4}, {"name": "b", "gpus": 4}],
        "horizon": 12,
        "jobs": [
            {"id": "x", "kind": "training", "priority": 10, "gpus": 4, "duration": 2},
            {"id": "y", "kind": "training", "priority": 9, "gpus": 4, "duration": 12, "pools": ["a"]},
        ],
    }
    instance = instance_of(doc)
    from scheduler.pools import first_assignment

    assert first_assignment(instance) == {"x": "a", "y": "a"}
    grid = plan(instance, PolicyName.FAST, WORK).grid
    assert [row[0] for row in grid] == ["y"] * 4 + ["x"] * 4


def test_a_foreseen_wait_on_the_fast_pool_loses_to_a_start_now_on_the_idle_slow_one() -> None:
    """`wide` holds the fast pool for a step; `j` (3 steps there, 6 on the slow pool) is worth a
    little more on the fast pool after that wait, by the plan's own decay, than on the slow
    pool now. The pool choice counts the wait longer (WAIT_SLIP; a wait of one step, rounded up,
    as two), since a foreseen wait slips as work arrives: `j` starts now on the slow pool."""
    from scheduler.pools import WAIT_SLIP, first_assignment

    doc = two_pools(duration_by_pool={"slow": 6, "fast": 3})
    doc["jobs"].append(
        {"id": "wide", "kind": "training", "priority": 50, "gpus": 8, "duration": 1, "pools": ["fast"]}
    )
    instance = instance_of(doc)
    w = instance.weights
    assert sum(w[1:4]) > sum(w[0:6]) / 2 > sum(w[2:5])  # waiting wins unless the wait slips
    assert 0 < WAIT_SLIP <= 1  # one step's wait weighed as two
    assert first_assignment(instance) == {"wide": "fast", "j": "slow"}
    grid = plan(instance, PolicyName.FAST, WORK).grid
    assert [row[:6].count("j") for row in grid[:8]] == [6] * 4 + [0] * 4


def test_a_pool_whose_free_gpus_are_scattered_is_not_foreseen_to_start_a_wide_job() -> None:
    """The fast pool has 6 of its 8 GPUs free, but a running 1-GPU job sits in each of its
    aligned 4-GPU blocks for 8 steps: `j` (4 GPUs, 3 steps there, 4 on the slow pool) cannot
    start there before step 8. Its foreseen start is read from the pool's free blocks, not
    its free GPU count: it starts now on the slow pool."""
    from scheduler.pools import first_assignment

    doc = two_pools(duration_by_pool={"slow": 4, "fast": 3})
    doc["jobs"] += [
        {"id": f"small{g}", "kind": "training", "priority": 5, "gpus": 1, "duration": 8, "pools": ["fast"]}
        for g in (8, 12)
    ]
    doc["running"] = [{"id": f"small{g}", "gpus": [g], "remaining": 8} for g in (8, 12)]
    instance = instance_of(doc)
    assert first_assignment(instance) == {"j": "slow"}
    grid = plan(instance, PolicyName.FAST, WORK).grid
    assert [row[0] for row in grid[:4]] == ["j"] * 4
