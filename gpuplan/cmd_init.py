"""``gpuplan init``: a head node's first step. Writes the commented config (never over one that is
there), creates the database and prints what to do next (docs/operations.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuplan.packaging import DEFAULT_CONFIG, DEFAULT_DB

#: The use cases' field names -> this command's flags.
FLAGS = {"path": "--config"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        metavar="PATH",
        help=f"the config to write (default {DEFAULT_CONFIG}; an existing file is never overwritten)",
    )
    parser.add_argument(
        "--db", default=DEFAULT_DB, metavar="URL", help=f"the database to create (default {DEFAULT_DB})"
    )


def run(args: argparse.Namespace) -> int:
    from contract.errors import InputError
    from contract.files import write_bytes_atomic
    from gpuplan import packaging
    from gpuplan.app.core.config import load_config
    from storage import maintenance
    from storage.factory import open_store
    from storage.sql import parse_url

    path: Path = args.config
    if path.exists():
        raise InputError(
            "--config", "a path where no file is yet (init never overwrites a config)", str(path)
        )
    parse_url(args.db)  # a malformed URL stops here, before anything is written
    state = maintenance.schema_state(args.db)
    if state.newer:
        raise InputError(
            "--db", "a new or a gpuplan database this version knows", maintenance.describe(state)
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, packaging.CONFIG_TEMPLATE.read_bytes(), "--config")
    try:
        load_config(path)  # the template is a config the daemon takes
        open_store(args.db).close()
    except BaseException:
        path.unlink()  # nothing half-done: a failed init leaves no config to refuse the next one
        raise
    created = "created" if state.revision is None else f"kept (schema {state.revision}, now {state.head})"
    here = Path(sys.prefix)
    sys.stdout.write(
        f"wrote {path}\n"
        f"database {args.db}: {created}\n"
        "next:\n"
        f"  1. edit {path}: cluster.gpus, apps, executor\n"
        f"  2. {here}/bin/gpuplan doctor --config {path} --db {args.db}\n"
        f"  3. install -m 644 {packaging.UNIT} /etc/systemd/system/gpuplan.service\n"
        f"     install -m 644 {packaging.LOGROTATE} /etc/logrotate.d/gpuplan\n"
        "  4. the service runs as the user gpuplan, which owns its state:\n"
        "     useradd --system --home-dir /var/lib/gpuplan --shell /usr/sbin/nologin gpuplan\n"
        "     chown -R gpuplan:gpuplan /var/lib/gpuplan\n"
        "  5. systemctl daemon-reload && systemctl enable --now gpuplan\n"
    )
    return 0
