"""Prometheus metrics of the plan cycle, served on a port of the head node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from contract.records import JobState
from storage.store import Store

if TYPE_CHECKING:
    from gpuplan.app.cycle.tick import CycleReport


@dataclass(frozen=True)
class ServiceState:
    """The gauges an operator reads beside the cycle's: jobs by state, deliveries pending,
    Slurm commands failed so far, each app's forecast age."""

    jobs: Mapping[str, int]
    deliveries_pending: int
    slurm_failed: int
    forecast_age_s: Mapping[str, float]


def service_state(
    store: Store, now: datetime, *, executor: str, slurm_failed: int, apps: Sequence[str]
) -> ServiceState:
    """:class:`ServiceState` read from ``store`` at ``now``: the deliveries pending to the
    executor named ``executor``, ``slurm_failed`` as counted by its Slurm client (0: none)."""
    jobs = {state.value: len(store.jobs([state])) for state in (JobState.QUEUED, JobState.RUNNING)}
    ages = {}
    for app in apps:
        through = store.profile_through(app)
        if through is not None:  # the hour it names ended an hour after its start
            ages[app] = max(0.0, (now - through).total_seconds() - 3600)
    return ServiceState(jobs, len(store.pending_deliveries(executor)), slurm_failed, ages)


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
        self.jobs = Gauge(
            "gpuplan_jobs", "Batch jobs by state (queued, running)", ["state"], registry=self.registry
        )
        self.pending = Gauge(
            "gpuplan_deliveries_pending",
            "Commits and amendments the executor has not acknowledged",
            registry=self.registry,
        )
        self.slurm_failed = Counter(
            "gpuplan_slurm_commands_failed", "Slurm commands that failed", registry=self.registry
        )
        self.forecast_age = Gauge(
            "gpuplan_forecast_age_seconds",
            "Per app, how long ago the last traffic hour its demand profile has seen ended",
            ["app"],
            registry=self.registry,
        )
        self._slurm_failed_seen = 0
        self.server, self.thread = start_http_server(port, addr=addr, registry=self.registry)

    def observe(self, report: CycleReport, now: datetime, replicas: Mapping[str, int] | None = None) -> None:
        self.observe_replicas(replicas or {})
        self.latency.observe(report.latency_ms / 1000)
        self.last_success.set(now.timestamp())
        self.utilization.set(report.utilization)
        self.coverage.set(report.rt_coverage)
        self.queue.set(report.queue_length)

    def observe_state(self, state: ServiceState) -> None:
        """What the store and the executor hold between cycles (:func:`service_state`)."""
        for name, count in state.jobs.items():
            self.jobs.labels(state=name).set(count)
        self.pending.set(state.deliveries_pending)
        if state.slurm_failed > self._slurm_failed_seen:
            self.slurm_failed.inc(state.slurm_failed - self._slurm_failed_seen)
            self._slurm_failed_seen = state.slurm_failed
        for app, age in state.forecast_age_s.items():
            self.forecast_age.labels(app=app).set(age)

    def observe_replicas(self, replicas: Mapping[str, int]) -> None:
        for app, count in replicas.items():
            self.replicas.labels(app=app).set(count)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
