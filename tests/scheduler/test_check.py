"""check_plan catches each breach of the five constraints and accepts legal near-misses."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from contract.scenario import Instance
from scheduler.check import check_plan
from tests.strategies import instance_of, small_doc

Grid = list[list[str | None]]


def empty(instance: Instance) -> Grid:
    return [[None] * instance.horizon_steps for _ in range(instance.gpus)]


def fill(grid: Grid, job: str, gpus: Iterable[int], steps: Iterable[int]) -> Grid:
    steps = list(steps)
    for g in gpus:
        for t in steps:
            grid[g][t] = job
    return grid


def constraints(instance: Instance, grid: Grid) -> list[tuple[int, str | None, int | None, int | None]]:
    return [(v.constraint, v.job, v.gpu, v.step) for v in check_plan(instance, grid)]


@pytest.fixture
def instance() -> Instance:
    return instance_of(small_doc(down=[{"gpu": 0, "start": 3}]))


def legal(instance: Instance) -> Grid:
    grid = fill(empty(instance), "train", range(4), range(2))  # ends exactly at its duration
    fill(grid, "chat", [7], range(4))
    return fill(grid, "chat", [6], [1, 2])  # one GPU in, one out: exactly swap_cap 1


def test_legal_plan_has_no_violation(instance: Instance) -> None:
    assert constraints(instance, legal(instance)) == []
    extra = legal(instance)
    extra[5][2] = "chat"  # legal at step 2 (one in), but step 3 then drops two
    assert constraints(instance, extra) == [(4, "chat", 5, 3)]


def test_unscheduled_job_is_legal(instance: Instance) -> None:
    assert constraints(instance, empty(instance)) == []


def test_constraint_1_down_gpu_and_unknown_job(instance: Instance) -> None:
    grid = empty(instance)
    grid[0][3] = "chat"
    grid[1][0] = "ghost"
    assert constraints(instance, grid) == [(1, "chat", 0, 3), (1, "ghost", 1, 0)]


def test_constraint_1_grid_shape(instance: Instance) -> None:
    assert constraints(instance, empty(instance)[:7])[0][0] == 1
    bad_row = empty(instance)
    bad_row[2] = [None]
    assert constraints(instance, bad_row) == [(1, None, 2, None)]


def test_constraint_2_wrong_gpu_count_release_and_overrun() -> None:
    inst = instance_of(
        small_doc(
            jobs=[
                {
                    "id": "j",
                    "kind": "training",
                    "priority": 1,
                    "gpus": 2,
                    "duration": 2,
                    "release": 1,
                }
            ]
        )
    )
    too_few = fill(empty(inst), "j", [0], [1, 2])
    assert {c for c, *_ in constraints(inst, too_few)} == {2}
    early = fill(empty(inst), "j", [0, 1], [0, 1])
    assert constraints(inst, early) == [(2, "j", 0, 0)]
    overrun = fill(empty(inst), "j", [0, 1], [1, 2, 3])
    assert constraints(inst, overrun) == [(2, "j", 0, 3)]
    assert constraints(inst, fill(empty(inst), "j", [0, 1], [1, 2])) == []


def test_constraint_2_run_cut_by_horizon_is_legal() -> None:
    inst = instance_of(
        small_doc(jobs=[{"id": "j", "kind": "training", "priority": 1, "gpus": 1, "duration": 9}])
    )
    assert constraints(inst, fill(empty(inst), "j", [5], [2, 3])) == []


def test_constraint_3_unaligned_split_and_moving_blocks(instance: Instance) -> None:
    unaligned = fill(empty(instance), "train", range(2, 6), range(2))
    assert constraints(instance, unaligned) == [(3, "train", 2, 0), (3, "train", 2, 1)]
    split = fill(empty(instance), "train", [0, 1, 4, 5], range(2))
    assert {c for c, *_ in constraints(instance, split)} == {3}
    moving = fill(fill(empty(instance), "train", range(4), [0]), "train", range(4, 8), [1])
    assert constraints(instance, moving) == [(3, "train", 4, 1)]


def test_constraint_4_swap_cap_including_running_set() -> None:
    doc: dict[str, Any] = small_doc(running=[{"id": "chat", "gpus": [7]}])
    inst = instance_of(doc)
    grid = fill(empty(inst), "chat", [6], [0])  # 7 out, 6 in: 2 changes > cap 1 at step 0
    assert constraints(inst, grid) == [(4, "chat", 6, 0)]
    keeps = fill(empty(inst), "chat", [7], range(4))
    assert constraints(inst, keeps) == []
    jump = fill(fill(empty(inst), "chat", [7], [0, 1]), "chat", [5, 6], [2])
    assert (4, "chat", 5, 2) in constraints(inst, jump)


def test_constraint_4_no_check_at_step_0_without_running_set(instance: Instance) -> None:
    grid = fill(empty(instance), "chat", [4, 5, 6, 7], [0])  # 4 GPUs at once is fine at t = 0
    assert constraints(instance, grid)[0][:2] == (4, "chat")  # ... but dropping 4 at t = 1 is not
    assert constraints(instance, fill(empty(instance), "chat", [4, 5, 6, 7], range(3))) == [(4, "chat", 4, 3)]


def test_constraint_5_interruption_and_moved_running_job() -> None:
    inst = instance_of(small_doc(running=[{"id": "train", "gpus": [0, 1, 2, 3], "remaining": 2}]))
    moved = fill(empty(inst), "train", range(4, 8), range(2))
    found = constraints(inst, moved)
    assert {c for c, *_ in found} == {5} and (5, "train", 0, 0) in found and (5, "train", 4, 0) in found
    stopped = fill(empty(inst), "train", range(4), range(1))
    assert constraints(inst, stopped) == [(5, "train", g, 1) for g in range(4)]
    assert constraints(inst, fill(empty(inst), "train", range(4), range(2))) == []
    queued = instance_of(small_doc())
    gap = fill(empty(queued), "train", range(4), [0, 2])
    assert (5, "train", 0, 1) in constraints(queued, gap)


def test_violation_line_names_constraint_job_gpu_step(instance: Instance) -> None:
    grid = empty(instance)
    grid[0][3] = "chat"
    (violation,) = check_plan(instance, grid)
    assert str(violation) == (
        "constraint 1 (one job per GPU per step, none on a down GPU): job chat, GPU 0, step 3: GPU is down at this step"
    )
