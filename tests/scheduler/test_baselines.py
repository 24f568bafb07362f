"""FIFO-family baselines: the contract's semantics on small cases, legality on generated ones."""

from __future__ import annotations

from typing import Any

from hypothesis import given

from contract.scenario import gpus_of
from contract.scenario_io import parse_scenario
from scheduler.check import check_plan
from scheduler.model import build_grid
from scheduler.policies import POLICIES, PolicyName, SolveOptions, plan
from tests.strategies import instance_of, scenarios

BASELINES = [PolicyName.FIFO, PolicyName.FIFO_BACKFILL, PolicyName.PRIORITY_BACKFILL]


def job(job_id: str, gpus: int, duration: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "training",
        "priority": extra.pop("priority", 1),
        "gpus": gpus,
        "duration": duration,
        **extra,
    }


def starts(policy: PolicyName, doc: dict[str, Any]) -> dict[str, tuple[int, int]]:
    allocation = POLICIES[policy](instance_of(doc), SolveOptions()).allocation
    return {j: (p.start_step, p.first_gpu) for j, p in allocation.batch.items()}


def test_fifo_keeps_arrival_order_backfill_does_not() -> None:
    doc = {"gpus": 4, "horizon": 6, "jobs": [job("late", 2, 2, release=3), job("small", 1, 1)]}
    assert starts(PolicyName.FIFO, doc) == {"late": (3, 0), "small": (3, 2)}
    assert starts(PolicyName.FIFO_BACKFILL, doc) == {"late": (3, 0), "small": (0, 0)}


def test_fifo_skips_a_job_that_fits_nowhere() -> None:
    doc = {"gpus": 2, "horizon": 4, "jobs": [job("never", 2, 1, release=9), job("next", 2, 1)]}
    assert starts(PolicyName.FIFO, doc) == {"next": (0, 0)}


def test_priority_backfill_goes_by_priority_then_order() -> None:
    doc = {
        "gpus": 2,
        "horizon": 4,
        "jobs": [
            job("low", 2, 2, priority=1),
            job("high", 2, 2, priority=9),
            job("tie", 2, 1, priority=1),
        ],
    }
    assert starts(PolicyName.PRIORITY_BACKFILL, doc) == {"high": (0, 0), "low": (2, 0)}


def test_lowest_aligned_block_at_the_earliest_start() -> None:
    doc = {"gpus": 8, "horizon": 2, "jobs": [job("one", 1, 1), job("four", 4, 2)]}
    assert starts(PolicyName.FIFO, doc) == {"one": (0, 0), "four": (0, 4)}


def test_peak_reservation_takes_highest_free_gpus_all_day() -> None:
    doc = {
        "gpus": 8,
        "horizon": 3,
        "jobs": [
            job("run", 2, 5),
            {"id": "rt", "kind": "realtime", "priority": 1, "swap_cap": 8, "demand": [1, 2, 0]},
            job("wide", 8, 1),
            job("four", 4, 3),
        ],
        "running": [{"id": "run", "gpus": [6, 7], "remaining": 5}],
    }
    allocation = POLICIES[PolicyName.FIFO](instance_of(doc), SolveOptions()).allocation
    assert [gpus_of(m) for m in allocation.realtime["rt"]] == [[4, 5]] * 3
    # the 8-wide job never fits; the 4-block [4, 8) is closed by the reservation and the running job
    assert {j: (p.start_step, p.first_gpu) for j, p in allocation.batch.items()} == {"four": (0, 0)}


def test_running_realtime_set_moves_toward_reservation_by_swap_cap() -> None:
    doc = {
        "gpus": 8,
        "horizon": 4,
        "jobs": [{"id": "rt", "kind": "realtime", "priority": 1, "swap_cap": 1, "demand": [3, 3, 3, 3]}],
        "running": [{"id": "rt", "gpus": [0]}],
    }
    allocation = POLICIES[PolicyName.FIFO](instance_of(doc), SolveOptions()).allocation
    # reserves its running GPU 0 first, then the highest free: 7 and 6; grows one GPU a step
    assert [gpus_of(m) for m in allocation.realtime["rt"]] == [[0], [0, 7], [0, 6, 7], [0, 6, 7]]


@given(scenarios())
def test_every_baseline_plan_is_legal(doc: dict[str, Any]) -> None:
    instance = parse_scenario(doc)
    for policy in BASELINES:
        allocation = POLICIES[policy](instance, SolveOptions()).allocation
        assert check_plan(instance, build_grid(instance, allocation)) == []


def test_plan_reports_metrics_and_status() -> None:
    result = plan(instance_of({"gpus": 2, "jobs": [job("a", 2, 3)]}), PolicyName.FIFO)
    assert result.status == "FEASIBLE" and result.bound is None
    assert result.metrics.completed == 1 and result.grid[0][:4] == ("a", "a", "a", None)


def test_fifo_does_not_take_back_a_gpu_it_could_not_leave_in_time() -> None:
    # Found by Hypothesis: regrowing onto GPU 0 at step 1 would leave three GPUs to shed
    # at step 2 (all down then) with a swap cap of 2.
    doc = {
        "gpus": 4,
        "horizon": 6,
        "jobs": [
            {"id": "rt", "kind": "realtime", "priority": 1, "swap_cap": 2, "demand": [0, 0, 0, 0, 0, 3]}
        ],
        "running": [{"id": "rt", "gpus": [0, 2, 3]}],
        "down": [{"gpu": 0, "start": 0, "end": 1}, *({"gpu": g, "start": 2, "end": 3} for g in (0, 2, 3))],
    }
    instance = instance_of(doc)
    for policy in BASELINES:
        assert (
            check_plan(instance, build_grid(instance, POLICIES[policy](instance, SolveOptions()).allocation))
            == []
        )
