"""What the dashboard screenshots and the API load benchmark share: a large cluster's config,
a queue of batch jobs, and the system's headless Chromium signed in to the dashboard."""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from contract.records import Cluster, DownWindowRecord, Job, JobEstimate
from contract.scenario import JobKind
from gpuplan.app.core.config import AppTraffic, ServiceConfig
from storage.store import Store

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def large_config(
    demo: ServiceConfig, gpus: int = 256, down: tuple[DownWindowRecord, ...] = ()
) -> ServiceConfig:
    """``gpus`` GPUs and four apps (the demo's two, twice, each eight times larger), no demo queue."""
    apps = tuple(replace(app, id=f"{app.id}-{copy}") for copy in (0, 1) for app in demo.apps)
    traffic = tuple(
        AppTraffic(f"{t.app}-{copy}", t.path, (t.peak_gpus or 4) * 8) for copy in (0, 1) for t in demo.traffic
    )
    return replace(demo, cluster=Cluster(gpus=gpus, down=down), apps=apps, traffic=traffic, demo_queue=False)


def queue_jobs(store: Store, count: int, at: datetime, *, prefix: str = "bench") -> None:
    """``count`` batch-inference jobs of 1-16 GPUs and 1-23 hours, priorities 10-99, queued at ``at``."""
    for n in range(count):
        gpus = (1, 2, 4, 8, 16)[n % 5]
        hours = 1.0 + (n * 7) % 23
        store.add_job(
            Job(
                id=f"{prefix}-{n}",
                kind=JobKind.BATCH_INFERENCE,
                priority=float(10 + (n * 13) % 90),
                spec={"id": f"{prefix}-{n}", "kind": "batch_inference", "gpus": gpus, "hours": hours},
                submitted_at=at,
                estimate=JobEstimate(gpus, hours, hours),
            )
        )


def launch_chromium(playwright: Any) -> Any:
    """The system's Chromium (Debian's package), headless; Playwright downloads no browser."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def sign_in(page: Any, base_url: str, token: str) -> None:
    """Open the dashboard, be sent to the sign-in page, sign in with ``token``, land on the grid."""
    page.goto(f"{base_url}/")
    page.fill("#token", token)
    page.click("#signin")
    page.wait_for_selector("#health")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values``, the nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency_row(name: str, ms: list[float]) -> list[object]:
    """One table row: calls, median, p99 and max milliseconds."""
    return [name, len(ms), f"{statistics.median(ms):.1f}", f"{percentile(ms, 0.99):.1f}", f"{max(ms):.1f}"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_daemon(
    db: str, models: Path, port: int, log_path: Path, *, verbose: bool = False
) -> subprocess.Popen[bytes]:
    """``gpuplan daemon --http PORT`` in a process of its own, its output into ``log_path``."""
    command = [sys.executable, "-m", "gpuplan", *(["-v"] if verbose else []), "daemon"]
    command += ["--db", db, "--models", str(models), "--http", str(port)]
    with log_path.open("wb") as log_file:
        return subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)


def wait_for_cycle(
    base_url: str, daemon: subprocess.Popen[bytes], log_path: Path, timeout_s: float = 120
) -> dict[str, Any]:
    """``/healthz`` once the daemon's first cycle has succeeded; RuntimeError if it dies or times out."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            health: dict[str, Any] = httpx.get(f"{base_url}/healthz").json()
            if health.get("last_success_at"):
                return health
        except httpx.TransportError:
            pass
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not come up:\n{log_path.read_text()}")
        time.sleep(0.2)
