"""The faces on a cluster of pools: the reports (idle windows, bookable starts, coverage risk),
``gpuplan status``, the API and the dashboard show each pool, and a one-pool cluster's
outputs are today's."""

from __future__ import annotations

import csv
import io
import json
import random
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml

from contract.errors import InputError
from contract.records import Job, JobEstimate, PlanRun, RunMode
from contract.scenario import Instance, JobKind, Pool
from gpuplan.app.core.config import ServiceConfig, demo_config, load_config
from gpuplan.app.jobs.submit import answer
from gpuplan.app.views.dashboard import grid_rows
from gpuplan.app.views.reports import (
    IdleWindow,
    ShortfallReason,
    bookable_starts,
    coverage_risk,
    free_masks,
    idle_windows,
)
from gpuplan.http.server import HttpServer
from gpuplan.table import row_columns
from scheduler.lns import MIN_BUDGET_MS
from storage.factory import open_store
from tests.http_fixtures import T0, Served, served
from tests.service_fixtures import _in_tmp_path, models_dir, run_cli

__all__ = ["_in_tmp_path", "models_dir"]

START = datetime(2026, 11, 30, 10, tzinfo=UTC)
POOLS = [{"name": "h100", "gpu_model": "h100", "gpus": 8}, {"name": "a100", "gpu_model": "a100", "gpus": 8}]


def _instance(gpus: int, pools: list[tuple[str, int]], horizon: int = 6) -> Instance:
    return Instance(
        "pools",
        gpus,
        horizon_steps=horizon,
        pools=tuple(Pool(name, name, size) for name, size in pools),
    )


# ---------------------------------------------------------------------------------------
# The reports, pure


def test_an_idle_window_lies_inside_one_pool_and_never_straddles_two() -> None:
    empty: list[list[str | None]] = [[None] * 6 for _ in range(8)]
    one = idle_windows(_instance(8, []), empty, START)
    assert [(w.first_gpu, w.gpus, w.pool) for w in one.rows] == [(0, 8, None)]
    # Pools of 6 and 2: a block lies inside one, aligned from its first GPU; [4, 8) straddles.
    two = idle_windows(_instance(8, [("h100", 6), ("a100", 2)]), empty, START)
    assert [(w.first_gpu, w.gpus, w.pool) for w in two.rows] == [
        (0, 4, "h100"),
        (4, 2, "h100"),
        (6, 2, "a100"),
    ]
    assert two.free_gpu_hours == one.free_gpu_hours == 48 and two.unlisted_gpu_hours == 0
    assert "pool" not in row_columns(IdleWindow, one.rows) and "pool" in row_columns(IdleWindow, two.rows)


def test_idle_windows_over_random_pools_are_maximal_in_pool_blocks_that_cover_every_free_cell() -> None:
    rng = random.Random(48)
    for _ in range(60):
        sizes = [rng.randint(1, 8) for _ in range(rng.randint(2, 3))]
        instance = _instance(sum(sizes), [(f"p{i}", n) for i, n in enumerate(sizes)])
        grid = [[rng.choice(["job", None, None]) for _ in range(6)] for _ in range(instance.gpus)]
        report = idle_windows(instance, grid, START)
        free = free_masks(instance, grid)
        covered = [0] * 6
        for w in report.rows:
            pool = instance.pools_by_name[str(w.pool)]
            assert pool.holds(w.first_gpu, w.gpus), (sizes, w)
            s, e = (int((t - START) / timedelta(hours=1)) for t in (w.start, w.end))
            for t in range(s, e):
                block = ((1 << w.gpus) - 1) << w.first_gpu
                assert free[t] & block == block, (sizes, w)  # free at every step of the window
                covered[t] |= block
        assert covered == free, sizes  # every free cell lies in a listed window (min 1 GPU, 1 h)
        assert report.unlisted_gpu_hours == 0


