"""The in-memory executor: keeps the commits, for tests and the simulation."""

from __future__ import annotations

from contract.records import Commit


class InMemoryExecutor:
    """Keeps every commit it is given, in order."""

    def __init__(self) -> None:
        self.commits: list[Commit] = []

    def execute(self, commit: Commit) -> None:
        self.commits.append(commit)
