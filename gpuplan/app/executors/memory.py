"""The in-memory executor: keeps the commits and amendments, for tests and the simulation."""

from __future__ import annotations

from contract.records import Amendment, Commit


class InMemoryExecutor:
    """Keeps every commit and every amendment it is given, in order."""

    def __init__(self) -> None:
        self.commits: list[Commit] = []
        self.amendments: list[Amendment] = []

    def execute(self, commit: Commit) -> None:
        self.commits.append(commit)

    def amend(self, amendment: Amendment) -> None:
        self.amendments.append(amendment)
