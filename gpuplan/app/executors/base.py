"""The seam to the cluster: gpuplan decides, an executor starts and stops the work.

An executor gets each hour's commit once, after it is stored, each amendment of that
hour (additions only: more GPUs for a real-time app, a batch job started within the hour)
once, after it is stored, and a stop when a running job is cancelled. The executors sit side by
side in this package (``memory``, ``jsonl``) and the config picks one by name through
the registry in ``gpuplan/app/executors/__init__.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from contract.records import Amendment, Commit


class Executor(Protocol):
    def execute(self, commit: Commit) -> None:
        """Make the cluster run ``commit``'s assignments for its hour."""

    def amend(self, amendment: Amendment) -> None:
        """Add ``amendment``'s assignments to its hour's, from ``made_at`` on (nothing else changes)."""

    def stop(self, job: str, at: datetime) -> None:
        """Stop a running job now (it was cancelled); its GPUs free at the next commit."""


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
