"""Pass 3 of the fast mode: the cluster seen upside down, and a plan for it turned back."""

from __future__ import annotations

from dataclasses import replace

from contract.scenario import Instance
from scheduler.model import Allocation, Placement


def mirrored(instance: Instance) -> Instance | None:
    """The cluster seen upside down (GPU ``g`` -> ``gpus - 1 - g``), or None where an aligned
    block would not stay aligned (a job size that does not divide the cluster) or where
    nothing is fixed in place (then the mirror is the same problem).

    Services stack at the top and batch fills from the bottom; when running work or
    down GPUs make the other way round pack better, the mirror finds it.
    """
    g = instance.gpus
    if any(g % job.gpus for job in instance.batch_jobs):
        return None
    if not (instance.running_batch or instance.running_realtime or instance.down):
        return None  # nothing fixed in place: the mirror image is the same problem
    return replace(
        instance,
        running_batch={
            job_id: replace(r, first_gpu=g - r.first_gpu - r.gpus)
            for job_id, r in instance.running_batch.items()
        },
        running_realtime={
            job_id: replace(r, gpus=frozenset(g - 1 - gpu for gpu in r.gpus))
            for job_id, r in instance.running_realtime.items()
        },
        down=tuple(replace(w, gpu=g - 1 - w.gpu) for w in instance.down),
    )


def _unmirror(instance: Instance, allocation: Allocation) -> Allocation:
    """An allocation for ``mirrored(instance)`` in ``instance``'s GPU ids."""
    g = instance.gpus
    sizes = {job.id: job.gpus for job in instance.batch_jobs}
    return Allocation(
        batch={
            job_id: Placement(start_step=p.start_step, first_gpu=g - p.first_gpu - sizes[job_id])
            for job_id, p in allocation.batch.items()
        },
        realtime={
            job_id: tuple(int(format(mask, f"0{g}b")[::-1], 2) for mask in masks)
            for job_id, masks in allocation.realtime.items()
        },
    )
