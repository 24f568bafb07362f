"""The JSON-lines executor: one line per job and hour (``{"hour", "seq", "job", "gpus"}``,
``seq`` 0), one per job of an amendment (``seq`` its number within the hour, with
``"amendment": seq`` and ``"at"``, when it was made), and one per stopped job (``{"at",
"job", "stop": true}``), appended to a file that other tools can follow (``tail -F``).

Each database has its own feed (:func:`default_feed`): beside a SQLite file, under ``var/feeds``
named by a hash of a server's URL, so two databases never share one by default.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from datetime import datetime
from pathlib import Path

from contract.records import Amendment, Commit
from gpuplan.app.core.ports import amendment_lines, commit_lines
from storage.store import Store

log = logging.getLogger(__name__)

#: Where the feeds of databases with no file of their own (PostgreSQL) go.
SERVER_FEEDS = Path("var/feeds")


def default_feed(store: Store) -> Path | None:
    """The database's own feed: ``NAME.commits.jsonl`` beside a SQLite file ``NAME.db``,
    ``var/feeds/<dialect>-<hash of the URL>.commits.jsonl`` for a server, None in memory."""
    if store.file is not None:
        return store.file.with_name(f"{store.file.stem}.commits.jsonl")
    if store.dialect == "sqlite":
        return None  # an in-memory database: nothing outlives the process
    digest = hashlib.sha256(store.url.encode()).hexdigest()[:16]
    return SERVER_FEEDS / f"{store.dialect}-{digest}.commits.jsonl"


class JsonLinesExecutor:
    """Appends each commit and amendment to ``path``, one JSON object per job, flushed and synced.

    Idempotent: a (hour, seq, job) line already in the file is not written again, so a commit
    re-sent by the outbox, even one cut off half-written, ends up in the file exactly once.
    """

    name = "jsonl"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.target = f"the JSON-lines feed {path}"
        self._held: set[tuple[str, int, str]] = set()  # (hour, seq, job) lines in the file
        self._read_to = 0  # bytes of the file already scanned for them

    def _scan(self) -> None:
        """Read the commit lines written since the last scan."""
        try:
            with self.path.open("rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < self._read_to:  # the file was replaced: start again
                    self._held.clear()
                    self._read_to = 0
                handle.seek(self._read_to)
                data = handle.read()
        except FileNotFoundError:
            self._held.clear()
            self._read_to = 0
            return
        whole = data[: data.rfind(b"\n") + 1]
        for raw in whole.splitlines():
            try:
                line = json.loads(raw)
                if not line.get("stop"):  # a stopped job's line holds no commit
                    self._held.add((str(line["hour"]), int(line.get("seq", 0)), str(line["job"])))
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("%s: a line that is not a commit line is ignored: %.80r", self.path, raw)
        self._read_to += len(whole)

    def deliver(self, commit: Commit) -> bool:
        return self._write(commit.seq, commit_lines(commit))

    def amend(self, amendment: Amendment) -> bool:
        return self._write(amendment.seq, amendment_lines(amendment))

    def _write(self, seq: int, lines: list[dict[str, object]]) -> bool:
        """Append the lines of one commit or amendment not in the file yet (idempotent)."""
        self._scan()
        fresh = [
            {"hour": line["hour"], "seq": seq, **line}
            for line in lines
            if (str(line["hour"]), seq, str(line["job"])) not in self._held
        ]
        if fresh:
            self._append(fresh)
        return True

    def stop(self, job: str, at: datetime) -> None:
        self._append([{"at": at.isoformat(), "job": job, "stop": True}])

    def _append(self, lines: list[dict[str, object]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(line) + "\n" for line in lines)
        # A line cut off by a crash is closed first, so that it cannot swallow the next one.
        if self.path.exists() and self.path.stat().st_size:
            with self.path.open("rb") as tail:
                tail.seek(-1, os.SEEK_END)
                if tail.read(1) != b"\n":
                    text = "\n" + text
        # One write of whole lines in append mode: a follower never sees half a commit.
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
