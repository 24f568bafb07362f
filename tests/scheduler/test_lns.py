"""The plan cycle: CP-SAT window search from the fast plan (real CP-SAT solves)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings

from contract.scenario import Instance
from contract.scenario_io import parse_scenario
from scheduler import lns
from scheduler.budget import Budget
from scheduler.check import check_plan
from scheduler.cpmodel import Window
from scheduler.fast import allocate
from scheduler.metrics import score
from scheduler.model import PLAN_CYCLE_BUDGET_MS, SolveOptions, build_grid
from scheduler.policies import PolicyName, plan
from tests.strategies import scenarios, solved_by_hand


def objective(instance: Instance, allocation: Any) -> float:
    return score(instance, build_grid(instance, allocation)).objective


@settings(max_examples=15)
@given(scenarios(max_gpus=16, max_jobs=8, horizon=8))
def test_window_search_keeps_plans_legal_and_never_worse(doc: dict[str, Any]) -> None:
    lns.warm_up()
    instance = parse_scenario(doc)
    start = allocate(instance, Budget.of_work(2.0))
    improved, report = lns.improve(instance, start, Budget(150.0))
    assert check_plan(instance, build_grid(instance, improved)) == []
    assert objective(instance, improved) >= objective(instance, start) - 1e-6
    assert report.improvements <= report.windows


def test_plan_cycle_proves_the_optimum_of_a_case_solved_by_hand() -> None:
    inst = solved_by_hand()  # optimum 41
    lns.warm_up()
    cycle = plan(inst, PolicyName.FAST, SolveOptions(budget_ms=PLAN_CYCLE_BUDGET_MS, wall_clock=False))
    assert cycle.status == "OPTIMAL"
    assert cycle.metrics.objective == pytest.approx(41.0, abs=1e-9)


def test_a_window_frees_only_jobs_starting_in_it_on_its_gpus() -> None:
    window = Window(first_gpu=4, end_gpu=8, start_step=6, end_step=12)
    from scheduler.model import Placement

    assert window.frees(None)  # not placed yet: any window may place it
    assert window.frees(Placement(start_step=6, first_gpu=4))
    assert not window.frees(Placement(start_step=12, first_gpu=4))
    assert not window.frees(Placement(start_step=6, first_gpu=2))


def test_a_window_on_a_large_cluster_pulls_in_a_delayed_job_from_outside_it() -> None:
    """A 4-GPU job placed late on GPUs 8-11 while GPUs 0-3 idle from step 0: the window on
    GPUs 0-3 frees no job of its own, but it pulls the delayed one in and starts it at 0."""
    from ortools.sat.python import cp_model

    from scheduler.cpmodel import build_model, hint, read_allocation
    from scheduler.model import Allocation, Placement

    doc = {
        "name": "pull",
        "gpus": 64,
        "horizon": 12,
        "jobs": [{"id": "late", "kind": "training", "priority": 10, "gpus": 4, "duration": 4}],
    }
    inst = parse_scenario(doc)
    current = Allocation(batch={"late": Placement(start_step=6, first_gpu=8)}, realtime={})
    window = Window(first_gpu=0, end_gpu=4, start_step=0, end_step=12)
    assert lns._pulled(inst, list(inst.down_masks), window, [inst.queued_jobs[0]], current) == ["late"]
    model = cp_model.CpModel()
    v, _ = build_model(model, inst, window, current, pull=["late"])
    hint(model, v, inst, current)
    solver = cp_model.CpSolver()
    assert solver.solve(model) == cp_model.OPTIMAL
    moved = read_allocation(v, inst, solver)
    assert moved.batch == {"late": Placement(start_step=0, first_gpu=0)}
    assert check_plan(inst, build_grid(inst, moved)) == []
    # Without the pull, the window has nothing to move and the job stays where it was.
    model = cp_model.CpModel()
    v, _ = build_model(model, inst, window, current)
    solver = cp_model.CpSolver()
    solver.solve(model)
    assert read_allocation(v, inst, solver).batch == current.batch
    # On a small cluster, a window of half of it pulls nothing.
    small = parse_scenario({**doc, "gpus": 16})
    assert lns._pulled(small, list(small.down_masks), window, [small.queued_jobs[0]], current) == []


def test_window_search_improves_where_the_greedy_is_weakest() -> None:
    # A sampled oversubscribed cluster where the optimum (6,435.5, proven by the full mode)
    # evicts a service from a half-used block at step 0 to start a long training job there;
    # the greedy stacks the service at the top and starts the job at step 14 (5,653).
    from gpuplan.app.lab.bench import sample_instances
    from gpuplan.app.lab.synthetic import SHAPES

    (inst,) = sample_instances([SHAPES["oversubscribed"]], [3])
    lns.warm_up()
    start = allocate(inst, Budget.of_work(2.0))
    improved, report = lns.improve(inst, start, Budget.of_work(5_000.0))  # work only: load-proof
    assert report.improvements >= 1
    assert objective(inst, improved) > objective(inst, start) + 100


def test_a_work_only_plan_cycle_plans_the_same_on_a_machine_that_crawls(crawl: Callable[..., None]) -> None:
    """``wall_clock=False`` with the plan cycle's budget: the heuristic counts estimated work
    and the window search CP-SAT's deterministic time, so a crawling clock changes nothing."""
    from gpuplan.app.lab.bench import sample_instances
    from gpuplan.app.lab.synthetic import SHAPES
    from scheduler import budget, cpmodel

    (inst,) = sample_instances([SHAPES["oversubscribed"]], [3])
    lns.warm_up()
    options = SolveOptions(budget_ms=PLAN_CYCLE_BUDGET_MS, wall_clock=False)
    calm = plan(inst, PolicyName.FAST, options)
    crawl(budget, cpmodel, lns)
    assert plan(inst, PolicyName.FAST, options).grid == calm.grid


