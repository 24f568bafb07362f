"""The JSON-lines executor: one line per job and hour (``{"hour", "job", "gpus"}``), and one per
stopped job (``{"at", "job", "stop": true}``), appended to a file that other tools can follow
(``tail -F``)."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from contract.records import Commit
from gpuplan.app.executors.base import commit_lines


class JsonLinesExecutor:
    """Appends each commit to ``path``, one JSON object per job, flushed and synced."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def execute(self, commit: Commit) -> None:
        self._append("".join(json.dumps(line) + "\n" for line in commit_lines(commit)))

    def stop(self, job: str, at: datetime) -> None:
        self._append(json.dumps({"at": at.isoformat(), "job": job, "stop": True}) + "\n")

    def _append(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One write of whole lines in append mode: a follower never sees half a commit.
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
