"""Reports on plans: hand-built plans with obvious answers, and brute-force properties on random grids."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.errors import InputError
from contract.records import (
    App,
    AppForecast,
    Assignment,
    Cluster,
    Commit,
    DownWindowRecord,
    PlanRun,
    RunMode,
    TrafficHour,
)
from contract.scenario import Instance, JobKind
from contract.scenario_io import parse_scenario
from gpuplan.app.views.reports import (
    NeedBasis,
    ShortfallReason,
    bookable_starts,
    commit_rows,
    coverage_risk,
    idle_windows,
    quantile_requests,
    utilization,
)
from scheduler.check import check_plan

START = datetime(2026, 3, 1, 13, tzinfo=UTC)
HOUR = timedelta(hours=1)

Grid = list[list[str | None]]


def at(step: int) -> datetime:
    return START + step * HOUR


def empty_grid(gpus: int, steps: int) -> Grid:
    return [[None] * steps for _ in range(gpus)]


def fill(grid: Grid, job: str, gpus: range | list[int], steps: range) -> None:
    for g in gpus:
        for t in steps:
            grid[g][t] = job


def bare(gpus: int, steps: int, down: list[dict[str, int]] | None = None) -> Instance:
    doc: dict[str, Any] = {"name": "bare", "gpus": gpus, "horizon": steps, "jobs": []}
    if down:
        doc["down"] = down
    return parse_scenario(doc)


def plan_run(doc: dict[str, Any], grid: Grid, forecasts: tuple[AppForecast, ...] = ()) -> PlanRun:
    """A stored run as the daemon would record it; the hand-built grid must be legal."""
    assert check_plan(parse_scenario(doc), grid) == []
    return PlanRun(
        start=START,
        created_at=START,
        mode=RunMode.PLAN,
        policy="fast",
        inputs_hash="test",
        objective=0.0,
        bound=None,
        latency_ms=1.0,
        status="FEASIBLE",
        scenario=doc,
        grid=grid,
        metrics={},
        forecasts=forecasts,
        id=7,
    )


def realtime(job_id: str, demand: list[int], swap_cap: int) -> dict[str, Any]:
    return {"id": job_id, "kind": "realtime", "priority": 80, "swap_cap": swap_cap, "demand": demand}


# ---------------------------------------------------------------------------------------
# Idle windows


def test_one_idle_block_is_one_window() -> None:
    grid = empty_grid(4, 4)
    fill(grid, "a", range(2), range(4))
    fill(grid, "b", range(2, 4), range(1))
    report = idle_windows(bare(4, 4), grid, START)
    assert [(w.start, w.end, w.first_gpu, w.gpus, w.reaches_horizon) for w in report.rows] == [
        (at(1), at(4), 2, 2, True)
    ]
    assert report.rows[0].gpu_hours == 6.0
    assert report.free_gpu_hours == 6.0 and report.unlisted_gpu_hours == 0.0


def test_unaligned_free_pair_is_two_single_gpu_windows_and_unlisted_for_two() -> None:
    grid = empty_grid(4, 3)
    fill(grid, "a", [0, 3], range(3))  # GPUs 1-2 free: adjacent, but not an aligned pair
    report = idle_windows(bare(4, 3), grid, START)
    assert [(w.first_gpu, w.gpus) for w in report.rows] == [(1, 1), (2, 1)]
    wide = idle_windows(bare(4, 3), grid, START, min_gpus=2)
    assert wide.rows == ()
    assert wide.free_gpu_hours == 6.0 and wide.unlisted_gpu_hours == 6.0


def test_down_cells_are_not_idle_and_min_hours_filters_short_windows() -> None:
    instance = bare(2, 4, down=[{"gpu": 1, "start": 0, "end": 3}])
    report = idle_windows(instance, empty_grid(2, 4), START)
    assert [(w.start, w.end, w.first_gpu, w.gpus) for w in report.rows] == [
        (at(0), at(4), 0, 1),
        (at(3), at(4), 0, 2),
    ]
    long = idle_windows(instance, empty_grid(2, 4), START, min_hours=2)
    assert [(w.first_gpu, w.gpus) for w in long.rows] == [(0, 1)]
    assert long.unlisted_gpu_hours == 1.0  # GPU 1 at step 3


def test_a_longer_narrow_window_and_a_shorter_wide_one_are_both_maximal() -> None:
    grid = empty_grid(4, 4)
    fill(grid, "a", range(1, 4), range(2, 4))  # all four free for 2 h, GPU 0 for 4 h
    rows = idle_windows(bare(4, 4), grid, START).rows
    assert [(w.first_gpu, w.gpus, w.start, w.end) for w in rows] == [
        (0, 4, at(0), at(2)),
        (0, 1, at(0), at(4)),
    ]


def test_idle_windows_reject_a_grid_of_the_wrong_shape() -> None:
    with pytest.raises(
        InputError,
        match=re.escape("`grid` must be 4 rows (GPUs) of 4 cells (steps); got '4 rows of [3] cells'."),
    ):
        idle_windows(bare(4, 4), empty_grid(4, 3), START)


# ---------------------------------------------------------------------------------------
# Bookable starts


def test_bookable_starts_give_each_block_its_earliest_start() -> None:
    grid = empty_grid(8, 6)
    fill(grid, "a", range(4), range(2))  # block 0-3 busy for 2 h
    fill(grid, "b", range(4, 8), range(3, 6))  # block 4-7 busy from hour 3
    rows = bookable_starts(bare(8, 6), grid, START, gpus=4, hours=3)
    assert [(r.start, r.end, r.first_gpu, r.unplanned_hours) for r in rows] == [
        (at(0), at(3), 4, 0.0),
        (at(2), at(5), 0, 0.0),
    ]
    assert [r.start for r in bookable_starts(bare(8, 6), grid, START, gpus=8, hours=1)] == [at(2)]
    assert bookable_starts(bare(8, 6), grid, START, gpus=8, hours=2) == []


def test_a_booking_may_run_past_the_horizon_and_says_how_far() -> None:
    grid = empty_grid(2, 4)
    fill(grid, "a", range(2), range(3))
    rows = bookable_starts(bare(2, 4), grid, START, gpus=2, hours=5)
    assert [(r.start, r.end, r.first_gpu, r.unplanned_hours) for r in rows] == [(at(3), at(8), 0, 4.0)]


def test_bookable_starts_reject_a_job_that_is_not_a_power_of_two() -> None:
    with pytest.raises(
        InputError,
        match=re.escape("`gpus` must be a power of two (1, 2, 4, ...) up to the cluster's 8; got 3."),
    ):
        bookable_starts(bare(8, 4), empty_grid(8, 4), START, gpus=3, hours=1)


# ---------------------------------------------------------------------------------------
# Coverage risk


def test_a_swap_capped_ramp_that_starts_too_late_falls_short() -> None:
    doc = {
        "name": "ramp",
        "gpus": 8,
        "horizon": 4,
        "jobs": [realtime("chat", [1, 4, 4, 4], swap_cap=1)],
        "running": [{"id": "chat", "gpus": [7]}],
    }
    grid = empty_grid(8, 4)
    fill(grid, "chat", [6, 7], range(4))
    fill(grid, "chat", [5], range(1, 4))
    fill(grid, "chat", [4], range(2, 4))
    report = coverage_risk(plan_run(doc, grid), apps=[])
    assert [
        (r.hour, r.app, r.planned_gpus, r.needed_gpus, r.shortfall_gpus, r.reason) for r in report.rows
    ] == [(at(1), "chat", 3, 4, 1, ShortfallReason.SWAP_CAP)]


def test_a_gpu_going_down_leaves_the_app_short() -> None:
    doc = {
        "name": "down",
        "gpus": 4,
        "horizon": 4,
        "jobs": [realtime("chat", [4, 4, 4, 4], swap_cap=2)],
        "running": [{"id": "chat", "gpus": [0, 1, 2, 3]}],
        "down": [{"gpu": 3, "start": 2}],
    }
    grid = empty_grid(4, 4)
    fill(grid, "chat", range(3), range(4))
    fill(grid, "chat", [3], range(2))
    rows = coverage_risk(plan_run(doc, grid), apps=[]).rows
    assert [(r.hour, r.shortfall_gpus, r.reason) for r in rows] == [
        (at(2), 1, ShortfallReason.GPUS_DOWN),
        (at(3), 1, ShortfallReason.GPUS_DOWN),
    ]


def test_running_batch_work_pins_the_gpus_then_the_swap_cap_slows_the_ramp() -> None:
    doc = {
        "name": "pinned",
        "gpus": 4,
        "horizon": 4,
        "jobs": [
            {"id": "train", "kind": "training", "priority": 50, "gpus": 2, "duration": 5},
            realtime("chat", [4, 4, 4, 4], swap_cap=1),
        ],
        "running": [{"id": "train", "gpus": [0, 1], "remaining": 2}, {"id": "chat", "gpus": [2, 3]}],
    }
    grid = empty_grid(4, 4)
    fill(grid, "train", range(2), range(2))
    fill(grid, "chat", [2, 3], range(4))
    fill(grid, "chat", [1], range(2, 4))
    fill(grid, "chat", [0], range(3, 4))
    rows = coverage_risk(plan_run(doc, grid), apps=[]).rows
    assert [(r.hour, r.planned_gpus, r.shortfall_gpus, r.reason) for r in rows] == [
        (at(0), 2, 2, ShortfallReason.BATCH_PINNED),
        (at(1), 2, 2, ShortfallReason.BATCH_PINNED),
        (at(2), 3, 1, ShortfallReason.SWAP_CAP),
    ]


def test_other_apps_filling_the_cluster_is_capacity() -> None:
    doc = {
        "name": "full",
        "gpus": 4,
        "horizon": 2,
        "jobs": [realtime("big", [4, 4], swap_cap=1), realtime("small", [2, 2], swap_cap=1)],
        "running": [{"id": "big", "gpus": [0, 1]}, {"id": "small", "gpus": [2, 3]}],
    }
    grid = empty_grid(4, 2)
    fill(grid, "big", [0, 1], range(2))
    fill(grid, "small", [2, 3], range(2))
    rows = coverage_risk(plan_run(doc, grid), apps=[]).rows
    assert {(r.app, r.reason) for r in rows} == {("big", ShortfallReason.CAPACITY)}
    assert all(r.basis is NeedBasis.FORECAST and r.needed_gpus == 4 and r.planned_gpus == 2 for r in rows)


def forecast_run() -> tuple[PlanRun, App]:
    """chat: P50 150 and P90 200 requests an hour at 100 per GPU-hour; planned 2 GPUs (the P90 need)."""
    doc = {
        "name": "quantiles",
        "gpus": 4,
        "horizon": 3,
        "jobs": [realtime("chat", [2, 2, 2], swap_cap=1)],
        "running": [{"id": "chat", "gpus": [2, 3]}],
    }
    grid = empty_grid(4, 3)
    fill(grid, "chat", [2, 3], range(3))
    forecasts = tuple(AppForecast("chat", at(t), p50=150.0, p90=200.0, gpus=2) for t in range(3))
    app = App("chat", priority=80, swap_cap=1, requests_per_gpu_hour=100.0)
    return plan_run(doc, grid, forecasts), app


def test_quantile_above_the_planned_one_is_above_planned_and_the_median_is_covered() -> None:
    run, app = forecast_run()
    assert coverage_risk(run, [app], quantile=0.9).rows == ()
    assert coverage_risk(run, [app], quantile=0.5).rows == ()
    rows = coverage_risk(run, [app], quantile=0.95).rows
    # P95 = 150 + (200 - 150) / z(0.9) * z(0.95) = 214.2 requests -> 3 GPUs
    assert [(r.hour, r.needed_gpus, r.shortfall_gpus, r.reason) for r in rows] == [
        (at(t), 3, 1, ShortfallReason.ABOVE_PLANNED) for t in range(3)
    ]


def test_quantile_requests_hit_p50_and_p90_and_never_go_negative() -> None:
    assert quantile_requests(150.0, 200.0, 0.5) == pytest.approx(150.0)
    assert quantile_requests(150.0, 200.0, 0.9) == pytest.approx(200.0)
    assert quantile_requests(10.0, 200.0, 0.01) == 0.0


def test_quantile_must_lie_strictly_between_zero_and_one() -> None:
    run, app = forecast_run()
    with pytest.raises(
        InputError,
        match=re.escape("`quantile` must be a number strictly between 0 and 1 (0.9 = P90); got 1.0."),
    ):
        coverage_risk(run, [app], quantile=1.0)


def test_realised_coverage_counts_committed_hours_against_actual_traffic() -> None:
    run, app = forecast_run()
    commits = [
        Commit(at(-30), 1, (Assignment("chat", (2, 3)),)),  # before the window: not counted
        Commit(at(-3), 1, (Assignment("chat", (2, 3)),)),  # no traffic stored: not counted
        Commit(at(-2), 1, (Assignment("chat", (2, 3)),)),
        Commit(at(-1), 2, (Assignment("chat", (3,)), Assignment("batch", (0, 1)))),
    ]
    traffic = [
        TrafficHour("chat", at(-30), 900.0),
        TrafficHour("chat", at(-2), 150.0),  # needs 2: served 2
        TrafficHour("chat", at(-1), 250.0),  # needs 3: served 1
    ]
    report = coverage_risk(run, [app], traffic=traffic, commits=commits)
    assert [(r.hour, r.planned_gpus, r.needed_gpus, r.reason, r.basis) for r in report.rows] == [
        (at(-1), 1, 3, ShortfallReason.REALISED, NeedBasis.ACTUAL)
    ]
    (summary,) = report.realised
    assert (summary.since, summary.until) == (at(-3), START)  # one horizon back by default
    assert (summary.hours, summary.needed_gpu_hours, summary.served_gpu_hours, summary.short_hours) == (
        2,
        5.0,
        3.0,
        1,
    )
    assert summary.served_share == pytest.approx(0.6)
    wider = coverage_risk(run, [app], traffic=traffic, commits=commits, since=at(-30))
    assert wider.realised[0].hours == 3 and wider.realised[0].needed_gpu_hours == 14.0


# ---------------------------------------------------------------------------------------
# Utilization and commits


def test_utilization_counts_gpus_by_kind_idle_and_down() -> None:
    cluster = Cluster(gpus=8, down=(DownWindowRecord(gpu=7, start=at(1), end=at(2)),))
    commits = [
        Commit(
            at(1), 2, (Assignment("train", (0, 1, 2, 3)), Assignment("chat", (6,)), Assignment("gone", (4,)))
        ),
        Commit(at(0), 1, (Assignment("quant", (0,)), Assignment("chat", (6, 7)))),
    ]
    kinds = {"train": JobKind.TRAINING, "quant": JobKind.QUANTIZATION, "chat": JobKind.REALTIME}
    report = utilization(commits, cluster, kinds)
    assert [
        (r.hour, r.training, r.quantization, r.realtime, r.other, r.idle, r.down) for r in report.rows
    ] == [
        (at(0), 0, 1, 2, 0, 5, 0),
        (at(1), 4, 0, 1, 1, 1, 1),
    ]
    assert report.rows[1].busy_share == pytest.approx(6 / 7)
    assert report.gpu_hours["training"] == 4.0 and report.gpu_hours["idle"] == 6.0
    assert report.busy_share == pytest.approx(9 / 15)


def test_commit_rows_are_one_per_hour_and_job_with_sorted_gpus() -> None:
    commits = [
        Commit(at(1), 2, (Assignment("b", (3, 2)),)),
        Commit(at(0), 1, (Assignment("z", (0,)), Assignment("a", (1,)))),
    ]
    assert [(r.hour, r.job, r.gpus) for r in commit_rows(commits)] == [
        (at(0), "a", (1,)),
        (at(0), "z", (0,)),
        (at(1), "b", (2, 3)),
    ]


# ---------------------------------------------------------------------------------------
# Properties on random grids, checked by brute force


@st.composite
def random_plans(draw: st.DrawFn) -> tuple[Instance, Grid]:
    """A cluster (any size up to 12 GPUs, power of two or not) with busy rectangles and down GPUs."""
    gpus = draw(st.integers(1, 12))
    steps = draw(st.integers(1, 8))
    down = [
        {
            "gpu": draw(st.integers(0, gpus - 1)),
            "start": (s := draw(st.integers(0, steps - 1))),
            "end": draw(st.integers(s + 1, steps)),
        }
        for _ in range(draw(st.integers(0, 2)))
    ]
    grid = empty_grid(gpus, steps)
    for k in range(draw(st.integers(0, 6))):
        g0 = draw(st.integers(0, gpus - 1))
        t0 = draw(st.integers(0, steps - 1))
        fill(
            grid,
            f"j{k}",
            range(g0, draw(st.integers(g0 + 1, gpus))),
            range(t0, draw(st.integers(t0 + 1, steps))),
        )
    return bare(gpus, steps, down), grid


def free_cells(instance: Instance, grid: Grid) -> set[tuple[int, int]]:
    return {
        (g, t)
        for g in range(instance.gpus)
        for t in range(instance.horizon_steps)
        if grid[g][t] is None and not instance.down_masks[t] >> g & 1
    }


def aligned_blocks(gpus: int) -> list[tuple[int, int]]:
    sizes = [1 << k for k in range(gpus.bit_length()) if 1 << k <= gpus]
    return [(a, b) for b in sizes for a in range(0, gpus - b + 1, b)]


def free_windows(instance: Instance, grid: Grid) -> set[tuple[int, int, int, int]]:
    """Every (first_gpu, gpus, start, end) aligned block free over [start, end), by enumeration."""
    free = free_cells(instance, grid)
    steps = instance.horizon_steps
    return {
        (a, b, s, e)
        for a, b in aligned_blocks(instance.gpus)
        for s in range(steps)
        for e in range(s + 1, steps + 1)
        if all((g, t) in free for g in range(a, a + b) for t in range(s, e))
    }


def inside(w: tuple[int, int, int, int], v: tuple[int, int, int, int]) -> bool:
    return v[0] <= w[0] and w[0] + w[1] <= v[0] + v[1] and v[2] <= w[2] and w[3] <= v[3]


def steps_of(row: Any) -> tuple[int, int]:
    return (row.start - START) // HOUR, (row.end - START) // HOUR


@given(plan=random_plans(), min_gpus=st.integers(1, 5), min_hours=st.integers(1, 3))
def test_idle_windows_are_exactly_the_maximal_free_aligned_windows_of_the_asked_size(
    plan: tuple[Instance, Grid], min_gpus: int, min_hours: int
) -> None:
    instance, grid = plan
    report = idle_windows(instance, grid, START, min_gpus=min_gpus, min_hours=min_hours)
    listed = [(w.first_gpu, w.gpus, *steps_of(w)) for w in report.rows]
    windows = free_windows(instance, grid)
    maximal = {w for w in windows if not any(v != w and inside(w, v) for v in windows)}
    for a, b, s, e in listed:
        assert a % b == 0 and b & (b - 1) == 0  # aligned power-of-two block
        assert (a, b, s, e) in windows  # free
        assert (a, b, s, e) in maximal  # maximal
        assert b >= min_gpus and e - s >= min_hours
    asked = [w for w in windows if w[1] >= min_gpus and w[3] - w[2] >= min_hours]
    assert all(any(inside(w, v) for v in listed) for w in asked)  # nothing of the asked size is missing
    assert set(listed) == {w for w in maximal if w in asked} and len(listed) == len(set(listed))
    assert listed == sorted(listed, key=lambda w: (w[2], w[0], -w[1], w[3]))
    covered = {(g, t) for a, b, s, e in listed for g in range(a, a + b) for t in range(s, e)}
    free = free_cells(instance, grid)
    assert report.free_gpu_hours == len(free)
    assert report.unlisted_gpu_hours == len(free - covered)


@given(plan=random_plans(), size_exponent=st.integers(0, 3), hours=st.integers(1, 10))
def test_bookable_starts_are_each_blocks_earliest_fit(
    plan: tuple[Instance, Grid], size_exponent: int, hours: int
) -> None:
    instance, grid = plan
    gpus = 1 << size_exponent
    if gpus > instance.gpus:
        return
    free = free_cells(instance, grid)
    steps = instance.horizon_steps
    expected = []
    for a, b in aligned_blocks(instance.gpus):
        if b != gpus:
            continue
        fits = [
            s
            for s in range(steps)
            if all((g, t) in free for g in range(a, a + b) for t in range(s, min(s + hours, steps)))
        ]
        if fits:
            expected.append((fits[0], a))
    rows = bookable_starts(instance, grid, START, gpus=gpus, hours=hours)
    assert [((r.start - START) // HOUR, r.first_gpu) for r in rows] == sorted(expected)
    for r in rows:
        assert r.end - r.start == hours * HOUR and r.gpus == gpus
        assert r.unplanned_hours == max(0, (r.end - START) // HOUR - steps)
    assert len(bookable_starts(instance, grid, START, gpus=gpus, hours=hours, limit=1)) == min(1, len(rows))


@given(plan=random_plans(), min_gpus=st.integers(1, 4))
def test_every_idle_window_is_bookable_at_its_start(plan: tuple[Instance, Grid], min_gpus: int) -> None:
    """Consistency between the two reports: a listed window's block fits a job of its length."""
    instance, grid = plan
    for w in idle_windows(instance, grid, START, min_gpus=min_gpus).rows:
        hours = math.ceil(w.hours)
        starts = {
            (r.first_gpu, r.start) for r in bookable_starts(instance, grid, START, gpus=w.gpus, hours=hours)
        }
        assert any(first == w.first_gpu and start <= w.start for first, start in starts)