def test_windows_where_the_plan_leaves_gpus_idle_while_a_job_waits_come_first() -> None:
    from scheduler.model import Allocation, Placement
    from tests.strategies import instance_of

    jobs = [
        {"id": "low", "kind": "training", "priority": 5, "gpus": 4, "duration": 12},
        {"id": "wait", "kind": "training", "priority": 50, "gpus": 4, "duration": 4, "release": 0},
    ]
    instance = instance_of({"gpus": 12, "horizon": 12, "jobs": jobs})
    # GPUs 0-3 busy all day, GPUs 8-11 idle; the waiting job starts late on 4-7.
    plan_ = Allocation(
        batch={"low": Placement(0, 0), "wait": Placement(8, 4)},
        realtime={},
    )
    windows = [Window(a, a + 4, 0, 12) for a in (0, 4, 8)]
    assert [w.first_gpu for w in lns._worst_first(instance, plan_, windows)] == [8, 4, 0]
    waited_for = Allocation(batch={"low": Placement(0, 0), "wait": Placement(0, 4)}, realtime={})
    assert lns._worst_first(instance, waited_for, windows) == windows  # nothing waits: sweep order


def test_the_costliest_delays_get_windows_of_their_own_before_the_sweeps(monkeypatch: Any) -> None:
    # The generator written apart's mixed seed 3 (a tuning seed), 12 GPUs: the hot path leaves
    # an 8-GPU job of priority 80 to the last steps. The sweeps' first windows (4-GPU blocks)
    # cannot move it, and the plan cycle's second ran out on them; a window on the job's own
    # block over the whole day, with it pulled in, comes first and moves it early.
    from benchmarks.adversarial import scenario

    inst = parse_scenario(scenario("mixed", 3))
    lns.warm_up()
    start = allocate(inst, Budget.of_work(2.0))
    assert start.batch["job-07"].start_step >= 20
    delayed = [job.id for job in lns.most_delayed(inst, start)][: lns.TARGETED_JOBS]
    windows = lns._targeted(inst, lns.most_delayed(inst, start))
    assert "job-07" in delayed and "job-07" in windows.values()
    assert all(w.end_step == inst.horizon_steps and w.end_gpu - w.first_gpu > 4 for w in windows)
    improved, _ = lns.improve(inst, start, Budget.of_work(PLAN_CYCLE_BUDGET_MS))
    assert improved.batch["job-07"].start_step < 20
    monkeypatch.setattr(lns, "TARGETED_JOBS", 0)
    swept, _ = lns.improve(inst, start, Budget.of_work(PLAN_CYCLE_BUDGET_MS))
    assert objective(inst, improved) > 1.03 * objective(inst, swept)
