"""One hot-path replan for many concurrent submits (a group commit).

Each submit stores its job, then asks for a replan that sees it. While a replan runs, the
submits that arrive wait; the next replan covers all of them at once, and each answers
from it. A submit thus waits for at most the replan in flight and its own, however many
arrive together, instead of for one replan per submit ahead of it in the plan lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from contract.records import PlanRun


class SharedReplan:
    """Runs ``plan`` (which takes the plan lock itself) for every waiting caller at once."""

    def __init__(self, plan: Callable[[], PlanRun | None]) -> None:
        self._plan = plan
        self._changed = threading.Condition()
        self._asked = 0  # requests so far
        self._covered = 0  # requests the last finished replan saw
        self._running = False
        self._last: PlanRun | None = None
        self._error: BaseException | None = None

    def __call__(self) -> PlanRun | None:
        """A run planned after the caller's job was stored (the caller stores it first)."""
        with self._changed:
            self._asked += 1
            mine = self._asked
            while self._covered < mine:
                if self._running:
                    self._changed.wait()
                    continue
                self._running, covers = True, self._asked
                self._changed.release()
                run: PlanRun | None = None
                error: BaseException | None = None
                try:
                    run = self._plan()
                except BaseException as failure:
                    error = failure
                finally:
                    self._changed.acquire()
                    self._running = False
                    self._covered, self._last, self._error = covers, run, error
                    self._changed.notify_all()
            if self._error is not None:
                raise self._error
            return self._last
