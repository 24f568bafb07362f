"""The seam to the cluster: gpuplan decides, an executor starts and stops the work.

Every commit goes through the outbox (:mod:`gpuplan.app.cycle.outbox`): stored with its delivery
pending, then handed to the executor, again and again (at start-up and every cycle) until
the executor acknowledges it. So an executor may see one commit more than once, and must
be idempotent: it keys what it has done by the commit's :attr:`~contract.records.Commit.key`
(its hour and ``seq``), and a commit it already holds changes nothing. Each amendment of an
hour (additions only: more GPUs for a real-time app, a batch job started within the hour)
goes through the outbox the same way, after the hour's commit, keyed alike (``seq`` 1, 2,
...). An executor also gets a stop when a running job is cancelled. The executors sit side
by side in ``gpuplan/app/adapters/executors/`` (``memory``, ``jsonl``, ``simulated``,
``slurm``) and the config picks one by name through the registry there (``registry.py``).

An executor that runs a real cluster manager is also a :class:`Reconciler`: the cluster
talks back. Before each plan it makes the store agree with the cluster (what is down,
what finished, what runs where), and every ``poll_seconds`` between plans it collects
completions. Its actions are idempotent, so a commit handed to it twice (a daemon
restarted after its commit, a poll after a cycle) does nothing the second time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from contract.records import Amendment, Commit, Outcome

if TYPE_CHECKING:
    from gpuplan.app.core.slurm_settings import BatchSection
    from storage.store import Store


class Executor(Protocol):
    @property
    def name(self) -> str:
        """The executor's name in the registry; the outbox keeps each delivery under it."""

    @property
    def target(self) -> str:
        """Where its commits go, for the daemon's start-up line (a file, "memory", a cluster)."""

    def deliver(self, commit: Commit) -> bool:
        """Make the cluster run ``commit``'s assignments for its hour; True once it is done.

        Idempotent by ``commit.key``: a commit delivered before is acknowledged again and
        changes nothing. False (or an exception) leaves the delivery pending, to be re-sent.
        """
        ...

    def amend(self, amendment: Amendment) -> bool:
        """Add ``amendment``'s assignments to its hour's, from ``made_at`` on (nothing else
        changes); True once it is done. Idempotent by ``amendment.key``, as :meth:`deliver`."""
        ...

    def stop(self, job: str, at: datetime) -> None:
        """Stop a running job now (it was cancelled); its GPUs free at the next commit."""


class HeldQueue(Protocol):
    """A cluster that takes a job at its submission, held until a commit releases it (Slurm:
    ``sbatch --hold``, for a spec with a ``slurm:`` section)."""

    def hold(self, job_id: str, section: BatchSection) -> int:
        """Submit job ``job_id`` held, to run what ``section`` says; returns its id in the cluster."""
        ...

    def withdraw(self, cluster_id: int) -> None:
        """Cancel a job :meth:`hold` submitted (its submission was not stored)."""


class Verdict(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One of ``gpuplan doctor``'s lines: ``ok``, ``warn`` (it runs, but an operator should look)
    or ``fail`` (the daemon would not do its work), and why."""

    name: str
    verdict: Verdict
    why: str

    def line(self) -> str:
        return f"{self.verdict.value:<4} {self.name}: {' '.join(self.why.split())}"  # one line a check


class Checkable(Protocol):
    """A cluster that can be asked, writing nothing, whether the daemon could run it."""

    def checks(self, now: datetime) -> Iterator[Check]:
        """Its :class:`Check` lines, in the order an operator fixes them."""
        ...


@runtime_checkable
class Reconciler(Protocol):
    """An executor whose cluster reports back: its truth wins over the store's."""

    @property
    def poll_seconds(self) -> float:
        """How often :meth:`poll` runs between plans."""

    @property
    def replicas_running(self) -> Mapping[str, int]:
        """Running real-time replicas per app, as last seen."""

    def reconcile(self, store: Store, now: datetime) -> Observed:
        """Before a plan: the cluster's truth into the store, the current commit enacted again;
        returns the jobs the cluster has ended, for :mod:`gpuplan.app.cycle.reconcile` to finish,
        and the held jobs that ask to be planned, for :mod:`gpuplan.app.jobs.adopt` to submit."""

    def poll(self, store: Store, now: datetime) -> list[Finished]:
        """Between plans: the jobs the cluster has ended (finished by the same use case)."""

    def adopted(self, cluster_id: int, job_id: str) -> None:
        """The held cluster job ``cluster_id`` is gpuplan's job ``job_id`` now."""

    def refused(self, cluster_id: int) -> None:
        """The held cluster job's spec was refused: it is not offered for adoption again."""


@dataclass(frozen=True)
class Finished:
    """A job the cluster has ended, as observed: it ends at ``at`` with ``outcome``.

    ``started_at``: its real start, if the cluster reports one; ``cluster_id``: its id in the
    cluster, for the log; ``reported``: the cluster's end state, or None when the job vanished
    with no completion (then a job that cannot be finished fails the cycle; otherwise it is
    logged and skipped).
    """

    job_id: str
    at: datetime
    outcome: Outcome
    started_at: datetime | None = None
    cluster_id: int | None = None
    reported: str | None = None


@dataclass(frozen=True)
class Adoptable:
    """A job waiting held in the cluster whose submitter asks gpuplan to plan it: its id in
    the cluster and its spec as written (Slurm: ``--comment 'gpuplan:{...spec...}'``)."""

    cluster_id: int
    spec: Mapping[str, object]


@dataclass(frozen=True)
class Observed:
    """What a reconciler saw before a plan: the jobs the cluster ended, the held jobs to adopt."""

    finished: list[Finished]
    adoptable: list[Adoptable]


def commit_lines(commit: Commit) -> list[dict[str, object]]:
    """One row per job of a commit, as ``report commits --json`` prints it."""
    hour = commit.hour.isoformat()
    return [{"hour": hour, "job": a.job, "gpus": list(a.gpus)} for a in commit.assignments]


def amendment_lines(amendment: Amendment) -> list[dict[str, object]]:
    """One row per job of an amendment: the commit's row with its number and time."""
    hour, at = amendment.hour.isoformat(), amendment.made_at.isoformat()
    return [
        {"hour": hour, "job": a.job, "gpus": list(a.gpus), "amendment": amendment.seq, "at": at}
        for a in amendment.assignments
    ]
