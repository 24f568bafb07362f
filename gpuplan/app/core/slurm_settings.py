"""How gpuplan reaches a Slurm cluster: the ``slurm:`` section of the daemon's config
(:class:`SlurmSettings`), a job spec's (:class:`BatchSection`, what the job runs), and the
error a Slurm command gives (:class:`SlurmError`, which the command line reports)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from contract.errors import InputError


class SlurmError(RuntimeError):
    """A Slurm command failed, timed out or answered what could not be read."""

    def __init__(self, command: Sequence[str], message: str, returncode: int | None = None) -> None:
        self.command = tuple(command)
        self.slurm_message = message.strip()
        self.returncode = returncode
        status = "" if returncode is None else f" (exit {returncode})"
        super().__init__(f"`{' '.join(self.command)}` failed{status}: {self.slurm_message or 'no message'}")


#: The comment prefix of the jobs gpuplan owns: ``--comment 'gpuplan:{...spec...}'``.
COMMENT_PREFIX = "gpuplan:"


@dataclass(frozen=True, slots=True)
class SlurmPool:
    """Where one pool of ``cluster.pools`` lies in Slurm: the nodes of ``partition`` (with
    ``feature`` among their features, when set; docs/slurm.md, "A cluster of several GPU
    models"). ``gpus``: the pool's GPU count in the config, which Slurm's must equal."""

    pool: str
    partition: str
    feature: str | None
    gpus: int


@dataclass(frozen=True, slots=True)
class SlurmSettings:
    """One gpuplan cluster is one partition of one GPU model, or, with ``pools``, one pool per
    partition or per node feature of a shared partition.

    ``partition``: the partition (with pools: the pools' partitions joined by commas, where a
    job waits held until it is released on one of them). ``bin_dir``: where ``sbatch``,
    ``scontrol``, ... live (None: ``PATH``); ``slurm_conf``: the ``SLURM_CONF`` the commands
    see (None: Slurm's default). ``gpu_models``: the node features that name a GPU model
    (empty: a node's features are its model, one each).
    """

    partition: str
    bin_dir: Path | None = None
    slurm_conf: Path | None = None
    timeout_s: float = 30.0
    poll_seconds: float = 60.0
    gpu_models: tuple[str, ...] = ()
    #: A released job that has not started after this long failed to start: back to the queue.
    start_grace_s: float = 120.0
    #: The config's pools, in ``cluster.pools``' order (empty: one pool, the partition).
    pools: tuple[SlurmPool, ...] = ()

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(p for p in self.partition.split(",") if p)


SECTION_KEYS = frozenset({"command", "script", "account", "qos", "time_limit_minutes", "job_id"})
MAX_TIME_LIMIT_MINUTES = 365 * 24 * 60


@dataclass(frozen=True, slots=True)
class BatchSection:
    """A job spec's ``slurm:`` section, checked: what the job runs, and as whom."""

    command: str | None = None
    script: Path | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_minutes: int | None = None


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
