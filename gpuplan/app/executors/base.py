"""The seam to the cluster: gpuplan decides, an executor starts and stops the work.

Every commit goes through the outbox (:mod:`gpuplan.app.outbox`): stored with its delivery
pending, then handed to the executor, again and again (at start-up and every cycle) until
the executor acknowledges it. So an executor may see one commit more than once, and must
be idempotent: it keys what it has done by the commit's :attr:`~contract.records.Commit.key`
(its hour and ``seq``), and a commit it already holds changes nothing. An executor also
gets a stop when a running job is cancelled. The executors sit side by side in this
package (``memory``, ``jsonl``, ``simulated``) and the config picks one by name through
the registry in ``gpuplan/app/executors/__init__.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from contract.records import Commit


class Executor(Protocol):
    #: The executor's name in the registry; the outbox keeps each commit's delivery under it.
    name: str
    #: Where its commits go, for the daemon's start-up line (a file, "memory", a cluster).
    target: str

    def deliver(self, commit: Commit) -> bool:
        """Make the cluster run ``commit``'s assignments for its hour; True once it is done.

        Idempotent by ``commit.key``: a commit delivered before is acknowledged again and
        changes nothing. False (or an exception) leaves the delivery pending, to be re-sent.
        """
        ...

    def stop(self, job: str, at: datetime) -> None:
        """Stop a running job now (it was cancelled); its GPUs free at the next commit."""


def commit_lines(commit: Commit) -> list[dict[str, object]]:
    """One row per job of a commit, as ``report commits --json`` prints it."""
    hour = commit.hour.isoformat()
    return [{"hour": hour, "job": a.job, "gpus": list(a.gpus)} for a in commit.assignments]
