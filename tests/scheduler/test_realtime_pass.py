"""The fast mode's real-time pass (scheduler/fast/realtime.py): services placed in turn at
each step."""

from __future__ import annotations

from scheduler.board import BlockedSchedule, Board
from scheduler.fast import place_realtime
from tests.strategies import instance_of


def test_a_service_short_of_its_curve_takes_a_gpu_the_service_after_it_gives_up_that_step() -> None:
    # Two services of one priority on 4 GPUs, GPU 0 busy with a running job. At step 1 "a"
    # needs a second GPU and "b" needs one fewer: the GPU "b" gives up is the only free one.
    # "a" is placed first, while "b" still holds it; it takes it once "b" has given it up.
    inst = instance_of(
        {
            "gpus": 4,
            "horizon": 3,
            "jobs": [
                {"id": "a", "kind": "realtime", "priority": 50, "swap_cap": 2, "demand": [1, 2, 2]},
                {"id": "b", "kind": "realtime", "priority": 50, "swap_cap": 2, "demand": [2, 1, 1]},
                {"id": "run", "kind": "training", "priority": 10, "gpus": 1, "duration": 3},
            ],
            "running": [
                {"id": "a", "gpus": [3]},
                {"id": "b", "gpus": [1, 2]},
                {"id": "run", "gpus": [0], "remaining": 3},
            ],
        }
    )
    held = place_realtime(inst, Board(inst), BlockedSchedule.of_down_windows(inst))
    assert [mask.bit_count() for mask in held["a"]] == [1, 2, 2]
    assert [mask.bit_count() for mask in held["b"]] == [2, 1, 1]
    assert all(not a & b for a, b in zip(held["a"], held["b"], strict=True))
