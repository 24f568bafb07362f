"""Options that several commands share, and their checks.

- ``--db``, ``--at``, ``--json`` and opening the store;
- range checks for numeric options: ``argparse`` turns "nan", "inf" and "1e999" into
  floats without complaint, so every numeric option passes through :func:`number_in` or
  :func:`integer_in` before any work starts, and a value outside its range is an
  InputError naming the option (exit 2).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.errors import InputError
from scheduler.model import MAX_BUDGET_MS, MAX_TIME_LIMIT_S
from storage.factory import DEFAULT_URL

if TYPE_CHECKING:
    from storage.store import Store

#: CP-SAT worker threads.
MAX_WORKERS = 64


#: The use cases' field names that every command shows as the same flag.
FIELD_FLAGS = {"db": "--db", "at": "--at", "since": "--since"}


@contextmanager
def as_flags(names: Mapping[str, str]) -> Iterator[None]:
    """Re-raise a use case's ``InputError`` under the command-line name of its field."""
    try:
        yield
    except InputError as error:
        renamed = error.renamed(names)
        if renamed is error:
            raise
        raise renamed from None


def add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=DEFAULT_URL,
        metavar="URL",
        help=f"database URL (default {DEFAULT_URL}; PostgreSQL: postgresql+psycopg://user@host/db)",
    )


def add_time_limit(parser: argparse.ArgumentParser, *, default: float | None, what: str) -> None:
    """``--time-limit SECONDS``: the full mode's limit (checked by ``checked_time_limit_s``)."""
    parser.add_argument(
        "--time-limit",
        type=float,
        default=default,
        metavar="SECONDS",
        help=f"{what}; 0 < S <= {MAX_TIME_LIMIT_S:g}",
    )


def add_budget_ms(parser: argparse.ArgumentParser, flag: str, *, default: float | None, what: str) -> None:
    """A fast-mode budget option (checked by ``scheduler.model.checked_budget_ms``)."""
    parser.add_argument(
        flag, type=float, default=default, metavar="MS", help=f"{what}; 0 < MS <= {MAX_BUDGET_MS:g}"
    )


#: CP-SAT worker threads when ``--workers`` is not given.
DEFAULT_WORKERS = 2


def add_workers(parser: argparse.ArgumentParser, *, default: int | None = DEFAULT_WORKERS) -> None:
    """``--workers N``: CP-SAT's worker threads in the full mode (``default`` None: a command
    that tells whether it was given; it means :data:`DEFAULT_WORKERS`)."""
    parser.add_argument(
        "--workers",
        type=int,
        default=default,
        help=f"CP-SAT workers in the full mode (1-{MAX_WORKERS}; default {DEFAULT_WORKERS})",
    )


def add_traffic(parser: argparse.ArgumentParser, what: str) -> None:
    """``--traffic CSV``: hourly traffic files, given as ``--traffic A B`` or ``--traffic A --traffic B``."""
    parser.add_argument(
        "--traffic",
        type=Path,
        nargs="+",
        action="extend",
        default=[],
        metavar="CSV",
        help=f"{what} (repeat the flag or list several after it)",
    )


def add_at(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--at", metavar="TIME", help=f"{what} (ISO 8601, UTC when no offset; default: now)")


def at_of(args: argparse.Namespace) -> datetime:
    from contract.times import parse_time

    return datetime.now(UTC) if args.at is None else parse_time(args.at, "--at")


def open_db(args: argparse.Namespace, *, create: bool = False) -> Store:
    """The store at ``--db``, its schema upgraded. Only the daemon creates a database
    (``create``); any other command on a SQLite file that is not there says so."""
    from gpuplan.app.views.report_inputs import open_existing_store
    from storage.factory import open_store

    return open_store(args.db) if create else open_existing_store(args.db)


def print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")


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
