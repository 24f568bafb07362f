"""Warm starts (scheduler/warm.py): new jobs inserted into a stored plan, legal and never worse."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from contract.scenario import Instance
from contract.scenario_io import parse_scenario
from scheduler import baselines, warm
from scheduler.budget import Budget
from scheduler.check import check_plan
from scheduler.fast import allocate
from scheduler.metrics import score
from scheduler.model import HOT_PATH_BUDGET_MS, Allocation, Placement, build_grid
from scheduler.warm import Refuted, insert, read_allocation
from tests.strategies import scenarios


def _split(doc: dict[str, Any], count: int) -> tuple[dict[str, Any], list[str]]:
    """``doc`` without up to ``count`` of its queued batch jobs (the new ones), and their ids."""
    running = {r["id"] for r in doc.get("running", [])}
    queued = [j["id"] for j in doc["jobs"] if j["kind"] != "realtime" and j["id"] not in running]
    new = queued[-count:] if count else []
    return {**doc, "jobs": [j for j in doc["jobs"] if j["id"] not in new]}, new


@given(scenarios(max_gpus=32, max_jobs=14), st.integers(1, 3), st.booleans())
def test_insertion_is_legal_and_never_below_the_stored_plan(
    doc: dict[str, Any], count: int, repair: bool
) -> None:
    base_doc, new = _split(doc, count)
    base_instance = parse_scenario(base_doc)
    stored = build_grid(base_instance, allocate(base_instance, Budget.of_work(HOT_PATH_BUDGET_MS)))
    instance = parse_scenario(doc)
    base = read_allocation(instance, stored)
    assert base is not None  # the stored plan is a legal plan of the instance, new jobs left out
    budgets = (lambda: Budget.of_work(HOT_PATH_BUDGET_MS)) if repair else None
    grid = build_grid(instance, insert(instance, base, new, budgets))
    assert check_plan(instance, grid) == []
    assert score(instance, grid).objective >= score(instance, stored).objective - 1e-6
    # nothing stored moves unless the repair buys more: the plain insertion keeps every block
    if not repair:
        for before, after in zip(stored, grid, strict=True):
            assert all(cell is None or after[t] == cell for t, cell in enumerate(before))


def _doc(*jobs: dict[str, Any], gpus: int = 2, horizon: int = 6) -> dict[str, Any]:
    return {"name": "warm", "gpus": gpus, "horizon": horizon, "jobs": list(jobs)}


def test_a_new_job_takes_the_earliest_free_block() -> None:
    doc = _doc(
        {"id": "old", "kind": "training", "priority": 5, "gpus": 1, "duration": 3},
        {"id": "new", "kind": "training", "priority": 5, "gpus": 1, "duration": 2},
    )
    instance = parse_scenario(doc)
    base = read_allocation(instance, build_grid(instance, _alloc(instance, old=(0, 0))))
    assert base is not None
    assert insert(instance, base, ["new"]).batch["new"] == Placement(start_step=0, first_gpu=1)


def test_an_urgent_job_displaces_a_cheap_one_and_the_cheap_one_is_placed_again() -> None:
    doc = _doc(
        {"id": "cheap", "kind": "batch_inference", "priority": 1, "gpus": 2, "duration": 3},
        {"id": "urgent", "kind": "training", "priority": 50, "gpus": 2, "duration": 2},
    )
    instance = parse_scenario(doc)
    base = read_allocation(instance, build_grid(instance, _alloc(instance, cheap=(0, 0))))
    assert base is not None
    plain = insert(instance, base, ["urgent"])
    assert plain.batch["urgent"].start_step == 3  # behind the cheap job
    repaired = insert(instance, base, ["urgent"], lambda: Budget.of_work(HOT_PATH_BUDGET_MS))
    assert repaired.batch["urgent"].start_step == 0
    assert repaired.batch["cheap"].start_step == 2  # after it, not dropped
    grid = build_grid(instance, repaired)
    assert check_plan(instance, grid) == []
    assert score(instance, grid).objective > score(instance, build_grid(instance, plain)).objective


def test_a_grid_that_is_not_a_plan_of_the_instance_reads_as_none() -> None:
    instance = parse_scenario(_doc({"id": "a", "kind": "training", "priority": 1, "gpus": 1, "duration": 1}))
    stale: list[list[str | None]] = [["gone", None, None, None, None, None], [None] * 6]
    assert read_allocation(instance, stale) is None


def _alloc(instance: Instance, **starts: tuple[int, int]) -> Allocation:
    return Allocation(
        batch={job: Placement(start_step=s, first_gpu=g) for job, (s, g) in starts.items()},
        realtime={job.id: (0,) * instance.horizon_steps for job in instance.realtime_jobs},
    )


def _one_by_one(instance: Instance, base: Allocation, new: list[str]) -> Allocation:
    """``new`` inserted one call each: every job searched, none left out by a refuted shape."""
    for job in new:
        base = insert(instance, base, [job], lambda: Budget.of_work(HOT_PATH_BUDGET_MS))
    return base


def test_a_job_of_a_refuted_shape_is_left_out_without_a_search_and_the_plan_is_the_same() -> None:
    shape = {"kind": "batch_inference", "gpus": 2, "duration": 3}
    doc = _doc(
        {"id": "held", "kind": "training", "priority": 10, "gpus": 2, "duration": 6},
        {"id": "low", "priority": 5, **shape},  # cannot pay for what it would ruin
        {"id": "lower", "priority": 4, **shape},  # the same shape, cheaper: refuted by "low"
        {"id": "longer", "priority": 4, **shape, "duration": 4},  # another shape: searched
        {"id": "urgent", "priority": 50, **shape},  # the same shape, dearer: searched, and in
    )
    instance = parse_scenario(doc)
    base = read_allocation(instance, build_grid(instance, _alloc(instance, held=(0, 0))))
    assert base is not None
    searched: list[int] = []

    def budgets() -> Budget:
        searched.append(1)
        return Budget.of_work(HOT_PATH_BUDGET_MS)

    new = ["low", "lower", "longer", "urgent"]
    refuted = Refuted()
    together = insert(instance, base, new, budgets, refuted=refuted)
    assert len(searched) == 3  # "lower" was not searched
    assert together == _one_by_one(instance, base, new)
    assert together.batch["urgent"].start_step == 0 and "low" not in together.batch
    # the plan changed when "urgent" went in: nothing is refuted of the plan returned
    assert not refuted.refutes(instance.jobs_by_id["lower"])  # type: ignore[arg-type]


@given(scenarios(max_gpus=16, max_jobs=10), st.lists(st.floats(0.5, 60), min_size=2, max_size=5))
def test_inserting_copies_of_a_shape_together_is_inserting_them_one_by_one(
    doc: dict[str, Any], priorities: list[float]
) -> None:
    base_doc, _ = _split(doc, 0)
    queued = [j for j in base_doc["jobs"] if j["kind"] != "realtime"]
    running = {r["id"] for r in base_doc.get("running", [])}
    shapes = [j for j in queued if j["id"] not in running]
    if not shapes:
        return
    copies = [{**shapes[0], "id": f"copy{n}", "priority": p} for n, p in enumerate(priorities)]
    base_instance = parse_scenario(base_doc)
    stored = build_grid(base_instance, allocate(base_instance, Budget.of_work(HOT_PATH_BUDGET_MS)))
    instance = parse_scenario({**base_doc, "jobs": [*base_doc["jobs"], *copies]})
    base = read_allocation(instance, stored)
    assert base is not None
    new = [c["id"] for c in copies]
    together = insert(instance, base, new, lambda: Budget.of_work(HOT_PATH_BUDGET_MS))
    assert together == _one_by_one(instance, base, new)
    assert check_plan(instance, build_grid(instance, together)) == []


@given(
    scenarios(max_gpus=16, max_jobs=14),
    st.integers(1, 4),
    st.floats(0, 2),
    st.lists(st.integers(0, 8), max_size=14),
    st.floats(0.5, 1),
)
def test_a_repair_left_once_its_ceiling_cannot_beat_the_best_leaves_the_plan_as_a_full_search(
    doc: dict[str, Any], count: int, penalty: float, promises: list[int], decay: float
) -> None:
    """A repair stops packing its ruined jobs once, each counted at its ceiling, it cannot beat
    the best (warm._ceiling): the plan is the one the search that packs every ruined job makes
    (the ceilings infinite), on work-only budgets, promises and their costs included."""
    jobs = [
        {**job, "promise": promises[i]} if i < len(promises) and job["kind"] != "realtime" else job
        for i, job in enumerate(doc["jobs"])
    ]
    doc = {**doc, "jobs": jobs, "promise_penalty": penalty, "promise_break": 2, "decay": decay}
    base_doc, new = _split(doc, count)
    base_instance = parse_scenario(base_doc)
    stored = build_grid(base_instance, allocate(base_instance, Budget.of_work(HOT_PATH_BUDGET_MS)))
    instance = parse_scenario(doc)
    base = read_allocation(instance, stored)
    assert base is not None

    def planned() -> Allocation:
        return insert(instance, base, new, lambda: Budget.of_work(HOT_PATH_BUDGET_MS))

    bounded = planned()
    with mock.patch.object(warm._Ceilings, "__missing__", lambda self, job_id: float("inf")):
        assert bounded == planned()


def _quiet_queue_doc(*jobs: dict[str, Any]) -> dict[str, Any]:
    """16 GPUs, 8 steps; a service running on 12 GPUs whose need falls to 2 (swap cap 2)."""
    demand = [12, 10, 8, 6, 4, 2, 2, 2]
    return {
        "name": "quiet",
        "gpus": 16,
        "horizon": 8,
        "jobs": [
            {"id": "chat", "kind": "realtime", "priority": 80, "swap_cap": 2, "demand": demand},
            *jobs,
        ],
        "running": [{"id": "chat", "gpus": list(range(4, 16))}],
    }


def test_a_job_inserted_between_cycles_starts_in_the_room_a_services_need_leaves() -> None:
    """On an empty queue the plan may hold a service's peak all day (the reservation wins the
    tie at equal objective). A job inserted into it must be placed as if the service held its
    need, no later than a fresh plan of the queue with the job places it."""
    wide = {"id": "wide", "kind": "training", "priority": 10, "gpus": 8, "duration": 2}
    empty = parse_scenario(_quiet_queue_doc())
    # the baselines' reservation: the peak all day (what the fast plan chose on an empty queue)
    stored = build_grid(empty, baselines.fifo(empty))
    instance = parse_scenario(_quiet_queue_doc(wide))
    base = read_allocation(instance, stored)
    assert base is not None
    assert [mask.bit_count() for mask in base.realtime["chat"]] == [12] * 8
    assert "wide" not in insert(instance, base, ["wide"]).batch  # behind the peak: no room
    trimmed = warm.trimmed_realtime(instance, base)
    # what the service serves, and so the objective, is the same; it holds no more than its need
    assert score(empty, build_grid(empty, trimmed)).objective == score(empty, stored).objective
    held = [mask.bit_count() for mask in trimmed.realtime["chat"]]
    assert held == [12, 10, 8, 6, 4, 2, 2, 2]
    grid = build_grid(instance, insert(instance, trimmed, ["wide"]))
    assert check_plan(instance, grid) == []
    fresh = allocate(instance, Budget.of_work(HOT_PATH_BUDGET_MS))
    assert "wide" in fresh.batch
    placed = insert(instance, trimmed, ["wide"]).batch["wide"]
    assert placed.start_step <= fresh.batch["wide"].start_step
