"""The in-memory executor: keeps the commits, for tests and the simulation."""

from __future__ import annotations

from contract.records import Commit


class InMemoryExecutor:
    """Keeps every commit it is given, once each, in order."""

    name = "memory"
    target = "memory (nothing outlives the process)"

    def __init__(self) -> None:
        self.commits: list[Commit] = []
        self._keys: set[str] = set()

    def deliver(self, commit: Commit) -> bool:
        if commit.key not in self._keys:
            self._keys.add(commit.key)
            self.commits.append(commit)
        return True