def test_a_pool_filter_keeps_that_pools_windows_and_bookable_blocks_and_names_a_bad_pool() -> None:
    instance = _instance(8, [("h100", 4), ("a100", 4)])
    grid: list[list[str | None]] = [["job"] * 6 if gpu < 2 else [None] * 6 for gpu in range(8)]
    a100 = idle_windows(instance, grid, START, pool="a100")
    assert [(w.first_gpu, w.gpus, w.pool) for w in a100.rows] == [(4, 4, "a100")]
    assert a100.free_gpu_hours == 24 and a100.pool == "a100"
    booked = bookable_starts(instance, grid, START, 2, 3)
    assert [(b.first_gpu, b.pool) for b in booked] == [(2, "h100"), (4, "a100"), (6, "a100")]
    assert [b.first_gpu for b in bookable_starts(instance, grid, START, 2, 3, pool="h100")] == [2]
    with pytest.raises(InputError) as wide:
        bookable_starts(instance, grid, START, 8, 1)
    assert str(wide.value) == (
        "`gpus` must be a power of two (1, 2, 4, ...) up to 4, the GPUs of the largest pool h100; got 8."
    )
    with pytest.raises(InputError) as bad:
        idle_windows(instance, grid, START, pool="l40s")
    assert str(bad.value) == "`pool` must be one of the plan's pools ['h100', 'a100']; got 'l40s'."
    with pytest.raises(InputError) as single:
        idle_windows(_instance(8, []), grid, START, pool="a100")
    assert str(single.value) == "`pool` must be absent: the plan is over one pool; got 'a100'."


def _run(scenario: dict, grid: list[list[str | None]]) -> PlanRun:
    return PlanRun(START, START, RunMode.PLAN, "fast", "", 0.0, None, 0.0, "FEASIBLE", scenario, grid, {})


def test_coverage_risk_counts_an_app_against_its_own_pool() -> None:
    chat = {"id": "chat", "kind": "realtime", "priority": 80, "swap_cap": 2, "demand": [3, 3]}
    grid: list[list[str | None]] = [[None, None]] * 4 + [["chat", "chat"]] * 2
    scenario = {"name": "cov", "gpus": 6, "horizon": 2, "jobs": [chat]}
    pooled = {
        **scenario,
        "pools": [{"name": "h100", "gpus": 4}, {"name": "a100", "gpus": 2}],
        "jobs": [{**chat, "pool": "a100"}],
    }
    # On one pool of 6 the GPUs were there: the planner gave them elsewhere.
    one = coverage_risk(_run(scenario, grid), [])
    assert [(r.reason, r.pool) for r in one.rows] == [(ShortfallReason.UNKNOWN, None)] * 2
    # The app serves on a100, which has 2 GPUs: its own pool is too small.
    two = coverage_risk(_run(pooled, grid), [])
    assert [(r.reason, r.pool, r.shortfall_gpus) for r in two.rows] == [
        (ShortfallReason.CAPACITY, "a100", 1)
    ] * 2
    assert coverage_risk(_run(pooled, grid), [], pool="h100").rows == ()


def test_coverage_risk_weighs_an_app_of_several_pools_on_the_pool_the_plan_serves_it_on() -> None:
    """Needing 1 H100 or 3 A100s, served on the 2 A100s: short by 1 there, not served on H100s."""
    chat = {
        "id": "chat", "kind": "realtime", "priority": 80, "swap_cap": 2,
        "demand_by_pool": {"h100": [1, 1], "a100": [3, 3]},
    }  # fmt: skip
    grid: list[list[str | None]] = [[None, None]] * 4 + [["chat", "chat"]] * 2
    pooled = {
        "name": "cov",
        "horizon": 2,
        "pools": [{"name": "h100", "gpus": 4}, {"name": "a100", "gpus": 2}],
    }
    report = coverage_risk(_run({**pooled, "jobs": [chat]}, grid), [])
    assert [(r.reason, r.pool, r.shortfall_gpus) for r in report.rows] == [
        (ShortfallReason.CAPACITY, "a100", 1)
    ] * 2
    assert coverage_risk(_run({**pooled, "jobs": [chat]}, grid), [], pool="h100").rows == ()


