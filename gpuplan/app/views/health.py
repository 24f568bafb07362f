"""The daemon's health: when its plan cycles ran, and whether the last one succeeded."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class Health:
    """The daemon's last cycles, as ``/healthz`` reports them (updated by the cycle's thread)."""

    started_at: datetime
    last_cycle_at: datetime | None = None
    last_success_at: datetime | None = None
    last_error: str | None = None
    cycles: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, at: datetime, error: str | None) -> None:
        with self.lock:
            self.cycles += 1
            self.last_cycle_at = at
            self.last_error = error
            if error is None:
                self.last_success_at = at

    def as_dict(self) -> dict[str, object]:
        def iso(moment: datetime | None) -> str | None:
            return None if moment is None else moment.isoformat()

        with self.lock:
            return {
                "alive": True,
                "started_at": self.started_at.isoformat(),
                "cycles": self.cycles,
                "last_cycle_at": iso(self.last_cycle_at),
                "last_success_at": iso(self.last_success_at),
                "last_error": self.last_error,
            }
