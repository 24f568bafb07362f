"""A batch job's held ``sbatch``, and the comment that ties a Slurm job to gpuplan.

A job spec may carry a ``slurm:`` section (read by
:func:`gpuplan.app.core.slurm_settings.read_section`)::

    slurm:
      command: python train.py --config c.yaml     # or  script: /path/to/job.sbatch
      account: research                            # optional
      qos: normal                                  # optional
      time_limit_minutes: 600                      # optional

``gpuplan submit`` then submits it to Slurm held, with the comment ``gpuplan:{"id": ID}``,
and stores the Slurm job id in the stored spec (``slurm.job_id``). A Slurm user may submit
the job themselves, held, with the whole spec in the comment
(``sbatch --hold --comment 'gpuplan:{"id": ..., "kind": ..., ...}'``): the next cycle
adopts it, and its comment becomes ``gpuplan:{"id": ID}``.

A real-time replica's comment is ``gpuplan:{"app": APP, "gpu": GPU}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from contract.records import Job
from gpuplan.app.adapters.slurm.client import BatchRequest, Placement
from gpuplan.app.core.slurm_settings import COMMENT_PREFIX, BatchSection


def held_request(section: BatchSection, job_id: str, partition: str) -> BatchRequest:
    """The held ``sbatch`` of job ``job_id`` from its spec's ``slurm:`` section, placed later
    (at its commit)."""
    return BatchRequest(
        name=job_id,
        partition=partition,
        command=section.command,
        script=section.script,
        comment=comment_of({"id": job_id}),
        hold=True,
        account=section.account,
        qos=section.qos,
        time_limit_minutes=section.time_limit_minutes,
    )


def comment_of(fields: Mapping[str, Any]) -> str:
    return COMMENT_PREFIX + json.dumps(dict(fields), separators=(",", ":"), sort_keys=True)


def parse_comment(comment: str) -> dict[str, Any] | None:
    """The object in a ``gpuplan:{...}`` comment; None for any other comment."""
    if not comment.startswith(COMMENT_PREFIX):
        return None
    try:
        value = json.loads(comment[len(COMMENT_PREFIX) :])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def slurm_job_id(job: Job) -> int | None:
    """The Slurm job of a stored job, if it has one."""
    section = job.spec.get("slurm")
    value = section.get("job_id") if isinstance(section, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def replica_request(app: str, gpu: int, command: str, partition: str, placement: Placement) -> BatchRequest:
    """One real-time replica: ``command`` on exactly one GPU, started at once (in its pool's
    partition and with its constraint, when the placement names them)."""
    return BatchRequest(
        name=f"gpuplan-{app}-{gpu}",
        partition=partition,
        command=command,
        comment=comment_of({"app": app, "gpu": gpu}),
        hold=False,
        placement=placement,
    )