def test_the_dashboards_grid_is_one_band_per_pool_its_nodes_counted_from_the_pools_first_gpu() -> None:
    times = [START + timedelta(hours=h) for h in range(2)]
    pools = (Pool("h100", "h100", 36), Pool("a100", "a100", 44, 36))
    grid: list[list[str | None]] = [["job", None] if g in (35, 36) else [None, None] for g in range(80)]
    rows, aggregated = grid_rows(grid, [0, 0], times, set(), set(), pools=pools)
    assert aggregated and [r.label for r in rows][4:6] == [
        "h100 node 4 (GPUs 32-35)",
        "a100 node 0 (GPUs 36-43)",
    ]
    assert [r.cells[0].text for r in rows][4:6] == ["1/4", "1/8"]  # no node holds GPUs of two pools
    assert [(r.pool, r.pool_heading) for r in rows if r.pool_heading] == [
        ("h100", "pool h100: h100, 36 GPUs (0-35)"),
        ("a100", "pool a100: a100, 44 GPUs (36-79)"),
    ]
    small, _ = grid_rows(
        grid[:16], [0, 0], times, set(), set(), pools=(Pool("a", "a", 12), Pool("b", "b", 4, 12))
    )
    assert [(r.label, r.block_start) for r in small][11:13] == [("GPU 11", False), ("GPU 12", True)]
    one, _ = grid_rows(grid[:16], [0, 0], times, set(), set(), pools=(Pool("a", "a", 16),))
    assert all(r.pool is None and r.pool_heading is None for r in one)


# ---------------------------------------------------------------------------------------
# A served cluster of two pools


def _pooled_config(tmp_path: Path, models: Path) -> Path:
    traffic = str(demo_config().traffic[0].path)
    app = {"id": "chat", "peak_gpus": 3, "traffic": traffic, "swap_cap": 2, "priority": 90, "pool": "a100"}
    path = tmp_path / "config.yaml"
    document = {
        "cluster": {"pools": POOLS},
        "apps": [app],
        "demo_queue": True,
        "models_dir": str(models),
        "plan_budget_ms": MIN_BUDGET_MS,
        "plan_wall_clock": False,
        "review_every_hours": None,
    }
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture
def pooled(tmp_path: Path, models_dir: Path) -> Iterator[tuple[httpx.Client, Served, Path, str]]:
    config_path = _pooled_config(tmp_path, models_dir)
    config: ServiceConfig = load_config(config_path)
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    with served(db, models_dir, config=config) as service:
        server = HttpServer(service.context, "127.0.0.1", 0).start()
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{server.bound_port}", timeout=60) as client:
                yield client, service, config_path, db
        finally:
            server.stop()


def _pool_of(gpu: int) -> str:
    return "h100" if gpu < 8 else "a100"


def _check_status(document: dict) -> None:
    """Each pool's counts add up, and each row's pool is the pool of its GPUs (or plan)."""
    pools = document["pools"]
    assert [(p["pool"], p["gpu_model"], p["gpus"], p["first_gpu"]) for p in pools] == [
        ("h100", "h100", 8, 0),
        ("a100", "a100", 8, 8),
    ]
    for pool in pools:
        assert pool["batch"] + pool["realtime"] + pool["down"] + pool["free"] == pool["gpus"]
        inside = range(pool["first_gpu"], pool["first_gpu"] + pool["gpus"])
        for kind in ("batch", "realtime"):
            held = [
                g
                for r in document["running"]
                if (r["kind"] == "realtime") == (kind == "realtime")
                for g in r["gpus"]
            ]
            assert pool[kind] == sum(g in inside for g in held)
    assert document["running"], "the demo queue runs work after the first cycle"
    for row in document["running"]:
        assert {_pool_of(g) for g in row["gpus"]} == {row["pool"]}, row
    assert any(row["job"] == "chat" and row["pool"] == "a100" for row in document["running"])
    for row in document["queue"]:
        assert row["pool"] in {"h100", "a100", None}
        assert (row["pool"] is None) == (row["planned_start"] is None), row


