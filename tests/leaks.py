"""What the fixtures' leak checks look at, beside PostgreSQL's ``pg_stat_activity``."""

from __future__ import annotations

from pathlib import Path


def open_files(path: Path) -> list[str]:
    """Files this process holds open among ``path`` and its SQLite companions (-wal, -shm, -journal)."""
    names = {str(path), *(f"{path}{suffix}" for suffix in ("-wal", "-shm", "-journal"))}
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue  # closed while we looked
        if target in names:
            found.append(target)
    return found
