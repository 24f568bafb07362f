"""The board's bitmask searches against their definitions, GPU by GPU and step by step."""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import given
from hypothesis import strategies as st

from contract.scenario import BatchJob, JobKind, block_mask
from scheduler.board import BlockedSchedule, Board
from tests.strategies import instance_of

# Per-step masks of 1-16 GPUs over 1-30 steps.
GPUS = st.sampled_from([1, 2, 4, 8, 12, 16])


@st.composite
def schedules(draw: st.DrawFn) -> tuple[int, list[int]]:
    gpus = draw(GPUS)
    masks = draw(st.lists(st.integers(0, (1 << gpus) - 1), min_size=1, max_size=30))
    return gpus, masks


class Holding(NamedTuple):
    """A schedule of blocked GPUs, a service's held GPUs, the step and its swap cap."""

    masks: list[int]
    held: int
    step: int
    cap: int


@st.composite
def holdings(draw: st.DrawFn) -> Holding:
    gpus, masks = draw(schedules())
    held = draw(st.integers(0, (1 << gpus) - 1))
    return Holding(masks, held, draw(st.integers(0, len(masks) - 1)), draw(st.integers(0, 4)))


def _deadlines(masks: list[int], held: int, step: int) -> list[tuple[int, int]]:
    """(first blocked step from ``step`` on, GPU) of each held GPU blocked again, earliest first."""
    found = []
    for gpu in range(held.bit_length()):
        if held >> gpu & 1:
            later = [t for t in range(step, len(masks)) if masks[t] >> gpu & 1]
            if later:
                found.append((later[0], gpu))
    return sorted(found)


@given(holdings())
def test_must_drop_releases_the_earliest_deadlines_the_cap_cannot_wait_for(holding: Holding) -> None:
    """With N(u) held GPUs blocked by step u and at most ``swap_cap`` released a step, the
    most N(u) - swap_cap * (u - step) says how many go now: the earliest deadlines, the
    lowest ids first among equal ones."""
    masks, held, step, cap = holding
    deadlines = _deadlines(masks, held, step)
    needed = max([0, *(count - cap * (d - step) for count, (d, _) in enumerate(deadlines, start=1))])
    expected = sum(1 << gpu for _, gpu in deadlines[:needed])
    assert BlockedSchedule(masks).must_drop(held, step, cap) == expected


@given(holdings())
def test_still_reachable_means_no_step_needs_more_releases_than_the_cap_allows(holding: Holding) -> None:
    masks, held, step, cap = holding
    deadlines = _deadlines(masks, held, step + 1)
    expected = all(count <= cap * (d - step) for count, (d, _) in enumerate(deadlines, start=1))
    assert BlockedSchedule(masks).still_reachable(held, step, cap) == expected


@given(schedules(), st.data())
def test_earliest_run_is_the_first_start_with_an_aligned_block_free_at_every_step(
    schedule: tuple[int, list[int]], data: st.DataObject
) -> None:
    gpus, busy = schedule
    size = data.draw(st.sampled_from([s for s in (1, 2, 4, 8, 16) if s <= gpus and gpus % s == 0]))
    duration = data.draw(st.integers(1, 12))
    not_before = data.draw(st.integers(0, len(busy)))
    job = BatchJob(id="job", kind=JobKind.TRAINING, priority=1.0, gpus=size, duration_steps=duration)
    board = Board(instance_of({"name": "empty", "gpus": gpus, "horizon": len(busy), "jobs": []}))
    board.busy = list(busy)
    expected = None
    for start in range(not_before, len(busy)):
        end = min(start + duration, len(busy))
        free = [
            a
            for a in range(0, gpus, size)
            if all(not busy[t] & block_mask(a, size) for t in range(start, end))
        ]
        if free:
            expected = (start, end, sum(1 << a for a in free))
            break
    assert board.earliest_run(job, not_before) == expected


def test_earliest_run_goes_on_from_the_stretch_that_keeps_a_block_when_a_step_empties_the_run() -> None:
    # Two GPUs, a 1-GPU job of 3 steps. From step 1 the run keeps GPU 0 until step 3 takes it;
    # scanning back from step 3, GPU 1 is free at steps 2-3 but not 1: the next start is 2, on
    # GPU 1, with steps 2-3 already known free.
    job = BatchJob(id="job", kind=JobKind.TRAINING, priority=1.0, gpus=1, duration_steps=3)
    board = Board(instance_of({"name": "empty", "gpus": 2, "horizon": 6, "jobs": []}))
    board.busy = [0b01, 0b10, 0b00, 0b01, 0b00, 0b00]
    assert board.earliest_run(job, 0) == (2, 5, 0b10)
    assert board.earliest_run(job, 3) == (3, 6, 0b10)
