"""The full mode (real CP-SAT solves): legal, never below the fast mode, a valid bound."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from contract.scenario_io import load_scenario, parse_scenario
from scheduler.check import check_plan
from scheduler.policies import PolicyName, SolveOptions, plan
from tests.strategies import instance_of, scenarios, solved_by_hand

#: Plans that are compared or pinned count work, not wall time: the same plans on a busy machine.
WORK_ONLY = SolveOptions(wall_clock=False)
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@settings(max_examples=25)
@given(scenarios(max_gpus=8, max_jobs=6, horizon=8))
def test_full_is_legal_and_never_below_fast(doc: dict[str, Any]) -> None:
    instance = parse_scenario(doc)
    full = plan(instance, PolicyName.FULL, SolveOptions(time_limit_s=2.0, workers=1, wall_clock=False))
    fast = plan(instance, PolicyName.FAST, WORK_ONLY)
    assert check_plan(instance, full.grid) == []
    assert full.metrics.objective >= fast.metrics.objective - 1e-6
    if full.bound is not None:
        assert full.bound >= full.metrics.objective - 1e-6
    if full.metrics.objective <= fast.metrics.objective + 1e-6:  # equal value: no more churn
        assert full.metrics.rt_moves <= fast.metrics.rt_moves


def test_proves_the_optimum_of_a_case_solved_by_hand() -> None:
    inst = solved_by_hand()
    full = plan(inst, PolicyName.FULL, SolveOptions(time_limit_s=10.0, workers=1, wall_clock=False))
    assert full.status == "OPTIMAL"
    assert full.metrics.objective == pytest.approx(41.0, abs=1e-9)
    assert full.bound == pytest.approx(41.0, abs=0.01)


def test_trades_a_low_priority_batch_job_for_realtime_demand() -> None:
    # One GPU; serving the real-time step is worth (1 + 8) * 5 > the batch job's 10.
    inst = instance_of(
        {
            "gpus": 1,
            "horizon": 1,
            "decay": 1.0,
            "jobs": [
                {"id": "batch", "kind": "batch_inference", "priority": 10, "gpus": 1, "duration": 1},
                {"id": "rt", "kind": "realtime", "priority": 5, "swap_cap": 1, "demand": [1]},
            ],
        }
    )
    full = plan(inst, PolicyName.FULL, SolveOptions(time_limit_s=10.0, workers=1, wall_clock=False))
    assert full.grid == (("rt",),)
    assert full.metrics.objective == pytest.approx(5.0, abs=1e-9)


def test_too_large_a_model_keeps_the_fast_plan_and_says_so() -> None:
    demand = [4] * 24
    jobs = [
        {"id": f"rt{k}", "kind": "realtime", "priority": 1, "swap_cap": 2, "demand": demand}
        for k in range(12)
    ]
    jobs.append({"id": "train", "kind": "training", "priority": 5, "gpus": 8, "duration": 6})
    inst = instance_of({"gpus": 1024, "jobs": jobs})
    full = plan(inst, PolicyName.FULL, SolveOptions(time_limit_s=5.0, wall_clock=False))
    fast = plan(inst, PolicyName.FAST, WORK_ONLY)
    assert (full.status, full.bound) == ("MODEL_TOO_LARGE", None)
    assert full.grid == fast.grid


def test_a_limit_too_short_to_build_the_model_keeps_the_fast_plan_and_says_so(
    crawl: Callable[..., None],
) -> None:
    """On the wall clock, building stops at the limit. The clock is one that crawls (a second
    gone per look), so the 2 s limit passes while ~100,000 variables are being built however
    fast the machine is."""
    from scheduler import budget, cpmodel, full

    jobs: list[dict[str, Any]] = [
        {"id": f"b{i}", "kind": "training", "priority": 10 + i, "gpus": 1 << (i % 4), "duration": 3 + i % 5}
        for i in range(60)
    ]
    jobs.append({"id": "rt", "kind": "realtime", "priority": 50, "swap_cap": 2, "demand": [8] * 24})
    inst = instance_of({"gpus": 128, "jobs": jobs})
    crawl(budget, cpmodel, full)
    kept = plan(inst, PolicyName.FULL, SolveOptions(time_limit_s=2.0))
    assert (kept.status, kept.bound) == ("MODEL_BUILD_TIMEOUT", None)
    assert check_plan(inst, kept.grid) == []
    assert kept.metrics.objective >= plan(inst, PolicyName.PRIORITY_BACKFILL).metrics.objective - 1e-6


def test_a_work_only_limit_plans_the_same_on_a_machine_that_crawls(crawl: Callable[..., None]) -> None:
    """``wall_clock=False``: the hint, the model and CP-SAT's limit all count work, so a
    machine too busy for any wall-clock deadline still gets the calm machine's plan."""
    from scheduler import budget, cpmodel, full

    inst = load_scenario(BENCHMARKS / "1-mixed-control.json")
    options = SolveOptions(time_limit_s=1.0, workers=1, wall_clock=False)
    calm = plan(inst, PolicyName.FULL, options)
    crawl(budget, cpmodel, full)
    crawled = plan(inst, PolicyName.FULL, options)
    assert (crawled.grid, crawled.status, crawled.bound) == (calm.grid, calm.status, calm.bound)


