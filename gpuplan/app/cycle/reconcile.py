"""The cluster's truth, acted on: the jobs a :class:`~gpuplan.app.core.ports.Reconciler`
observed as ended are finished (:func:`gpuplan.app.cycle.finish.finish`, as ``gpuplan done``).

The reconciler reads its cluster and reports what it saw; the use case here changes the
job history, before each plan (:func:`reconcile`) and between plans (:func:`poll`). The held
jobs it found that ask to be planned are adopted a wing up, by :mod:`gpuplan.app.jobs.adopt`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from contract.errors import InputError
from contract.records import Job
from gpuplan.app.core.ports import Adoptable, Finished, Reconciler
from gpuplan.app.cycle.finish import finish
from storage.store import Store

log = logging.getLogger("gpuplan.slurm")


def reconcile(reconciler: Reconciler, store: Store, now: datetime) -> list[Adoptable]:
    """Before a plan: the cluster's truth into the store, and the jobs it ended finished;
    returns the held jobs it found that ask to be planned (:func:`gpuplan.app.jobs.adopt.adopt`
    submits them)."""
    observed = reconciler.reconcile(store, now)
    finish_observed(store, observed.finished)
    return observed.adoptable


def poll(reconciler: Reconciler, store: Store, now: datetime) -> list[Job]:
    """Between plans: the jobs the cluster ended, finished; returns them."""
    return finish_observed(store, reconciler.poll(store, now))


def finish_observed(store: Store, observed: Iterable[Finished]) -> list[Job]:
    """Each observed end into the history. One the cluster reported that cannot be recorded
    (already done by hand, say) is logged and skipped; a vanished one's error propagates."""
    finished = []
    for end in observed:
        try:
            finished.append(finish(store, end.job_id, end.at, end.outcome, started_at=end.started_at))
        except InputError as error:
            if end.reported is None:
                raise
            why = (end.job_id, end.cluster_id, end.reported, error)
            log.warning("job %s (Slurm %s) ended %s but was not recorded: %s", *why)
            continue
        if end.reported is not None:
            seen = (end.job_id, end.cluster_id, end.outcome.value, end.at.isoformat())
            log.info("job %s (Slurm %s) %s at %s", *seen)
    return finished
