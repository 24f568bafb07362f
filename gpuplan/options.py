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
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from contract.errors import InputError

if TYPE_CHECKING:
    from storage.store import Store

DEFAULT_DB = "sqlite:///var/gpuplan.db"


def add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=DEFAULT_DB,
        metavar="URL",
        help=f"database URL (default {DEFAULT_DB}; PostgreSQL: postgresql+psycopg://user@host/db)",
    )


def add_at(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--at", metavar="TIME", help=f"{what} (ISO 8601, UTC when no offset; default: now)")


def at_of(args: argparse.Namespace) -> datetime:
    from contract.times import parse_time

    return datetime.now(UTC) if args.at is None else parse_time(args.at, "--at")


def open_db(args: argparse.Namespace, *, create: bool = False) -> Store:
    """The store at ``--db``, its schema upgraded. Only the daemon creates a database
    (``create``); any other command on a SQLite file that is not there says so."""
    from gpuplan.app.report_inputs import open_existing_store
    from storage.factory import open_store

    return open_store(args.db) if create else open_existing_store(args.db)


def print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")


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
