"""The daemon's Prometheus metrics server: loopback by default, and it serves the metrics."""

from __future__ import annotations

import socket
import urllib.request

from gpuplan.app.adapters.metrics import Metrics


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_metrics_server_binds_loopback_by_default_and_serves_the_cycle_metrics() -> None:
    port = _free_port()
    metrics = Metrics(port)
    try:
        assert metrics.server.server_address[0] == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            body = answer.read().decode()
        assert "gpuplan_cycle_latency_seconds" in body
    finally:
        metrics.close()
