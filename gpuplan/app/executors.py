"""The seam to the cluster: gpuplan decides, an executor starts and stops the work.

An executor gets each hour's commit once, after it is stored, and a stop when a running
job is cancelled. The JSON-lines executor appends one line per job and hour
(``{"hour", "job", "gpus"}``, and ``{"at", "job", "stop": true}`` for a stop) to a file
that other tools can follow (``tail -F``); the in-memory one keeps the commits and stops
for tests and the simulation.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Protocol

from storage.records import Commit


class Executor(Protocol):
    def execute(self, commit: Commit) -> None:
        """Make the cluster run ``commit``'s assignments for its hour."""

    def stop(self, job: str, at: datetime) -> None:
        """Stop a running job now (it was cancelled); its GPUs free at the next commit."""


def commit_lines(commit: Commit) -> list[dict[str, object]]:
    """One row per job of a commit, as ``report commits --json`` prints it."""
    hour = commit.hour.isoformat()
    return [{"hour": hour, "job": a.job, "gpus": list(a.gpus)} for a in commit.assignments]


class InMemoryExecutor:
    def __init__(self) -> None:
        self.commits: list[Commit] = []
        self.stopped: list[tuple[str, datetime]] = []

    def execute(self, commit: Commit) -> None:
        self.commits.append(commit)

    def stop(self, job: str, at: datetime) -> None:
        self.stopped.append((job, at))


class JsonLinesExecutor:
    """Appends each commit to ``path``, one JSON object per job, flushed and synced."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def execute(self, commit: Commit) -> None:
        self._append("".join(json.dumps(line) + "\n" for line in commit_lines(commit)))

    def stop(self, job: str, at: datetime) -> None:
        self._append(json.dumps({"at": at.isoformat(), "job": job, "stop": True}) + "\n")

    def _append(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One write of whole lines in append mode: a follower never sees half a commit.
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
