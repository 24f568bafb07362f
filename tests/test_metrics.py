"""Metrics against values computed by hand from the contract's definitions."""

from __future__ import annotations

import pytest

from scheduler.metrics import score
from tests.strategies import instance_of


def test_value_penalty_utilization_coverage_by_hand() -> None:
    inst = instance_of(
        {
            "gpus": 2,
            "horizon": 2,
            "decay": 0.5,
            "rt_penalty": 2,
            "jobs": [
                {"id": "a", "kind": "training", "priority": 10, "gpus": 1, "duration": 1},
                {"id": "r", "kind": "realtime", "priority": 4, "swap_cap": 2, "demand": [1, 2]},
            ],
        }
    )
    m = score(inst, [["a", "r"], ["r", None]])
    # batch: 10 * w(0) = 10; r: served 1 at t0 (4 * 1) and 1 of 2 at t1 (4 * 0.5), short 1 at t1
    assert m.value == pytest.approx(10 + 4 + 2, abs=1e-9)
    assert m.penalty == pytest.approx(2 * 4 * 0.5 * 1, abs=1e-9)
    assert m.objective == pytest.approx(16 - 4, abs=1e-9)
    assert m.utilization == pytest.approx(3 / 4, abs=1e-9)
    assert m.rt_coverage == pytest.approx(2 / 3, abs=1e-9)
    assert (m.completed, m.unscheduled) == (1, 0)


def test_idle_reservation_and_down_cells_do_not_count() -> None:
    inst = instance_of(
        {
            "gpus": 2,
            "horizon": 1,
            "jobs": [
                {"id": "r", "kind": "realtime", "priority": 1, "swap_cap": 0, "demand": [0]},
                {"id": "b", "kind": "training", "priority": 1, "gpus": 1, "duration": 1},
            ],
            "down": [{"gpu": 1}],
        }
    )
    m = score(inst, [["r"], [None]])
    assert (m.utilization, m.value, m.penalty, m.rt_coverage, m.completed, m.unscheduled) == (
        0.0,
        0.0,
        0.0,
        1.0,
        0,
        1,
    )


def test_running_jobs_count_and_complete_only_inside_horizon() -> None:
    inst = instance_of(
        {
            "gpus": 2,
            "horizon": 2,
            "decay": 0.5,
            "jobs": [
                {"id": "long", "kind": "training", "priority": 3, "gpus": 1, "duration": 9},
                {"id": "short", "kind": "quantization", "priority": 2, "gpus": 1, "duration": 5},
            ],
            "running": [
                {"id": "long", "gpus": [0], "remaining": 3},
                {"id": "short", "gpus": [1], "remaining": 1},
            ],
        }
    )
    m = score(inst, [["long", "long"], ["short", None]])
    assert m.value == pytest.approx(3 * 1.5 + 2 * 1.0, abs=1e-9)
    assert (m.completed, m.unscheduled) == (1, 0)
    assert m.utilization == pytest.approx(3 / 4, abs=1e-9)


def test_job_cut_by_horizon_is_not_completed() -> None:
    inst = instance_of(
        {
            "gpus": 1,
            "horizon": 3,
            "jobs": [{"id": "j", "kind": "training", "priority": 1, "gpus": 1, "duration": 2}],
        }
    )
    assert score(inst, [[None, "j", "j"]]).completed == 1
    assert score(inst, [[None, None, "j"]]).completed == 0


def test_rt_moves_counts_gpus_gained_and_lost_by_hand() -> None:
    inst = instance_of(
        {
            "gpus": 3,
            "horizon": 3,
            "jobs": [
                {"id": "r", "kind": "realtime", "priority": 1, "swap_cap": 2, "demand": [1, 2, 1]},
                {"id": "s", "kind": "realtime", "priority": 1, "swap_cap": 2, "demand": [1, 1, 1]},
            ],
            "running": [{"id": "r", "gpus": [2]}],
        }
    )
    # r: {0} at step 0 against its running set {2} (2 moves), {0, 1} (1), {1} (1);
    # s has no running set, so its step 0 is free: {2}, {2}, {0} (2)
    m = score(inst, [["r", "r", "s"], [None, "r", "r"], ["s", "s", None]])
    assert m.rt_moves == 2 + 1 + 1 + 2
