"""A throwaway PostgreSQL server for the tests, started from Debian's ``postgresql`` package.

``PgServer.start()`` runs ``initdb`` into a fresh temporary folder and ``pg_ctl start`` on a
free port (TCP on 127.0.0.1, its unix socket in the same folder), as the ``postgres`` OS
user when the tests run as root (PostgreSQL refuses to run as root). The server trusts
local connections and skips fsync: it holds nothing worth keeping. ``tests/conftest.py``
wraps it in the ``pg_server`` (session) and ``pg_url`` (one fresh schema per test)
fixtures.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import psycopg

BINARIES = "/usr/lib/postgresql/*/bin"
MISSING = (
    f"PostgreSQL's server binaries are missing (no {BINARIES}/initdb). The storage contract tests "
    "run against a real server: run `make test`, which installs Debian's `postgresql` package "
    "(or `apt-get install -y postgresql` yourself)."
)
TEST_DATABASE = "gpuplan_test"
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    # Nothing here outlives the session: durability only costs time.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "16MB",
    "max_connections": "100",
}


def find_bindir() -> Path | None:
    """The newest installed major version's bin folder, or None."""
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    if not found:
        return None
    return max(found, key=lambda b: int(b.parent.name) if b.parent.name.isdigit() else 0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PgServer:
    """One running server; ``url`` is its ``gpuplan_test`` database."""

    def __init__(self, bindir: Path, root: Path, port: int, run_as: list[str]) -> None:
        self.bindir = bindir
        self.root = root
        self.port = port
        self._run_as = run_as
        self.url = self.database_url(TEST_DATABASE)

    @classmethod
    def start(cls) -> PgServer:
        bindir = find_bindir()
        if bindir is None:
            pytest.fail(MISSING, pytrace=False)
        root = Path(tempfile.mkdtemp(prefix="gpuplan-pg-"))
        run_as: list[str] = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(root)
                pytest.fail("Running as root, the server must run as the `postgres` user. " + MISSING)
            os.chown(root, user.pw_uid, user.pw_gid)
            run_as = ["runuser", "-u", "postgres", "--"]
        data = root / "data"
        cls._run([*run_as, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--no-sync"])  # fmt: skip
        last_error = ""
        for _ in range(5):  # another process may take the free port before the server binds it
            port = free_port()
            options = " ".join([f"-p {port}", f"-k {root}", *(f"-c {k}={v}" for k, v in SETTINGS.items())])
            started = subprocess.run(
                [*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"),
                 "-w", "-t", "60", "-o", options, "start"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if started.returncode == 0:
                server = cls(bindir, root, port, run_as)
                with server.admin() as admin:
                    admin.execute(f'CREATE DATABASE "{TEST_DATABASE}"')
                return server
            last_error = started.stdout + started.stderr
        log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start: {last_error}\n{log}", pytrace=False)

    @staticmethod
    def _run(command: list[str]) -> None:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed: {done.stdout}{done.stderr}", pytrace=False)

    def stop(self) -> None:
        subprocess.run(
            [
                *self._run_as,
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.root / "data"),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)

    def database_url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def admin(self, database: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
        """A superuser connection in autocommit mode."""
        import psycopg  # the `postgres` extra; SQLite-only runs do without it

        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=database, autocommit=True
        )

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        with self.admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return name

    def fresh_url(self) -> str:
        """The URL of a new, empty schema in ``gpuplan_test``, first on the search path.

        A schema is a fresh database to everything gpuplan does, at a fraction of the cost
        of CREATE DATABASE. Connections through the URL carry the schema's name as their
        ``application_name``, which is how :meth:`sessions` finds them.
        """
        name = f"t_{uuid.uuid4().hex[:16]}"
        with self.admin(TEST_DATABASE) as admin:
            admin.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.url}?application_name={name}&options=-csearch_path%3D{name}"

    @staticmethod
    def name_of(url: str) -> str:
        """The schema (and application name) of a :meth:`fresh_url`."""
        return url.partition("application_name=")[2].partition("&")[0]

    def drop(self, url: str) -> None:
        self.terminate(url)
        with self.admin(TEST_DATABASE) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{self.name_of(url)}" CASCADE')

    def terminate(self, url: str) -> None:
        """End the server's sessions opened through ``url``, as a restart would."""
        with self.admin(TEST_DATABASE) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                (self.name_of(url),),
            )

    def sessions(self, url: str) -> list[tuple[object, ...]]:
        """Sessions opened through ``url``: (pid, state, last query)."""
        with self.admin() as admin:
            return admin.execute(
                "SELECT pid, state, query FROM pg_stat_activity WHERE application_name = %s",
                (self.name_of(url),),
            ).fetchall()

    def waiting_on_locks(self, url: str) -> int:
        """Sessions opened through ``url`` that wait for a lock another session holds."""
        with self.admin() as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                (self.name_of(url),),
            ).fetchone()
        return int(row[0]) if row else 0  # type: ignore[call-overload]

    def settled_sessions(self, url: str, timeout_s: float = 10.0) -> list[tuple[object, ...]]:
        """Sessions still open through ``url`` once the server had ``timeout_s`` to end those whose client died."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = self.sessions(url)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)