def test_gpus_an_app_holds_above_its_need_are_bookable_no_later_than_a_submit_gets_them() -> None:
    from scheduler.model import SolveOptions
    from scheduler.policies import PolicyName, plan

    # An empty queue and an app whose need falls through the day: the plan keeps its idle
    # GPUs (nothing takes them), and a job submitted onto them gets them.
    app = {"id": "chat", "kind": "realtime", "priority": 50, "swap_cap": 2}
    demand = [8, 8, 6, 4, 2, 2, 2, 2, 2, 2, 2, 2]
    doc: dict[str, Any] = {"name": "trough", "gpus": 8, "horizon": 12, "jobs": [{**app, "demand": demand}]}
    options = SolveOptions(wall_clock=False)
    empty = plan(parse_scenario(doc), PolicyName.FAST, options)
    held = [sum(row[t] == "chat" for row in empty.grid) for t in range(12)]
    assert any(h > d for h, d in zip(held, demand, strict=True)), held  # idle GPUs held
    for gpus, hours in [(4, 4), (2, 6), (4, 8)]:
        (earliest,) = bookable_starts(parse_scenario(doc), empty.grid, START, gpus=gpus, hours=hours, limit=1)
        job = {"id": "bi", "kind": "batch_inference", "priority": 10, "gpus": gpus, "duration": hours}
        submitted = plan(parse_scenario({**doc, "jobs": [*doc["jobs"], job]}), PolicyName.FAST, options)
        start = min(t for row in submitted.grid for t, cell in enumerate(row) if cell == "bi")
        assert earliest.start <= at(start), (gpus, hours, earliest.start, start)
        # and it is free indeed: the app keeps its need at every step of the submitted plan
        served = [sum(row[t] == "chat" for row in submitted.grid) for t in range(12)]
        assert all(s >= d for s, d in zip(served, demand, strict=True)), served
