"""The cluster as Slurm sees it: GPU ids, the model, what is down, what others run.

- The configured partition's nodes, in name order (numbers read as numbers), give the GPU
  ids: node k's GPUs are ``k*G ... k*G+G-1``, so a buddy-aligned block of at most G GPUs
  stays inside one node, and GPU index i on a node is its typed GRES ``gpu:gi:1``.
- A node that is DOWN or DRAIN(ED/ING) makes its GPUs down from this hour until further
  notice; a maintenance reservation (``Flags=MAINT``) makes them down for its hours.
- One gpuplan cluster is one partition of one GPU model, read from the node's features
  (the GRES type names the GPU's index in this layout); a partition of mixed models, or
  of nodes that do not have the same GPU count in the exact-GPU layout, is refused.
- Work running in the partition that gpuplan did not start is pinned where it runs: its
  GPUs are down until its expected end (Slurm's ``EndTime``; until further notice when it
  has none).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from contract.errors import InputError
from contract.records import Cluster, DownWindowRecord
from gpuplan.app.adapters.slurm.client import RUNNING, Placement, SlurmClient, SlurmJob, SlurmNode
from gpuplan.app.core.bridge import STEP, floor_hour
from gpuplan.app.core.slurm_settings import COMMENT_PREFIX, SlurmSettings


def ceil_hour(moment: datetime) -> datetime:
    floored = floor_hour(moment)
    return floored if floored == moment else floored + STEP


@dataclass(frozen=True, slots=True)
class GpuMap:
    """GPU ids <-> (node, index): node k's GPU i is id ``k * gpus_per_node + i``."""

    nodes: tuple[str, ...]
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return len(self.nodes) * self.gpus_per_node

    def gpu(self, node: str, index: int) -> int:
        return self.nodes.index(node) * self.gpus_per_node + index

    def locate(self, gpu: int) -> tuple[str, int]:
        if not 0 <= gpu < self.gpus:
            raise ValueError(f"GPU {gpu} is not in this cluster (0 .. {self.gpus - 1})")
        node, index = divmod(gpu, self.gpus_per_node)
        return self.nodes[node], index

    def describe(self) -> str:
        """Each node and its GPU ids: ``node2 0-3, node10 4-7`` (GPU id = node's first + IDX)."""
        return ", ".join(
            f"{node} {k * self.gpus_per_node}-{(k + 1) * self.gpus_per_node - 1}"
            for k, node in enumerate(self.nodes)
        )

    def node_gpus(self, node: str) -> tuple[int, ...]:
        first = self.gpu(node, 0)
        return tuple(range(first, first + self.gpus_per_node))

    def gpus_of(self, job: SlurmJob) -> tuple[int, ...]:
        """The ids of the GPUs a job holds (whole nodes for an exclusive job without GRES)."""
        held: set[int] = set()
        for node in job.nodes:
            if node not in self.nodes:
                continue
            indices = job.gpus.get(node)
            if indices:
                held.update(self.gpu(node, i) for i in indices)
            elif job.exclusive:
                held.update(self.node_gpus(node))
        return tuple(sorted(held))

    def placement(self, gpus: Sequence[int]) -> Placement:
        """Where a set of GPU ids runs: exact GPUs on one node, or whole nodes.

        A set wider than a node must be whole nodes (a buddy-aligned block of a multiple
        of G GPUs is); anything else cannot be asked of Slurm and raises ValueError.
        """
        if not gpus:
            raise ValueError("a placement needs at least one GPU")
        located = [self.locate(g) for g in sorted(set(gpus))]
        nodes = tuple(dict.fromkeys(node for node, _ in located))
        if len(nodes) == 1 and len(located) < self.gpus_per_node:
            return Placement(nodes=nodes, gpus=tuple(i for _, i in located))
        if len(located) != len(nodes) * self.gpus_per_node:
            raise ValueError(
                f"GPUs {sorted(gpus)} span nodes {list(nodes)} without filling them; Slurm can "
                "place exact GPUs on one node or whole nodes"
            )
        return Placement(nodes=nodes, gpus_per_node=self.gpus_per_node)


@dataclass(frozen=True, slots=True)
class ForeignWork:
    """A running job gpuplan did not start, pinned on its GPUs until ``until`` (None: no end known)."""

    job_id: int
    name: str
    user: str
    gpus: tuple[int, ...]
    until: datetime | None


