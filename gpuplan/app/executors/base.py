"""The seam to the cluster: gpuplan decides, an executor starts and stops the work.

An executor gets each hour's commit once, after it is stored. The executors sit side by
side in this package (``memory``, ``jsonl``) and the config picks one by name through
the registry in ``gpuplan/app/executors/__init__.py``.
"""

from __future__ import annotations

from typing import Protocol

from contract.records import Commit


class Executor(Protocol):
    def execute(self, commit: Commit) -> None:
        """Make the cluster run ``commit``'s assignments for its hour."""


def commit_lines(commit: Commit) -> list[dict[str, object]]:
    """One row per job of a commit, as ``report commits --json`` prints it."""
    hour = commit.hour.isoformat()
    return [{"hour": hour, "job": a.job, "gpus": list(a.gpus)} for a in commit.assignments]
