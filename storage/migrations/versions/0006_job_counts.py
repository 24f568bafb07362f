"""The jobs counted by the database as they are written, for the store's marks.

Revision ID: 0006
Revises: 0005

``job_counts`` holds one row (``id`` 1): the jobs, the running ones and the done ones.
Triggers on ``jobs`` move it in the transaction of every insert, delete and change of state,
whoever writes (this process, another daemon, a command), so the marks read three numbers
where they counted a table that keeps every job ever submitted. The row starts from the jobs
already stored.

SQLite counts in row triggers. PostgreSQL counts once per statement, from the statement's
transition tables, and a trigger before the statement takes the row's lock before it touches
any job: every writer of jobs takes that lock first, so two of them cannot each hold what the
other waits for.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None

# The states as stored (contract.records.JobState's values; a migration keeps its own copy).
RUNNING, DONE = "running", "done"


def _is(row: str, state: str) -> str:
    """1 when the job ``row`` (NEW, OLD or the table's own row) is in ``state``, else 0."""
    return f"(CASE WHEN {row}.state = '{state}' THEN 1 ELSE 0 END)"


def _moved(sign: str, jobs: str, running: str, done: str) -> str:
    """The one row moved by ``sign`` (+ or -) times the given counts."""
    return (
        f"UPDATE job_counts SET jobs = jobs {sign} {jobs}, running = running {sign} {running}, "
        f"done = done {sign} {done} WHERE id = 1"
    )


def _in(rows: str, state: str) -> str:
    """How many of the transition table ``rows`` are in ``state``."""
    return f"(SELECT count(*) FROM {rows} WHERE state = '{state}')"


def _statement(sign: str, rows: str) -> str:
    """A PostgreSQL statement trigger's body: the rows of ``rows`` counted in (+) or out (-)."""
    moved = _moved(sign, f"(SELECT count(*) FROM {rows})", _in(rows, RUNNING), _in(rows, DONE))
    return f"BEGIN IF EXISTS (SELECT 1 FROM {rows}) THEN {moved}; END IF; RETURN NULL; END"


def _row(sign: str, row: str, jobs: str = "1") -> str:
    """A SQLite row trigger's statement: the job ``row`` (NEW or OLD) counted in (+) or out (-)."""
    return _moved(sign, jobs, _is(row, RUNNING), _is(row, DONE))


SQLITE_TRIGGERS = {
    "job_counts_insert": f"AFTER INSERT ON jobs BEGIN {_row('+', 'NEW')}; END",
    "job_counts_delete": f"AFTER DELETE ON jobs BEGIN {_row('-', 'OLD')}; END",
    "job_counts_state": "AFTER UPDATE OF state ON jobs WHEN OLD.state IS NOT NEW.state BEGIN "
    f"{_row('+', 'NEW', jobs='0')}; {_row('-', 'OLD', jobs='0')}; END",
}

# PostgreSQL counts once per statement, from its transition tables: a row trigger would update
# the one row once per job written, and many updates of one row in one transaction each walk
# the chain of its earlier versions (a bulk insert then takes time quadratic in its rows).
POSTGRES_FUNCTIONS = {
    "job_counts_lock": "BEGIN PERFORM 1 FROM job_counts WHERE id = 1 FOR UPDATE; RETURN NULL; END",
    "job_counts_inserted": _statement("+", "new_rows"),
    "job_counts_deleted": _statement("-", "old_rows"),
    "job_counts_changed": f"""
        DECLARE
          running_moved bigint := {_in("new_rows", RUNNING)} - {_in("old_rows", RUNNING)};
          done_moved bigint := {_in("new_rows", DONE)} - {_in("old_rows", DONE)};
        BEGIN
          IF running_moved <> 0 OR done_moved <> 0 THEN
            {_moved("+", "0", "running_moved", "done_moved")};
          END IF;
          RETURN NULL;
        END""",
}

# A trigger with transition tables takes no column list, so the state trigger sees every
# UPDATE of jobs and moves the row only when a state moved.
POSTGRES_TRIGGERS = {
    "job_counts_lock": "BEFORE INSERT OR DELETE OR UPDATE OF state ON jobs "
    "FOR EACH STATEMENT EXECUTE FUNCTION job_counts_lock()",
    "job_counts_inserted": "AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION job_counts_inserted()",
    "job_counts_deleted": "AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION job_counts_deleted()",
    "job_counts_changed": "AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION job_counts_changed()",
}


def upgrade() -> None:
    op.create_table(
        "job_counts",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_counts")),
    )
    op.execute(
        "INSERT INTO job_counts (id, jobs, running, done) SELECT 1, count(*), "
        f"coalesce(sum({_is('jobs', RUNNING)}), 0), coalesce(sum({_is('jobs', DONE)}), 0) FROM jobs"
    )
    if op.get_bind().dialect.name == "postgresql":
        for name, body in POSTGRES_FUNCTIONS.items():
            op.execute(f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $${body}$$")
        for name, definition in POSTGRES_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {definition}")
    else:
        for name, definition in SQLITE_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {definition}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in POSTGRES_TRIGGERS:
            op.execute(f"DROP TRIGGER {name} ON jobs")
        for name in POSTGRES_FUNCTIONS:
            op.execute(f"DROP FUNCTION {name}()")
    else:
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_table("job_counts")
