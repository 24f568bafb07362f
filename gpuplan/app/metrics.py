"""Prometheus metrics of the plan cycle, served on a port of the head node."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from gpuplan.app.tick import CycleReport


class Metrics:
    """Prometheus metrics of the plan cycle, served on ``port``."""

    def __init__(self, port: int, addr: str = "127.0.0.1") -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "gpuplan_cycle_latency_seconds",
            "Wall time of one plan cycle",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
            registry=self.registry,
        )
        self.last_success = Gauge(
            "gpuplan_last_success_timestamp_seconds",
            "Unix time of the last successful cycle",
            registry=self.registry,
        )
        self.utilization = Gauge(
            "gpuplan_planned_utilization", "Utilization of the last plan", registry=self.registry
        )
        self.coverage = Gauge(
            "gpuplan_rt_coverage", "Real-time coverage of the last plan", registry=self.registry
        )
        self.queue = Gauge("gpuplan_queue_length", "Queued batch jobs", registry=self.registry)
        self.failures = Counter("gpuplan_cycle_failures", "Plan cycles that failed", registry=self.registry)
        self.replicas = Gauge(
            "gpuplan_replicas",
            "Running real-time replicas per app (executors that run them)",
            ["app"],
            registry=self.registry,
        )
        self.server, self.thread = start_http_server(port, addr=addr, registry=self.registry)

    def observe(self, report: CycleReport, now: datetime, replicas: Mapping[str, int] | None = None) -> None:
        self.observe_replicas(replicas or {})
        self.latency.observe(report.latency_ms / 1000)
        self.last_success.set(now.timestamp())
        self.utilization.set(report.utilization)
        self.coverage.set(report.rt_coverage)
        self.queue.set(report.queue_length)

    def observe_replicas(self, replicas: Mapping[str, int]) -> None:
        for app, count in replicas.items():
            self.replicas.labels(app=app).set(count)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
