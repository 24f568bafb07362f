"""Screenshots of the dashboard at 16 and 256 GPUs, in the system's headless Chromium.

    python -m benchmarks.dashboard_screenshots [--models models] [--out docs]

Each cluster is a fresh SQLite database served by the daemon's own HTTP face: the demo
(16 GPUs, its seeded queue, GPU 13 down) and 256 GPUs with four apps and 100 queued jobs
(GPUs 40-43 down). Four 30-minute cycles run first, so that there is running work,
commits and utilization. Writes ``dashboard-16.png`` and ``dashboard-256.png`` and prints
what each page shows, read from its DOM.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import daemon
from benchmarks.served import large_config, launch_chromium, queue_jobs, sign_in
from contract.records import Cluster, DownWindowRecord
from gpuplan.app.core.config import ServiceConfig, demo_config
from gpuplan.app.core.tokens import create_token, parse_scopes
from gpuplan.app.lab.seed import ensure_models, ensure_service
from gpuplan.app.service import make_service, run_once
from storage.factory import open_store

T0 = datetime(2026, 11, 30, 8, 5, tzinfo=UTC)
CYCLE = timedelta(minutes=30)
CYCLES = 4


def shoot(config: ServiceConfig, db: str, out: Path, *, jobs: int) -> dict[str, object]:
    from playwright.sync_api import sync_playwright

    now = T0 + (CYCLES - 1) * CYCLE
    store = open_store(db)
    try:
        ensure_service(store, config, T0)
        queue_jobs(store, jobs, T0)
        service = make_service(store, config)
        service.clock = lambda: now
        for n in range(CYCLES):
            run_once(service, T0 + n * CYCLE)
            service.health.record(T0 + n * CYCLE, None)
        secret = create_token(store, "ml", parse_scopes("read,submit"), None, now).secret
        server = daemon.http_server(service, "127.0.0.1", 0).start()
        try:
            with sync_playwright() as playwright:
                browser = launch_chromium(playwright)
                try:
                    page = browser.new_page(viewport={"width": 1600, "height": 1000})
                    sign_in(page, f"http://127.0.0.1:{server.bound_port}", secret)
                    page.screenshot(path=str(out), full_page=True)
                    return {
                        "grid rows": page.locator("#grid tbody tr").count(),
                        "aggregated": page.get_attribute("#grid", "data-aggregated"),
                        "down cells": page.locator("#grid td.down").count(),
                        "cells with down GPUs": page.locator("#grid td.partdown").count(),
                        "running cells": page.locator("#grid td.run").count(),
                        "planned cells": page.locator("#grid td.plan").count(),
                        "real-time cells": page.locator("#grid td.rt").count(),
                        "idle windows": page.locator("#idle tbody tr[data-start]").count(),
                        "queue": page.locator("#queue tbody tr[data-job]").count(),
                        "commits": page.locator("#commits tbody tr").count(),
                        "page height px": page.evaluate("document.body.scrollHeight"),
                    }
                finally:
                    browser.close()
        finally:
            server.stop()
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=Path("models"))
    parser.add_argument("--out", type=Path, default=Path("docs"))
    args = parser.parse_args(argv)
    demo = replace(demo_config(args.models), commits_file=None)
    ensure_models(demo)
    small = replace(demo, cluster=Cluster(gpus=16, down=(DownWindowRecord(gpu=13, start=T0),)))
    large = large_config(demo, down=tuple(DownWindowRecord(gpu=g, start=T0) for g in range(40, 44)))
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        for name, config, jobs in (("16", small, 0), ("256", large, 100)):
            path = args.out / f"dashboard-{name}.png"
            shown = shoot(config, f"sqlite:///{folder}/{name}.db", path, jobs=jobs)
            sys.stdout.write(f"{path}: " + ", ".join(f"{k} {v}" for k, v in shown.items()) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
