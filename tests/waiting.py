"""Waiting on a condition, never on the clock alone: the one poll the tests share."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object],
    what: str = "the condition holds",
    timeout_s: float = 20.0,
    every_s: float = 0.005,
) -> None:
    """Return once ``condition()`` is true; fail naming ``what`` after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(every_s)
