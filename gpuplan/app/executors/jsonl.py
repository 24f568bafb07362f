"""The JSON-lines executor: one line per job and hour (``{"hour", "job", "gpus"}``) appended to a
file that other tools can follow (``tail -F``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from contract.records import Commit
from gpuplan.app.executors.base import commit_lines


class JsonLinesExecutor:
    """Appends each commit to ``path``, one JSON object per job, flushed and synced."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def execute(self, commit: Commit) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(line) + "\n" for line in commit_lines(commit))
        # One write of whole lines in append mode: a follower never sees half a commit.
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
