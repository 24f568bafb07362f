"""The seam to the cluster: gpuplan decides, an executor starts and stops the work.

An executor gets each hour's commit once, after it is stored. The JSON-lines executor
appends one line per job and hour (``{"hour", "job", "gpus"}``) to a file that other
tools can follow (``tail -F``); the in-memory one keeps the commits for tests and the
simulation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from contract.records import Commit


class Executor(Protocol):
    def execute(self, commit: Commit) -> None:
        """Make the cluster run ``commit``'s assignments for its hour."""


def commit_lines(commit: Commit) -> list[dict[str, object]]:
    """One row per job of a commit, as ``report commits --json`` prints it."""
    hour = commit.hour.isoformat()
    return [{"hour": hour, "job": a.job, "gpus": list(a.gpus)} for a in commit.assignments]


class InMemoryExecutor:
    def __init__(self) -> None:
        self.commits: list[Commit] = []

    def execute(self, commit: Commit) -> None:
        self.commits.append(commit)


class JsonLinesExecutor:
    """Appends each commit to ``path``, one JSON object per job, flushed and synced."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def execute(self, commit: Commit) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(line) + "\n" for line in commit_lines(commit))
        # One write of whole lines in append mode: a follower never sees half a commit.
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
