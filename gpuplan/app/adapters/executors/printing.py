"""A wrapper that also prints each commit, one line per job: what `make run` shows."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TextIO

from contract.records import Amendment, Commit
from gpuplan.app.core.ports import Executor, amendment_lines, commit_lines


class PrintingExecutor:
    """Passes each commit and amendment on to ``inner``, then writes it to ``stream`` (stdout by default)."""

    def __init__(self, inner: Executor, stream: TextIO | None = None) -> None:
        self.inner = inner
        self.stream = stream
        self.name = inner.name
        self.target = inner.target

    def deliver(self, commit: Commit) -> bool:
        acknowledged = self.inner.deliver(commit)
        if acknowledged:
            stream = self.stream or sys.stdout
            for line in commit_lines(commit):
                stream.write(f"commit {line['hour']} {line['job']} gpus={line['gpus']}\n")
            stream.flush()
        return acknowledged

    def amend(self, amendment: Amendment) -> bool:
        acknowledged = self.inner.amend(amendment)
        if acknowledged:
            stream = self.stream or sys.stdout
            for line in amendment_lines(amendment):
                stream.write(
                    f"amend {line['hour']} #{line['amendment']} at {line['at']} "
                    f"{line['job']} gpus={line['gpus']}\n"
                )
            stream.flush()
        return acknowledged

    def stop(self, job: str, at: datetime) -> None:
        self.inner.stop(job, at)
        stream = self.stream or sys.stdout
        stream.write(f"stop {at.isoformat()} {job}\n")
        stream.flush()
