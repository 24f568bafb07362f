"""Jobs found waiting in the cluster, adopted: each held job whose submitter asks gpuplan to plan
it (a :class:`~gpuplan.app.core.ports.Adoptable` that the reconciler observed) joins the queue
through :func:`gpuplan.app.jobs.submit.submit`, bound to its cluster job, as a submit would.

A spec that is refused is logged and never offered again; the cluster job is left as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from contract.errors import InputError
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.core.ports import Adoptable, Reconciler
from gpuplan.app.jobs.submit import submit
from storage.store import Store

log = logging.getLogger("gpuplan.slurm")


def adopt(
    reconciler: Reconciler, store: Store, found: Iterable[Adoptable], now: datetime, config: ServiceConfig
) -> list[str]:
    """Submit each job ``found`` held in the cluster (no replan: the cycle's plan follows);
    returns the ids of the jobs adopted."""
    adopted = []
    for held in found:
        try:
            result = submit(
                store,
                held.spec,
                now,
                config,
                source=f"Slurm job {held.cluster_id}'s comment",
                default_id=f"slurm-{held.cluster_id}",
                slurm_job=held.cluster_id,
                replan=False,
            )
        except InputError as error:
            reconciler.refused(held.cluster_id)
            log.warning("held Slurm job %d not adopted: %s", held.cluster_id, error)
            continue
        reconciler.adopted(held.cluster_id, result.job)
        adopted.append(result.job)
        log.info("adopted Slurm job %d as %s", held.cluster_id, result.job)
    return adopted
