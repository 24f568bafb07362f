"""Pruning: plan runs and their forecasts older than N days are deleted; commits and the job
history never are (a commit keeps its hour and assignments and loses its run's id).

A stored run is about 82 KB at 256 GPUs and the daemon stores some 50 a day: kept for ever,
a year of them is 1.5 GB. The daemon prunes once a day (``prune_keep_days``, 30 by
default); ``gpuplan prune --keep-days N`` does it by hand. SQLite reuses the freed pages,
so the file stops growing; it shrinks only with ``VACUUM``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuplan.app.core.retention import DEFAULT_KEEP_DAYS, KEEP_DAYS_RANGE, checked_keep_days
from storage.store import Store

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_KEEP_DAYS", "KEEP_DAYS_RANGE", "PruneReport", "checked_keep_days", "prune"]


@dataclass(frozen=True)
class PruneReport:
    before: datetime
    runs_deleted: int

    def line(self) -> str:
        return (
            f"pruned {self.runs_deleted} plan run(s) created before {self.before.isoformat()} "
            "with their forecasts; commits and the job history are kept"
        )


def prune(store: Store, now: datetime, keep_days: int) -> PruneReport:
    """Delete the runs (with their forecasts) created more than ``keep_days`` days before ``now``."""
    before = now - timedelta(days=checked_keep_days(keep_days, "keep_days"))
    report = PruneReport(before, store.prune_runs(before))
    log.info(report.line())
    return report
