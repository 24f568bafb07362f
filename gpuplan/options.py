"""Options that several commands share: ``--db``, ``--at``, ``--json``; and opening the store."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

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
    from gpuplan.app.config import parse_time

    return datetime.now(UTC) if args.at is None else parse_time(args.at, "--at")


def open_db(args: argparse.Namespace) -> Store:
    """The store at ``--db``, its schema upgraded."""
    from storage.store import open_store

    return open_store(args.db)


def print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")
