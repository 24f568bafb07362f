"""Range checks for numeric command-line options: finite, inside a documented interval.

``argparse`` turns "nan", "inf" and "1e999" into floats without complaint; every
numeric option therefore passes through :func:`number_in` or :func:`integer_in`
before any work starts, and a value outside its range is an InputError naming the
option (exit 2).
"""

from __future__ import annotations

import math

from contract.errors import InputError

#: The full mode's solver limit; the benchmark gives 60 s, an hour is far past useful.
MAX_TIME_LIMIT_S = 3600.0
#: CP-SAT worker threads.
MAX_WORKERS = 64


def number_in(option: str, value: float, low: float, high: float, *, low_open: bool = False) -> float:
    """``value`` when finite and in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    above_low = value > low if low_open else value >= low
    if not (math.isfinite(value) and above_low and value <= high):
        bracket = "(" if low_open else "["
        raise InputError(option, f"a finite number in {bracket}{low:g}, {high:g}]", value)
    return value


def integer_in(option: str, value: int, low: int, high: int) -> int:
    """``value`` when in ``[low, high]``."""
    if not low <= value <= high:
        raise InputError(option, f"an integer in [{low:,}, {high:,}]", value)
    return value


def time_limit(value: float, option: str = "--time-limit") -> float:
    """A solver time limit in seconds: ``(0, MAX_TIME_LIMIT_S]``."""
    return number_in(option, value, 0.0, MAX_TIME_LIMIT_S, low_open=True)