def test_the_api_shows_each_pool_in_status_a_submits_pool_and_the_reports_per_pool(
    pooled: tuple[httpx.Client, Served, Path, str],
) -> None:
    client, service, _, _ = pooled
    status = client.get("/v1/status", headers=service.auth("reader"))
    assert status.status_code == 200
    _check_status(status.json())

    spec = {"id": "pooled-1", "kind": "batch_inference", "priority": 40, "gpus": 2, "hours": 2}
    made = client.post("/v1/jobs", json=spec, headers=service.auth("ml"))
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["first_gpu"] is not None and body["pool"] == _pool_of(body["first_gpu"])
    queued = client.get("/v1/status", headers=service.auth("reader")).json()["queue"]
    assert [row["pool"] for row in queued if row["job"] == "pooled-1"] == [body["pool"]]

    windows = client.get("/v1/reports/idle-windows", headers=service.auth("reader")).json()
    assert windows and {w["pool"] for w in windows} <= {"h100", "a100"}
    for w in windows:
        assert {_pool_of(g) for g in range(w["first_gpu"], w["first_gpu"] + w["gpus"])} == {w["pool"]}
    a100 = client.get("/v1/reports/idle-windows?pool=a100", headers=service.auth("reader")).json()
    assert a100 == [w for w in windows if w["pool"] == "a100"]
    booked = client.get(
        "/v1/reports/idle-windows?gpus=8&hours=1&pool=h100&format=csv", headers=service.auth("reader")
    )
    assert booked.status_code == 200
    rows = list(csv.DictReader(io.StringIO(booked.text)))
    assert all(r["pool"] == "h100" and r["first_gpu"] == "0" for r in rows)
    risk = client.get("/v1/reports/coverage-risk?pool=a100", headers=service.auth("reader"))
    assert risk.status_code == 200 and all(r["pool"] == "a100" for r in risk.json())

    for route in ("idle-windows", "coverage-risk"):
        bad = client.get(f"/v1/reports/{route}?pool=l40s", headers=service.auth("reader"))
        assert bad.status_code == 422, bad.text
        assert bad.json()["errors"] == [
            {"field": "pool", "expected": "one of the plan's pools ['h100', 'a100']", "received": "l40s"}
        ]
    schema = client.get("/v1/openapi.json").json()["components"]["schemas"]["SubmitOut"]["properties"]
    assert "pool" in schema


def test_an_unplanned_submit_answers_a_null_pool_on_pools_and_no_pool_on_one() -> None:
    job = Job("j", JobKind.TRAINING, 10.0, {}, START, estimate=JobEstimate(2, 1.0, 2.0))
    pools = (Pool("h100", "h100", 8), Pool("a100", "a100", 8, 8))
    assert answer(None, job, pools=pools).as_dict()["pool"] is None
    assert "pool" not in answer(None, job, pools=pools[:1]).as_dict()


def test_the_command_line_shows_the_pools_in_status_and_the_reports(
    pooled: tuple[httpx.Client, Served, Path, str], tmp_path: Path
) -> None:
    _, _, config, db = pooled
    at = (T0 + timedelta(minutes=1)).isoformat()
    shown = run_cli("status", "--db", db, "--config", config, "--at", at, "--json")
    assert shown.code == 0, shown.err
    _check_status(json.loads(shown.out))
    text = run_cli("status", "--db", db, "--config", config, "--at", at)
    assert text.code == 0 and "pools:\n" in text.out, text.err
    header = text.out.split("pools:\n", 1)[1].splitlines()[0].split()
    assert header == ["pool", "gpu_model", "gpus", "batch", "realtime", "down", "free"]
    assert text.out.split("running:\n", 1)[1].splitlines()[0].split()[:4] == ["job", "kind", "pool", "gpus"]
    # Without the config, the status is a one-pool cluster's.
    plain = run_cli("status", "--db", db, "--at", at, "--json")
    assert "pools" not in json.loads(plain.out) and all(
        "pool" not in r for r in json.loads(plain.out)["running"]
    )

    report = run_cli("report", "idle-windows", "--db", db, "--pool", "a100", "--csv")
    assert report.code == 0, report.err
    rows = list(csv.DictReader(io.StringIO(report.out)))
    assert rows and {r["pool"] for r in rows} == {"a100"}
    table = run_cli("report", "idle-windows", "--db", db, "--png", tmp_path / "idle.png")
    assert table.code == 0 and "in pools h100 (h100, 8 GPUs), a100 (a100, 8 GPUs)" in table.out
    assert (tmp_path / "idle.png").stat().st_size > 10_000
    risk = run_cli("report", "coverage-risk", "--db", db, "--pool", "a100", "--png", tmp_path / "risk.png")
    assert risk.code == 0, risk.err
    assert (tmp_path / "risk.png").stat().st_size > 10_000
    for argv in (("idle-windows",), ("coverage-risk",)):
        bad = run_cli("report", *argv, "--db", db, "--pool", "l40s")
        assert bad.code == 2 and len(bad.err.strip().splitlines()) == 1, bad.err
        assert "`--pool` must be one of the plan's pools ['h100', 'a100']; got 'l40s'" in bad.err


