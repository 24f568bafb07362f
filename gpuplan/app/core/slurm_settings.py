"""How gpuplan reaches a Slurm cluster: the ``slurm:`` section of the daemon's config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
