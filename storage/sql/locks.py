"""The cycle lock: a PostgreSQL advisory lock, or a row with an owner and an expiry on SQLite."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import (
    delete,
    exc,
    select,
    text,
)

from contract.errors import StoreError
from storage.tables import (
    LockRow,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

from storage.sql.engine import SqlBase

log = logging.getLogger(__name__)


_HOST = socket.gethostname()


def _lock_owner() -> str:
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex}"


def _owner_alive(owner: str) -> bool:
    """Whether the process named in a lock's owner may still run (False only when surely dead)."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != _HOST or not pid_text.isdigit():
        return True  # another machine: only the expiry can tell
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, under another user
    return True


#: The advisory lock (and the locks-table row naming its owner) of the leading daemon.
LEADER = "leader"
#: Whether the advisory lock ``:name`` is held in this database. pg_try_advisory_lock(bigint)
#: keys a lock by (classid, objid) = (high, low) 32 bits.
_LEADER_HELD = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND classid::bigint = ((hashtext(:name)::bigint >> 32) & 4294967295)"
    " AND objid::bigint = (hashtext(:name)::bigint & 4294967295)"
)


class LockStore(SqlBase):
    """The named cross-process lock a cycle holds, and the leading daemon's lock."""

    #: The leader lock's connection while this store leads.
    _leading: Connection | None = None

    # -- leadership ----------------------------------------------------------------------
    @contextmanager
    def leadership(self, owner: str) -> Iterator[bool]:
        if self.dialect != "postgresql":
            yield True
            return
        with self._advisory_lock(LEADER) as connection:
            if connection is not None:
                # The row only names the owner; the lock is what leads (status checks both).
                with self._session() as session:
                    row = session.get(LockRow, LEADER)
                    now = datetime.now(UTC)
                    if row is None:
                        session.add(LockRow(name=LEADER, owner=owner, expires_at=now))
                    else:
                        row.owner, row.expires_at = owner, now
            self._leading = connection
            try:
                yield connection is not None
            finally:
                self._leading = None

    def still_leads(self) -> bool:
        if self.dialect != "postgresql":
            return True
        connection = self._leading
        if connection is None:
            return False
        try:  # on the lock's own connection: a connection the server ended holds nothing
            return bool(
                connection.scalar(text(_LEADER_HELD + " AND pid = pg_backend_pid()"), {"name": LEADER})
            )
        except exc.SQLAlchemyError as error:
            log.warning("the leader's lock connection is gone: %s", error)
            return False

    def leader(self) -> str | None:
        if self.dialect != "postgresql":
            return None
        with self._reading() as connection:
            if not connection.scalar(text(_LEADER_HELD), {"name": LEADER}):
                return None
            owner: str | None = connection.scalar(select(LockRow.owner).where(LockRow.name == LEADER))
            return owner

    # -- the cycle lock ------------------------------------------------------------------
    @contextmanager
    def cycle_lock(self, name: str) -> Iterator[bool]:
        if self.dialect == "postgresql":
            with self._advisory_lock(name) as connection:
                yield connection is not None
        else:
            with self._row_lock(name) as held:
                yield held

    @contextmanager
    def _advisory_lock(self, name: str) -> Iterator[Connection | None]:
        """The session lock ``name`` on a connection of its own, outside any transaction (the
        server frees it when this connection ends, however the process ends): yields that
        connection while it is held, None when another holds it."""
        try:
            connection = self._engine.connect()
        except (exc.DBAPIError, exc.TimeoutError) as error:
            raise self._fail(error) from error
        try:
            try:
                connection.execution_options(isolation_level="AUTOCOMMIT")
                held = bool(
                    connection.scalar(text("SELECT pg_try_advisory_lock(hashtext(:name))"), {"name": name})
                )
            except exc.DBAPIError as error:
                raise self._fail(error) from error
            try:
                yield connection if held else None
            finally:
                if held:
                    try:
                        connection.execute(text("SELECT pg_advisory_unlock(hashtext(:name))"), {"name": name})
                    except exc.SQLAlchemyError as error:  # the connection is gone: so is the lock
                        log.warning("could not release the lock %r (the server frees it): %s", name, error)
        finally:
            connection.close()

    @contextmanager
    def _row_lock(self, name: str) -> Iterator[bool]:
        owner = _lock_owner()
        now = datetime.now(UTC)  # the real clock: an expiry guards real processes, not replayed time
        with self._session() as session:  # BEGIN IMMEDIATE: one taker at a time
            row = session.get(LockRow, name)
            if row is not None and row.expires_at > now and _owner_alive(row.owner):
                held = False
            elif row is None:
                session.add(LockRow(name=name, owner=owner, expires_at=now + self._lock_ttl))
                held = True
            else:
                log.info("taking over the lock %r from %s (dead or expired)", name, row.owner)
                row.owner, row.expires_at = owner, now + self._lock_ttl
                held = True
        try:
            yield held
        finally:
            if held:
                try:
                    with self._session() as session:
                        session.execute(delete(LockRow).where(LockRow.name == name, LockRow.owner == owner))
                except StoreError as error:
                    log.warning("could not release the lock %r (it expires by itself): %s", name, error)