# ---------------------------------------------------------------------------------------
# A one-pool cluster's faces are today's


def test_a_one_pool_cluster_shows_no_pool_anywhere(tmp_path: Path, models_dir: Path) -> None:
    from tests.service_fixtures import quick_config

    one = replace(quick_config(models_dir), pools=(Pool("h100", "h100", 16),))
    with served(f"sqlite:///{tmp_path / 'one.db'}", models_dir, config=one) as service:
        server = HttpServer(service.context, "127.0.0.1", 0).start()
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{server.bound_port}", timeout=60) as client:
                status = client.get("/v1/status", headers=service.auth("reader")).json()
                assert list(status) == ["at", "running", "queue", "last_run", "leader", "gpu_map"]
                assert all("pool" not in row for row in status["running"] + status["queue"])
                spec = {"id": "one-1", "kind": "batch_inference", "priority": 40, "gpus": 2, "hours": 2}
                made = client.post("/v1/jobs", json=spec, headers=service.auth("ml")).json()
                assert list(made) == [
                    "job",
                    "gpus",
                    "hours_p50",
                    "hours_p90",
                    "planned_start",
                    "promised_start",
                    "first_gpu",
                    "reason",
                ]
                windows = client.get("/v1/reports/idle-windows", headers=service.auth("reader")).json()
                assert windows and all("pool" not in w for w in windows)
        finally:
            server.stop()


