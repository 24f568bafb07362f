"""Progress bars for long commands: on stderr, and only when stderr is a terminal.

A bar on a pipe or a log file is a stream of ``\\r`` frames glued to the next line (an error
read by a tool, a log line): there the bar is off, and ``-v`` logs the progress instead.
"""

from __future__ import annotations

import sys
from typing import Any


def progress_bar(total: int, desc: str, *, unit: str = "it", leave: bool = True) -> Any:
    """A tqdm bar of ``total`` steps on stderr, disabled when stderr is not a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not _on_terminal(), leave=leave)


def _on_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False
