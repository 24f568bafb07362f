"""A throwaway Prometheus server for the tests, from Debian's ``prometheus`` package (2.42).

``PromServer.start(root, series)`` writes hourly series as OpenMetrics, backfills them into a
fresh TSDB with ``promtool tsdb create-blocks-from openmetrics``, and starts ``prometheus`` on
that folder, on a free loopback port, with a config that scrapes nothing. ``stop()`` ends it
by its PID.

Each series is the counter ``vllm:request_success_total{model_name=NAME}``, the metric a vLLM
server exports and the issue's example query reads, rather than a gauge of hourly counts: a
counter is what a serving exporter publishes, so the test runs the PromQL an operator writes,
``sum(increase(...[1h]))``. It is sampled every 15 minutes, as a scrape would, rising
linearly through each hour. Evaluated at an hour's end, ``increase(...[1h])`` then gives that
hour's requests exactly: Prometheus 2.x's range selector holds both ends of the window, so its
first and last samples span the whole hour and nothing is extrapolated. A series' missing hours
are an exporter that was down: no sample strictly between the start of the first missing hour
and the end of the last, so that no window ending in the gap holds two samples, while the
hours either side keep both their ends.

The TSDB's time retention counts back from its newest block, not from the wall clock, so
``RETENTION`` only has to span the series (two weeks), however old their timestamps are.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.pg import free_port

METRIC = "vllm:request_success_total"
MISSING = (
    "Prometheus is missing (no `prometheus` or `promtool` on the PATH). The traffic-source tests "
    "run against a real server: run `make test`, which installs Debian's `prometheus` package "
    "(or `apt-get install -y prometheus` yourself)."
)
RETENTION = "30d"
SAMPLES_PER_HOUR = 4
HOUR = timedelta(hours=1)
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Series:
    """Hourly requests from ``first`` on; the hours ``down`` (a run of two or more) have no point."""

    first: datetime
    requests: Sequence[float]
    down: Sequence[datetime] = ()

    def samples(self) -> list[tuple[float, float]]:
        """(unix time, counter value): every 15 minutes, through the end of the last hour."""
        step = HOUR / SAMPLES_PER_HOUR
        total, out = 0.0, []
        for index, count in enumerate(self.requests):
            hour = self.first + index * HOUR
            for quarter in range(SAMPLES_PER_HOUR):
                out.append(((hour + quarter * step).timestamp(), total + count * quarter / SAMPLES_PER_HOUR))
            total += count
        out.append(((self.first + len(self.requests) * HOUR).timestamp(), total))
        if not self.down:
            return out
        low, high = min(self.down).timestamp(), (max(self.down) + HOUR).timestamp()
        return [(t, value) for t, value in out if not low < t < high]


def openmetrics(series: Mapping[str, Series]) -> str:
    """One counter family; a series per ``model_name``."""
    family = METRIC.removesuffix("_total")
    lines = [f"# HELP {family} Requests served.", f"# TYPE {family} counter"]
    for name, one in series.items():
        lines += [f'{METRIC}{{model_name="{name}"}} {value!r} {t:.0f}' for t, value in one.samples()]
    return "\n".join([*lines, "# EOF", ""])


class PromServer:
    """One running server on ``url``, its TSDB backfilled with the given series."""

    def __init__(self, root: Path, process: subprocess.Popen[bytes], port: int) -> None:
        self.root = root
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    @classmethod
    def start(cls, root: Path, series: Mapping[str, Series]) -> PromServer:
        prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
        if prometheus is None or promtool is None:
            pytest.fail(MISSING, pytrace=False)
        data = root / "data"
        source = root / "series.om"
        source.write_text(openmetrics(series))
        backfill = subprocess.run(
            [
                promtool,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "--quiet",
                "--max-block-duration=2160h",
                str(source),
                str(data),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if backfill.returncode != 0:
            pytest.fail(f"promtool could not backfill: {backfill.stdout}{backfill.stderr}", pytrace=False)
        config = root / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
        last_log = ""
        for _ in range(5):  # another process may take the free port before the server binds it
            port = free_port()
            log = root / f"prometheus-{port}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [
                        prometheus,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={data}",
                        f"--storage.tsdb.retention.time={RETENTION}",
                        f"--web.listen-address=127.0.0.1:{port}",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            server = cls(root, process, port)
            if server._wait_ready():
                return server
            server.stop()
            last_log = log.read_text()
        pytest.fail(f"Prometheus did not start:\n{last_log}", pytrace=False)

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        """SIGTERM to the server's PID, SIGKILL if it has not exited within 30 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
