"""The in-memory executor: keeps the commits and the stops, for tests and the simulation."""

from __future__ import annotations

from datetime import datetime

from contract.records import Commit


class InMemoryExecutor:
    """Keeps every commit and every stop it is given, in order."""

    def __init__(self) -> None:
        self.commits: list[Commit] = []
        self.stopped: list[tuple[str, datetime]] = []

    def execute(self, commit: Commit) -> None:
        self.commits.append(commit)

    def stop(self, job: str, at: datetime) -> None:
        self.stopped.append((job, at))