@pytest.mark.browser
def test_the_dashboard_in_chromium_shows_one_grid_band_per_pool_and_each_rows_pool(
    pooled: tuple[httpx.Client, Served, Path, str], tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    from benchmarks.served import launch_chromium, sign_in

    client, service, _, _ = pooled
    base = str(client.base_url).rstrip("/")
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            sign_in(page, base, service.tokens["ml"])
            headings = page.locator("#grid tbody tr.pool")
            assert headings.all_inner_texts() == [
                "pool h100: h100, 8 GPUs (0-7)",
                "pool a100: a100, 8 GPUs (8-15)",
            ]
            # Each band holds its pool's GPU rows, in order, under its heading.
            bands = page.eval_on_selector_all(
                "#grid tbody tr",
                "rows => rows.map(r => [r.classList.contains('pool'), r.dataset.pool, r.querySelector('th').innerText])",
            )
            assert bands == [
                [True, "h100", "pool h100: h100, 8 GPUs (0-7)"],
                *[[False, "h100", f"GPU {g}"] for g in range(8)],
                [True, "a100", "pool a100: a100, 8 GPUs (8-15)"],
                *[[False, "a100", f"GPU {g}"] for g in range(8, 16)],
            ]
            shown = page.eval_on_selector_all(
                "#pools tbody tr",
                "rows => rows.map(r => [r.dataset.pool, +r.querySelector('td.free').innerText])",
            )
            api = client.get("/v1/status", headers=service.auth("reader")).json()
            assert shown == [[p["pool"], p["free"]] for p in api["pools"]]
            running = page.eval_on_selector_all(
                "#running tbody tr[data-job]",
                "rows => rows.map(r => [r.dataset.job, r.querySelector('td.pool').innerText])",
            )
            assert running == [[r["job"], r["pool"]] for r in api["running"]]
            idle = page.eval_on_selector_all(
                "#idle tbody tr[data-start]", "rows => rows.map(r => [+r.dataset.firstGpu, r.dataset.pool])"
            )
            windows = client.get("/v1/reports/idle-windows", headers=service.auth("reader")).json()
            assert idle == [[w["first_gpu"], w["pool"]] for w in windows] and idle
            page.screenshot(path=str(tmp_path / "pools.png"), full_page=True)
        finally:
            browser.close()


# ---------------------------------------------------------------------------------------
# One pool's status, a job's pool, and the bad submits on pools


def test_the_status_of_one_pool_and_each_jobs_pool(pooled: tuple[httpx.Client, Served, Path, str]) -> None:
    """``?pool=a100`` (``--pool a100``) keeps that pool's count and the rows on its GPUs or planned
    there; ``GET /v1/jobs/{id}`` names a job's pool; a pool the config lacks is one line."""
    client, service, config, db = pooled
    spec = {"id": "pooled-2", "kind": "batch_inference", "priority": 40, "gpus": 2, "hours": 2}
    made = client.post("/v1/jobs", json=spec, headers=service.auth("ml"))
    assert made.status_code == 201, made.text
    whole = client.get("/v1/status", headers=service.auth("reader")).json()
    for name in ("h100", "a100"):
        one = client.get(f"/v1/status?pool={name}", headers=service.auth("reader"))
        assert one.status_code == 200, one.text
        document = one.json()
        assert [p["pool"] for p in document["pools"]] == [name]
        assert document["running"] == [r for r in whole["running"] if r["pool"] == name]
        assert document["queue"] == [r for r in whole["queue"] if r["pool"] == name]
    assert any(
        r["job"] == "chat"
        for r in client.get("/v1/status?pool=a100", headers=service.auth("reader")).json()["running"]
    )
    bad = client.get("/v1/status?pool=l40s", headers=service.auth("reader"))
    assert bad.status_code == 422, bad.text
    assert bad.json()["errors"] == [
        {"field": "pool", "expected": "one of the cluster's pools ['h100', 'a100']", "received": "l40s"}
    ]

    job = client.get("/v1/jobs/pooled-2", headers=service.auth("reader")).json()
    assert job["state"] == "queued" and job["pool"] == made.json()["pool"]
    running = [r for r in whole["running"] if r["kind"] != "realtime"]
    assert running
    for row in running:
        shown = client.get(f"/v1/jobs/{row['job']}", headers=service.auth("reader")).json()
        assert shown["pool"] == row["pool"] == _pool_of(shown["gpus"][0])
    listed = client.get("/v1/jobs", headers=service.auth("reader")).json()
    assert listed and all(r["pool"] in {"h100", "a100", None} for r in listed)

    at = (T0 + timedelta(minutes=1)).isoformat()
    shown_cli = run_cli("status", "--db", db, "--config", config, "--at", at, "--pool", "a100", "--json")
    assert shown_cli.code == 0, shown_cli.err
    document = json.loads(shown_cli.out)
    assert [p["pool"] for p in document["pools"]] == ["a100"]
    assert {r["pool"] for r in document["running"] + document["queue"]} <= {"a100"}
    refused = run_cli("status", "--db", db, "--config", config, "--at", at, "--pool", "l40s")
    assert refused.code == 2 and len(refused.err.strip().splitlines()) == 1, refused.err
    assert "`--pool` must be one of the cluster's pools ['h100', 'a100']; got 'l40s'" in refused.err
    alone = run_cli("status", "--db", db, "--at", at, "--pool", "a100")
    assert alone.code == 2 and "`--pool` must be absent: the cluster is one pool" in alone.err


#: (the spec's changes, the one line) of a submit a cluster of pools refuses.
BAD_SUBMITS = {
    "a list naming no pool": (
        {"gpu_models": ["l40s"]},
        "`gpu_models` must be a list naming a GPU model of the cluster's pools",
    ),
    "a model gpuplan does not know": (
        {"gpu_models": ["mi300x"]},
        "`gpu_models[0]` must be a GPU model gpuplan knows: one of [",
    ),
    "too big for every pool": ({"gpus": 16}, "`gpus` must be at most 8, the GPUs of the largest pool"),
    "too big for its pools": (
        {"gpus": 16, "gpu_models": ["a100"]},
        "`gpus` must be at most 8, the GPUs of the largest pool of its gpu_models (a100)",
    ),
}


def test_a_bad_submit_on_pools_is_one_line_and_nothing_is_stored(
    pooled: tuple[httpx.Client, Served, Path, str], tmp_path: Path
) -> None:
    client, service, config, db = pooled
    at = (T0 + timedelta(minutes=2)).isoformat()
    for case, (change, message) in BAD_SUBMITS.items():
        spec = {"kind": "batch_inference", "priority": 40, "gpus": 2, "hours": 2, **change}
        refused = client.post("/v1/jobs", json={**spec, "id": "bad-api"}, headers=service.auth("ml"))
        assert refused.status_code == 422, (case, refused.text)
        assert message in refused.json()["message"] and "\n" not in refused.json()["message"], case
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump({**spec, "id": "bad-cli"}))
        ran = run_cli("submit", path, "--config", config, "--db", db, "--at", at)
        assert ran.code == 2 and len(ran.err.strip().splitlines()) == 1 and message in ran.err, (
            case,
            ran.err,
        )
        assert service.store.job("bad-api") is None and service.store.job("bad-cli") is None, case


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        ([POOLS[0], {**POOLS[1], "gpus": 0}], "`cluster.pools[1].gpus` must be an integer >= 1; got 0"),
        (
            [POOLS[0], {**POOLS[1], "name": "h100"}],
            "`cluster.pools[1].name` must be a name used by no other pool; got 'h100'",
        ),
    ],
    ids=["a pool of 0 GPUs", "two pools of one name"],
)
def test_a_submit_or_a_daemon_on_bad_pools_is_one_line_and_nothing_is_stored(
    tmp_path: Path, pools: list[dict], message: str
) -> None:
    config = tmp_path / "bad-pools.yaml"
    config.write_text(yaml.safe_dump({"cluster": {"pools": pools}, "apps": []}))
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    spec = tmp_path / "job.yaml"
    spec.write_text(
        yaml.safe_dump({"id": "j", "kind": "batch_inference", "priority": 4, "gpus": 2, "hours": 1})
    )
    for argv in (
        ("submit", spec, "--config", config, "--db", db),
        ("daemon", "--once", "--config", config, "--db", db),
    ):
        ran = run_cli(*argv)
        assert ran.code == 2 and len(ran.err.strip().splitlines()) == 1 and message in ran.err, ran.err
    assert not (tmp_path / "gpuplan.db").exists() or open_store(db).job("j") is None