@dataclass(frozen=True)
class ClusterView:
    """One reading of the partition at ``read_at``: its GPU map and model, its down hours,
    others' work, its jobs."""

    read_at: datetime
    gpu_map: GpuMap
    model: str
    down: tuple[DownWindowRecord, ...]  # nodes down, drained or in maintenance
    foreign: tuple[ForeignWork, ...]
    jobs: tuple[SlurmJob, ...]

    def cluster(self, base: Cluster) -> Cluster:
        """``base`` (horizon, decay, ...) with Slurm's GPU count, and its down hours plus foreign work."""
        hour = floor_hour(self.read_at)
        pinned = tuple(
            DownWindowRecord(gpu=gpu, start=hour, end=work.until)
            for work in self.foreign
            for gpu in work.gpus
        )
        configured = tuple(w for w in base.down if w.gpu < self.gpu_map.gpus)
        return replace(base, gpus=self.gpu_map.gpus, down=configured + self.down + pinned)


def read_cluster(
    client: SlurmClient, settings: SlurmSettings, now: datetime, *, ours: Collection[int] = ()
) -> ClusterView:
    """Read the partition at ``now``. ``ours``: Slurm job ids gpuplan started or adopted."""
    nodes = client.nodes(settings.partition)
    if not nodes:
        raise InputError(
            "slurm.partition", "a partition with nodes (sinfo lists none in it)", settings.partition
        )
    gpu_map = GpuMap(tuple(n.name for n in nodes), _gpus_per_node(nodes, settings.partition))
    model = _model(nodes, settings)
    hour = floor_hour(now)
    down = [
        DownWindowRecord(gpu=gpu, start=hour, end=None)
        for node in nodes
        if node.unavailable
        for gpu in gpu_map.node_gpus(node.name)
    ]
    for reservation in client.reservations():
        if not reservation.maintenance or reservation.end <= now:
            continue
        for name in reservation.nodes:
            if name in gpu_map.nodes:
                down.extend(
                    DownWindowRecord(
                        gpu=gpu, start=floor_hour(reservation.start), end=ceil_hour(reservation.end)
                    )
                    for gpu in gpu_map.node_gpus(name)
                )
    jobs = tuple(client.jobs(settings.partition))
    foreign = tuple(_foreign(jobs, gpu_map, ours))
    return ClusterView(
        read_at=now, gpu_map=gpu_map, model=model, down=tuple(down), foreign=foreign, jobs=jobs
    )


def is_ours(job: SlurmJob, ours: Collection[int]) -> bool:
    return job.id in ours or job.comment.startswith(COMMENT_PREFIX)


def _foreign(jobs: Iterable[SlurmJob], gpu_map: GpuMap, ours: Collection[int]) -> Iterable[ForeignWork]:
    for job in jobs:
        if job.state != RUNNING or is_ours(job, ours):
            continue
        gpus = gpu_map.gpus_of(job)
        if gpus:
            until = None if job.end is None or job.time_limit_minutes is None else ceil_hour(job.end)
            yield ForeignWork(job_id=job.id, name=job.name, user=job.user, gpus=gpus, until=until)


def _gpus_per_node(nodes: Sequence[SlurmNode], partition: str) -> int:
    """G, the same on every node, each GPU its own typed GRES ``gpu:g0:1 ... gpu:g{G-1}:1``."""
    counts = {node.name: node.gpus for node in nodes}
    if len(set(counts.values())) != 1 or not next(iter(counts.values())):
        raise InputError(
            f"slurm.partition {partition!r}",
            "nodes with the same number of GPUs (at least one)",
            counts,
        )
    per_node = next(iter(counts.values()))
    layout = {f"g{i}": 1 for i in range(per_node)}
    for node in nodes:
        if dict(node.gres) != layout:
            raise InputError(
                f"slurm.partition {partition!r}",
                "nodes with one typed GRES per GPU (Gres=gpu:g0:1,gpu:g1:1,...; see docs/slurm.md)",
                f"{node.name}: {dict(node.gres)}",
            )
    return per_node


def _model(nodes: Sequence[SlurmNode], settings: SlurmSettings) -> str:
    """The one GPU model of the partition's nodes, from their features."""
    models: dict[str, list[str]] = {}
    for node in nodes:
        named = [f for f in node.features if not settings.gpu_models or f in settings.gpu_models]
        if len(named) != 1:
            expected = (
                f"one of {list(settings.gpu_models)} as a feature of each node"
                if settings.gpu_models
                else "exactly one feature per node naming its GPU model (or set slurm.gpu_models)"
            )
            raise InputError(f"slurm.partition {settings.partition!r}", expected, f"{node.name}: {named}")
        models.setdefault(named[0], []).append(node.name)
    if len(models) > 1:
        raise InputError(
            f"slurm.partition {settings.partition!r}",
            "nodes of one GPU model (one gpuplan cluster per model)",
            dict(sorted(models.items())),
        )
    return next(iter(models))
