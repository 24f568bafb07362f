"""``gpuplan db version|upgrade|backup|restore``: the database's schema and copies (docs/operations.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuplan.options import add_db

#: The use cases' field names -> this command's flags and arguments.
FLAGS = {"path": "PATH"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    version = sub.add_parser("version", help="the schema revision of the database, and this gpuplan's")
    add_db(version)
    upgrade = sub.add_parser(
        "upgrade", help="upgrade the schema to this gpuplan's newest revision, data kept"
    )
    add_db(upgrade)
    backup = sub.add_parser("backup", help="copy a SQLite database to PATH (online: the daemon may run)")
    backup.add_argument("path", type=Path, metavar="PATH", help="the new backup file (never overwritten)")
    add_db(backup)
    restore = sub.add_parser(
        "restore", help="replace a SQLite database with the backup PATH (stop the daemon first)"
    )
    restore.add_argument("path", type=Path, metavar="PATH", help="a file made by `gpuplan db backup`")
    add_db(restore)


def run(args: argparse.Namespace) -> int:
    from contract.errors import InputError
    from storage import maintenance

    if args.db_command == "restore":
        before, after = maintenance.restore(args.path, args.db)
        sys.stdout.write(f"restored {args.path} (schema {before}) into {args.db}: schema {after}\n")
        return 0
    if args.db_command == "backup":
        maintenance.backup(args.db, args.path)
        sys.stdout.write(f"backed up {args.db} to {args.path}\n")
        return 0
    state = maintenance.schema_state(args.db)
    if args.db_command == "version":
        sys.stdout.write(f"{maintenance.describe(state)}\n")
        return 1 if state.newer else 0
    if state.revision is None:
        raise InputError(
            "db",
            "the URL of an existing gpuplan database",
            args.db,
            hint="It holds no schema: `gpuplan init` (or the daemon's first start) creates one.",
        )
    before, after = maintenance.upgrade(args.db)
    what = "already current" if before == after else f"upgraded from {before}"
    sys.stdout.write(f"{args.db}: schema {after}, {what}\n")
    return 0
