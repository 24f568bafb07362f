"""A batch job's ``slurm:`` section, and the comment that ties a Slurm job to gpuplan.

A job spec may carry::

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.errors import InputError
from contract.records import Job
from gpuplan.app.adapters.slurm.client import BatchRequest, Placement
from gpuplan.app.core.slurm_settings import COMMENT_PREFIX

SECTION_KEYS = frozenset({"command", "script", "account", "qos", "time_limit_minutes", "job_id"})
MAX_TIME_LIMIT_MINUTES = 365 * 24 * 60


@dataclass(frozen=True, slots=True)
class BatchSection:
    command: str | None = None
    script: Path | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_minutes: int | None = None

    def request(self, job_id: str, partition: str) -> BatchRequest:
        """The held ``sbatch`` of job ``job_id``, placed later (at its commit)."""
        return BatchRequest(
            name=job_id,
            partition=partition,
            command=self.command,
            script=self.script,
            comment=comment_of({"id": job_id}),
            hold=True,
            account=self.account,
            qos=self.qos,
            time_limit_minutes=self.time_limit_minutes,
        )


def read_section(raw: object, *, source: str) -> BatchSection:
    """The spec's ``slurm:`` section, checked; each error names ``slurm.FIELD``."""
    if not isinstance(raw, Mapping):
        raise InputError("slurm", "a mapping (command or script, account, qos, ...)", raw, source=source)
    unknown = sorted(set(map(str, raw)) - SECTION_KEYS)
    if unknown:
        expected = f"one of {sorted(SECTION_KEYS)}"
        raise InputError(f"slurm.{unknown[0]}", expected, "unknown key", source=source)
    command, script = raw.get("command"), raw.get("script")
    if (command is None) == (script is None):
        expected = "a command to run, or `slurm.script` (a batch script), not both"
        raise InputError("slurm.command", expected, command, source=source)
    for key in ("command", "script", "account", "qos"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InputError(f"slurm.{key}", "a non-empty string", value, source=source)
    limit = raw.get("time_limit_minutes")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_TIME_LIMIT_MINUTES
    ):
        raise InputError(
            "slurm.time_limit_minutes", f"an integer in [1, {MAX_TIME_LIMIT_MINUTES}]", limit, source=source
        )
    return BatchSection(
        command=command,
        script=None if script is None else Path(script),
        account=raw.get("account"),
        qos=raw.get("qos"),
        time_limit_minutes=limit,
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