def test_moves_no_realtime_gpu_that_buys_nothing() -> None:
    # Two services on 16 GPUs with room to spare: at equal value the solver used to move their
    # GPUs all over the cluster; the tie-break keeps them where they run.
    inst = instance_of(
        {
            "gpus": 16,
            "horizon": 12,
            "jobs": [
                {"id": "a", "kind": "realtime", "priority": 80, "swap_cap": 2, "demand": [3] * 6 + [5] * 6},
                {"id": "b", "kind": "realtime", "priority": 60, "swap_cap": 2, "demand": [4] * 12},
                {"id": "t", "kind": "training", "priority": 30, "gpus": 4, "duration": 5},
            ],
            "running": [{"id": "a", "gpus": [13, 14, 15]}, {"id": "b", "gpus": [0, 1, 2, 3]}],
        }
    )
    full = plan(inst, PolicyName.FULL, SolveOptions(time_limit_s=10.0, workers=1, wall_clock=False))
    assert full.status == "OPTIMAL"
    assert full.metrics.rt_coverage == 1.0
    assert full.metrics.rt_moves == 2  # a grows from 3 to 5 GPUs; nothing else moves


def test_the_fewest_moves_where_the_settling_cannot_follow_a_swap_cap_of_one() -> None:
    # A training job takes GPU 3 from step 4. With a swap cap of 1 and a flat need of 2, the
    # service must hold a third GPU for a step to leave GPU 3: the settling heuristic keeps
    # GPU 3 to its deadline and cannot, so it keeps the plan's flapping (6 moves); the churn
    # solve finds 2 (one GPU in, GPU 3 out) at the same value.
    from scheduler.churn import settle
    from scheduler.fast import objective
    from scheduler.full import fewest_moves
    from scheduler.metrics import moves
    from scheduler.model import Allocation, Placement, build_grid

    inst = instance_of(
        {
            "gpus": 4,
            "horizon": 8,
            "jobs": [
                {"id": "chat", "kind": "realtime", "priority": 80, "swap_cap": 1, "demand": [2] * 8},
                {"id": "t", "kind": "training", "priority": 10, "gpus": 1, "duration": 4, "release": 4},
            ],
            "running": [{"id": "chat", "gpus": [2, 3]}],
        }
    )
    held = (0b1100, 0b1100, 0b1110, 0b0110, 0b0111, 0b0110, 0b0111, 0b0110)
    flappy = Allocation(batch={"t": Placement(start_step=4, first_gpu=3)}, realtime={"chat": held})
    assert check_plan(inst, build_grid(inst, flappy)) == []
    assert moves(inst, flappy.realtime) == 6
    assert settle(inst, flappy) is flappy
    fewer = fewest_moves(inst, flappy, 5.0, deadline=float("inf"), wall_clock=False, workers=1, seed=0)
    assert check_plan(inst, build_grid(inst, fewer)) == []
    assert moves(inst, fewer.realtime) == 2
    assert objective(inst, fewer) >= objective(inst, flappy) - 1e-9
    assert fewer.batch == flappy.batch
