"""The fast mode's orientation at a tight budget (scheduler/fast/entry.py): where a queue too long
for the order search has its running batch work in the lower half, both orientations' first
orders are packed before the budget goes to a promotion, and the better one is searched."""

from __future__ import annotations

import pytest

from benchmarks.small_queues import scenario
from contract.scenario import Instance
from contract.scenario_io import parse_scenario
from scheduler.budget import Budget
from scheduler.check import check_plan
from scheduler.fast import allocate, mirrored
from scheduler.fast.entry import _mirror_likely_better
from scheduler.fast.mirror import _unmirror
from scheduler.metrics import score
from scheduler.model import Allocation, build_grid
from scheduler.policies import PolicyName, plan

FLOORS = (PolicyName.FIFO, PolicyName.FIFO_BACKFILL, PolicyName.PRIORITY_BACKFILL)


def _mixed(seed: int) -> Instance:
    return parse_scenario(scenario("mixed-half", seed), source=f"mixed-half-{seed}")


def objective(instance: Instance, allocation: Allocation) -> float:
    """The contract's objective of a legal plan (running work included)."""
    grid = build_grid(instance, allocation)
    assert check_plan(instance, grid) == []
    return score(instance, grid).objective


def test_at_one_ms_of_work_the_hot_path_reaches_a_plan_the_mirror_image_makes() -> None:
    # 8 queued jobs (beyond the order search), a 1-GPU job running on GPU 1 for 16 steps and
    # the services on GPUs 5-7: stacked at the top they leave no 4-GPU block free until step 16.
    instance = _mixed(169)
    assert _mirror_likely_better(instance)
    # The better plan known: the hot path's at 2 ms of work (it packs the mirror image), legal.
    known = objective(instance, allocate(instance, Budget.of_work(2.0)))
    at_one_ms = objective(instance, allocate(instance, Budget.of_work(1.0)))
    # Before, 1 ms reached 0.785 of it (a promotion of the first orientation took the budget).
    assert at_one_ms >= 0.95 * known
    assert at_one_ms > 1.2 * max(plan(instance, p).metrics.objective for p in FLOORS)


def test_at_one_ms_a_cluster_and_its_mirror_image_plan_alike() -> None:
    instance = _mixed(169)
    flipped = mirrored(instance)
    assert flipped is not None and not _mirror_likely_better(flipped)  # its running job is at the top
    ours = objective(instance, allocate(instance, Budget.of_work(1.0)))
    theirs = objective(flipped, allocate(flipped, Budget.of_work(1.0)))
    assert ours == pytest.approx(theirs, rel=0.01)


@pytest.mark.parametrize("seed", [57, 87, 127, 145, 255, 287])
def test_where_the_mirror_image_is_packed_first_the_plan_is_legal_and_above_the_floors(seed: int) -> None:
    instance = _mixed(seed)
    assert _mirror_likely_better(instance)
    for budget_ms in (1.0, 2.0):
        value = objective(instance, allocate(instance, Budget.of_work(budget_ms)))
        for policy in FLOORS:
            assert value >= plan(instance, policy).metrics.objective - 1e-6


def test_a_queue_the_order_search_takes_or_work_in_the_upper_half_keeps_the_first_orientation() -> None:
    short = parse_scenario(scenario("long-tight", 89), source="long-tight-89")
    assert not _mirror_likely_better(short)  # at most 6 jobs: the order search has it
    instance = _mixed(169)
    flipped = mirrored(instance)
    assert flipped is not None
    assert _mirror_likely_better(instance) and not _mirror_likely_better(flipped)
    # the mirror image of the mirror image is the cluster itself
    turned_back = _unmirror(instance, allocate(flipped, Budget.of_work(1.0)))
    assert objective(instance, turned_back) >= max(plan(instance, p).metrics.objective for p in FLOORS)
