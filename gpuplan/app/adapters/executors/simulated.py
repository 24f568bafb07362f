"""The simulated cluster: the in-memory cluster that ``gpuplan simulate`` and the demo daemon run on.

It is an executor: it starts each job a commit or an amendment places (once: a job already
started keeps running) and knows when the job will really end, ``actual(job).hours`` after its start,
whatever its forecast said. Whoever drives the clock asks it which jobs have ended by
now (:meth:`SimulatedCluster.ended`) and reports them done. Real-time apps' GPUs and
jobs it knows nothing of are kept in the commits and never end.

With ``inner``, each commit is first delivered there (the demo daemon's feed), and the
cluster takes the inner executor's name, so the outbox keeps one delivery per commit.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from contract.records import Amendment, Assignment, Commit, Outcome
from gpuplan.app.adapters.executors.memory import InMemoryExecutor
from gpuplan.app.core.ports import Executor


@dataclass(frozen=True, slots=True)
class ActualRun:
    """How a job really runs once started: for ``hours``, then it ends with ``outcome``.

    It starts no earlier than ``not_before`` (its submission): an hour committed late, after
    the job came in, starts it when it came in, as the store counts it (``jobs.finish``).
    ``hours_at``: on a cluster of several pools, its hours on a block from that first GPU (its
    pool's model's); None: ``hours`` wherever it starts."""

    hours: float
    outcome: Outcome = Outcome.OK
    not_before: datetime | None = None
    hours_at: Callable[[int], float] | None = None


class SimulatedCluster(InMemoryExecutor):
    """Starts each committed job and tells, for a time, which jobs have ended by then."""

    def __init__(self, actual: Callable[[str], ActualRun | None], inner: Executor | None = None) -> None:
        super().__init__()
        self.actual = actual
        self.inner = inner
        self.name = "simulated" if inner is None else inner.name
        self.target = (
            "the simulated cluster" if inner is None else f"{inner.target} and the simulated cluster"
        )
        self.started: dict[str, datetime] = {}
        self.gpus: dict[str, int] = {}
        self.first_gpus: dict[str, int] = {}
        self._ends: list[tuple[datetime, str, Outcome]] = []

    def deliver(self, commit: Commit) -> bool:
        if self.inner is not None and not self.inner.deliver(commit):
            return False
        self._start_new(commit.key, commit.assignments, commit.hour)
        return super().deliver(commit)

    def amend(self, amendment: Amendment) -> bool:
        """The batch jobs an amendment places start at its ``made_at``, within the hour."""
        if self.inner is not None and not self.inner.amend(amendment):
            return False
        self._start_new(amendment.key, amendment.assignments, amendment.made_at)
        return super().amend(amendment)

    def _start_new(self, key: str, assignments: Sequence[Assignment], at: datetime) -> None:
        """Start what a commit or amendment not seen before places (one seen before: nothing)."""
        if key not in self._keys:
            for assignment in assignments:
                self.start(assignment.job, at, len(assignment.gpus), min(assignment.gpus, default=0))

    def stop(self, job: str, at: datetime) -> None:
        """A cancelled job: passed on to ``inner``; its end, when it comes, finds it done already."""
        if self.inner is not None:
            self.inner.stop(job, at)
        super().stop(job, at)

    def start(self, job_id: str, at: datetime, gpus: int, first_gpu: int = 0) -> bool:
        """Start ``job_id`` at ``at`` on ``gpus`` GPUs from ``first_gpu`` unless it runs already;
        False when the cluster knows nothing of it (a real-time app)."""
        if job_id in self.started:
            return True
        run = self.actual(job_id)
        if run is None:
            return False
        if run.not_before is not None:
            at = max(at, run.not_before)
        self.started[job_id] = at
        self.gpus[job_id] = gpus
        self.first_gpus[job_id] = first_gpu
        hours = run.hours if run.hours_at is None else run.hours_at(first_gpu)
        heapq.heappush(self._ends, (at + timedelta(hours=hours), job_id, run.outcome))
        return True

    def next_end(self) -> datetime | None:
        """When the next started job ends (None: none is running)."""
        return self._ends[0][0] if self._ends else None

    def pop_end(self) -> tuple[datetime, str, Outcome]:
        """The next end: when, which job, how."""
        return heapq.heappop(self._ends)

    def ended(self, now: datetime) -> list[tuple[datetime, str, Outcome]]:
        """Every end at or before ``now``, in time order, each reported once."""
        ends = []
        while self._ends and self._ends[0][0] <= now:
            ends.append(heapq.heappop(self._ends))
        return ends