def test_utilization_and_commits_per_pool(pooled: tuple[httpx.Client, Served, Path, str]) -> None:
    """One utilization row per committed hour and pool, adding up to the cluster's; each
    commit row names the pool of its GPUs; ``pool`` keeps one; a pool the config lacks is one line."""
    client, service, config, db = pooled
    reader = service.auth("reader")
    whole = run_cli("report", "utilization", "--db", db, "--json")
    assert whole.code == 0, whole.err
    cluster_rows = json.loads(whole.out)
    assert cluster_rows and all("pool" not in row for row in cluster_rows)
    rows = client.get("/v1/reports/utilization", headers=reader).json()
    assert [row["pool"] for row in rows] == ["h100", "a100"] * len(cluster_rows)
    columns = ("training", "batch_inference", "quantization", "realtime", "other", "idle", "down")
    for hour, (h100, a100) in zip(cluster_rows, zip(rows[::2], rows[1::2], strict=True), strict=True):
        assert h100["hour"] == a100["hour"] == hour["hour"]
        assert all(h100[c] + a100[c] == hour[c] for c in columns)
        assert sum(h100[c] for c in columns) == 8 == sum(a100[c] for c in columns)
    assert any(row["realtime"] for row in rows if row["pool"] == "a100")  # chat serves on the A100s
    assert not any(row["realtime"] for row in rows if row["pool"] == "h100")
    one = run_cli("report", "utilization", "--db", db, "--config", config, "--pool", "a100", "--json")
    assert one.code == 0, one.err
    assert json.loads(one.out) == [row for row in rows if row["pool"] == "a100"]

    commits = client.get("/v1/reports/commits", headers=reader).json()
    assert commits and all(row["pool"] == _pool_of(row["gpus"][0]) for row in commits)
    a100 = client.get("/v1/reports/commits?pool=a100", headers=reader).json()
    assert a100 == [row for row in commits if row["pool"] == "a100"]
    shown = run_cli("report", "commits", "--db", db, "--config", config, "--pool", "h100", "--json")
    assert shown.code == 0 and json.loads(shown.out) == [row for row in commits if row["pool"] == "h100"]

    for route in ("utilization", "commits"):
        bad = client.get(f"/v1/reports/{route}?pool=l40s", headers=reader)
        assert bad.status_code == 422, bad.text
        assert bad.json()["errors"][0]["field"] == "pool"
        refused = run_cli("report", route, "--db", db, "--config", config, "--pool", "l40s")
        assert refused.code == 2 and len(refused.err.strip().splitlines()) == 1, refused.err
        assert "`--pool` must be one of the cluster's pools ['h100', 'a100']; got 'l40s'" in refused.err
