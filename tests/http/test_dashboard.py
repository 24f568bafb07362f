"""The dashboard: its grid rows at 16 and 256 GPUs, sign-in, cookies and CSRF, and, in the
system's headless Chromium, the page a person uses (grid, idle windows, submit, cancel)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from benchmarks.served import launch_chromium, sign_in
from contract.records import JobState
from gpuplan.app.views.dashboard import MAX_GPU_ROWS, NODE_GPUS, grid_rows
from gpuplan.http.server import HttpServer
from tests.http_fixtures import T0, Served, served
from tests.service_fixtures import _in_tmp_path, models_dir

__all__ = ["_in_tmp_path", "models_dir"]

HOUR = timedelta(hours=1)
TIMES = [datetime(2026, 11, 30, h, tzinfo=UTC) for h in range(4)]


def test_up_to_the_limit_the_grid_has_one_row_per_gpu_with_running_planned_real_time_and_down_apart() -> None:
    grid = [["a", "a", None, None], ["b", "chat", "chat", None], [None, None, None, None]]
    rows, aggregated = grid_rows(grid, [0b100, 0, 0, 0], TIMES, running={"a"}, realtime={"chat"})
    assert not aggregated and [r.label for r in rows] == ["GPU 0", "GPU 1", "GPU 2"]
    assert [c.css for c in rows[0].cells] == ["run", "run", "idle", "idle"]
    assert [c.css for c in rows[1].cells] == ["plan", "rt", "rt", "idle"]
    assert rows[2].cells[0].css == "down" and rows[2].cells[1].css == "idle"
    assert "00:00" in rows[0].cells[0].title


def test_beyond_the_limit_rows_aggregate_by_node_with_busy_counts_and_down_marks() -> None:
    gpus = 256
    assert gpus > MAX_GPU_ROWS
    grid: list[list[str | None]] = [["job" if g < 12 else None] * 4 for g in range(gpus)]
    down = [1 << 20 | 1 << 21] * 4
    rows, aggregated = grid_rows(grid, down, TIMES, running=set(), realtime=set())
    assert aggregated and len(rows) == gpus // NODE_GPUS
    assert rows[0].label == "node 0 (GPUs 0-7)" and rows[0].cells[0].text == "8/8"
    assert rows[1].cells[0].text == "4/8" and rows[1].cells[0].share == 0.5
    assert rows[2].cells[0].down == 2 and "↓2" in rows[2].cells[0].text
    assert sum(r.cells[0].share * NODE_GPUS for r in rows) == 12


def _signin_csrf(client: httpx.Client) -> str:
    """The CSRF token of a fresh sign-in page (its cookie is kept by the client)."""
    page = client.get("/signin")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None and client.cookies.get("gpuplan_signin") == found.group(1)
    return found.group(1)


@pytest.fixture
def site(tmp_path: Path, models_dir: Path) -> Iterator[tuple[str, Served]]:
    with served(f"sqlite:///{tmp_path / 'gpuplan.db'}", models_dir) as service:
        server = HttpServer(service.context, "127.0.0.1", 0).start()
        try:
            yield f"http://127.0.0.1:{server.bound_port}", service
        finally:
            server.stop()


def test_sign_in_sets_an_httponly_samesite_strict_cookie_and_forms_need_the_csrf_token(
    site: tuple[str, Served],
) -> None:
    base, service = site
    with httpx.Client(base_url=base) as client:
        assert client.get("/").status_code == 303
        # the sign-in form needs the CSRF token its page set (a page elsewhere cannot sign one in)
        assert client.post("/signin", data={"token": service.tokens["ml"]}).status_code == 403
        csrf = _signin_csrf(client)
        assert (
            client.post("/signin", data={"token": service.tokens["ml"], "csrf": "forged"}).status_code == 403
        )
        assert (
            client.post("/signin", data={"token": "wrong", "csrf": _signin_csrf(client)}).status_code == 401
        )
        csrf = _signin_csrf(client)
        answer = client.post("/signin", data={"token": service.tokens["ml"], "csrf": csrf})
        assert answer.status_code == 303
        cookie = answer.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert service.tokens["ml"] not in answer.headers["set-cookie"]
        page = client.get("/")
        assert page.status_code == 200 and 'id="grid"' in page.text
        forged = client.post(
            "/jobs", data={"csrf": "forged", "spec": "kind: batch_inference\ngpus: 1\nhours: 1"}
        )
        assert forged.status_code == 403
        assert [j for j in service.store.jobs() if j.team == "ml"] == []
    with httpx.Client(base_url=base) as stranger:  # no cookie: no form goes through
        assert stranger.post("/jobs", data={"csrf": "x", "spec": "kind: training"}).status_code == 401


def test_revoking_the_token_ends_its_dashboard_session(site: tuple[str, Served]) -> None:
    base, service = site
    with httpx.Client(base_url=base) as client:
        client.post("/signin", data={"token": service.tokens["reader"], "csrf": _signin_csrf(client)})
        assert client.get("/").status_code == 200
        service.store.revoke_token(service.token_ids["reader"], T0)
        assert client.get("/").status_code == 303


@pytest.mark.browser
def test_the_dashboard_in_chromium_grid_idle_windows_submit_and_cancel(
    site: tuple[str, Served], tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    base, service = site
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            sign_in(page, base, service.tokens["ml"])
            cookies = {c["name"]: c for c in context.cookies()}
            assert (
                cookies["gpuplan_session"]["httpOnly"] and cookies["gpuplan_session"]["sameSite"] == "Strict"
            )

            # One row per GPU, and the idle windows are the API's.
            gpus = len(service.store.run().grid)  # type: ignore[union-attr]
            assert page.locator("#grid tbody tr").count() == gpus == 16
            shown = page.eval_on_selector_all(
                "#idle tbody tr[data-start]",
                "rows => rows.map(r => [r.dataset.start, r.dataset.end, +r.dataset.firstGpu, +r.dataset.gpus])",
            )
            api = httpx.get(f"{base}/v1/reports/idle-windows", headers=service.auth("reader")).json()
            assert shown == [[w["start"], w["end"], w["first_gpu"], w["gpus"]] for w in api]
            assert shown, "the demo's plan leaves idle windows"

            # Submit through the form; after the next cycle the page reloads with it in the queue.
            page.fill("#spec", "id: web-1\nkind: batch_inference\ngpus: 1\nhours: 1\npriority: 40\n")
            page.click("#submit")
            page.wait_for_selector("#message")
            assert "queued web-1" in page.inner_text("#message")
            job = service.store.job("web-1")
            assert job is not None and job.team == "ml"
            page.fill("#spec", "")
            service.cycle(T0 + timedelta(minutes=30))
            page.wait_for_function("() => !document.getElementById('message')", timeout=15_000)  # reloaded
            row = page.locator('#queue tr[data-job="web-1"]')
            assert row.count() == 1
            assert row.locator("td.start").inner_text() != "-"
            # The reasons read as lines of text, not one word a line (16rem at 13px is 208 px).
            widths = page.eval_on_selector_all(
                "#queue td.reason", "cells => cells.map(c => c.getBoundingClientRect().width)"
            )
            assert widths and min(widths) >= 200, widths
            # After the cycle's commit the plan starts at the next hour; the grid shows this one first.
            assert page.locator("#grid thead th.now").inner_text().endswith("now")
            page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
            assert (tmp_path / "dashboard.png").stat().st_size > 10_000

            # Another team's job has no cancel button; the team's own has one, and it works.
            others = page.locator('#queue tr[data-job^="demo-"] button')
            assert others.count() == 0
            row.locator("button").click()
            page.wait_for_selector("#message")
            assert "cancelled web-1" in page.inner_text("#message")
            assert service.store.job("web-1").state is JobState.DONE  # type: ignore[union-attr]
            assert page.locator('#queue tr[data-job="web-1"]').count() == 0
        finally:
            browser.close()
