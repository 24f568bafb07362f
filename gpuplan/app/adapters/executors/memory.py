"""The in-memory executor: keeps the commits, amendments and stops, for tests and the simulation."""

from __future__ import annotations

from datetime import datetime

from contract.records import Amendment, Commit


class InMemoryExecutor:
    """Keeps every commit, every amendment (once each) and every stop it is given, in order."""

    name = "memory"
    target = "memory (nothing outlives the process)"

    def __init__(self) -> None:
        self.commits: list[Commit] = []
        self.amendments: list[Amendment] = []
        self.stopped: list[tuple[str, datetime]] = []
        self._keys: set[str] = set()

    def deliver(self, commit: Commit) -> bool:
        if commit.key not in self._keys:
            self._keys.add(commit.key)
            self.commits.append(commit)
        return True

    def amend(self, amendment: Amendment) -> bool:
        if amendment.key not in self._keys:
            self._keys.add(amendment.key)
            self.amendments.append(amendment)
        return True

    def stop(self, job: str, at: datetime) -> None:
        self.stopped.append((job, at))
