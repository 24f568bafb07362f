"""The cluster as Slurm sees it: GPU ids, the model, what is down, what others run.

- The configured partition's nodes, in name order (numbers read as numbers), give the GPU
  ids: node k's GPUs are ``k*G ... k*G+G-1``, so a buddy-aligned block of at most G GPUs
  stays inside one node, and GPU index i on a node is its typed GRES ``gpu:gi:1``.
- A node that is DOWN or DRAIN(ED/ING) makes its GPUs down from this hour until further
  notice; a maintenance reservation (``Flags=MAINT``) makes them down for its hours.
- One gpuplan cluster is one partition of one GPU model, read from the node's features
  (the GRES type names the GPU's index in this layout); a partition of mixed models, or
  of nodes that do not have the same GPU count in the exact-GPU layout, is refused.
- A cluster of pools (``cluster.pools``, :class:`~gpuplan.app.core.slurm_settings.SlurmPool`)
  is one partition per pool, or the nodes of a shared partition that carry the pool's
  feature: the pools lie side by side in the config's order, pool p's GPUs from its
  ``first_gpu`` on, each laid out as above on its own nodes (its own G). Slurm's GPU count
  of each pool must be the config's; a pool with no nodes, a node in two pools, or another
  count is refused (:class:`InputError`, before anything is stored).
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
from gpuplan.app.core.slurm_settings import COMMENT_PREFIX, SlurmPool, SlurmSettings


def ceil_hour(moment: datetime) -> datetime:
    floored = floor_hour(moment)
    return floored if floored == moment else floored + STEP


@dataclass(frozen=True, slots=True)
class GpuMap:
    """GPU ids <-> (node, index): node k's GPU i is id ``first_gpu + k * gpus_per_node + i``.

    One pool of a cluster of pools (``pool``) starts at its ``first_gpu``; its jobs go to its
    ``partition``, with ``--constraint=feature`` when it shares the partition with others.
    """

    nodes: tuple[str, ...]
    gpus_per_node: int
    first_gpu: int = 0
    pool: str | None = None
    partition: str | None = None
    feature: str | None = None

    @property
    def gpus(self) -> int:
        return len(self.nodes) * self.gpus_per_node

    @property
    def end_gpu(self) -> int:
        return self.first_gpu + self.gpus

    @property
    def maps(self) -> tuple[GpuMap, ...]:
        return (self,)

    def gpu(self, node: str, index: int) -> int:
        return self.first_gpu + self.nodes.index(node) * self.gpus_per_node + index

    def locate(self, gpu: int) -> tuple[str, int]:
        if not self.first_gpu <= gpu < self.end_gpu:
            raise ValueError(f"GPU {gpu} is not in this cluster ({self.first_gpu} .. {self.end_gpu - 1})")
        node, index = divmod(gpu - self.first_gpu, self.gpus_per_node)
        return self.nodes[node], index

    def describe(self) -> str:
        """Each node and its GPU ids: ``node2 0-3, node10 4-7`` (GPU id = node's first + IDX)."""
        nodes = ", ".join(
            f"{node} {self.gpu(node, 0)}-{self.gpu(node, self.gpus_per_node - 1)}" for node in self.nodes
        )
        if self.pool is None:
            return nodes
        where = self.partition if self.feature is None else f"{self.partition}, feature {self.feature}"
        return f"pool {self.pool} ({where}): {nodes}"

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
            return Placement(
                nodes=nodes,
                gpus=tuple(i for _, i in located),
                partition=self.partition,
                constraint=self.feature,
            )
        if len(located) != len(nodes) * self.gpus_per_node:
            raise ValueError(
                f"GPUs {sorted(gpus)} span nodes {list(nodes)} without filling them; Slurm can "
                "place exact GPUs on one node or whole nodes"
            )
        return Placement(
            nodes=nodes, gpus_per_node=self.gpus_per_node, partition=self.partition, constraint=self.feature
        )


@dataclass(frozen=True, slots=True)
class PooledMap:
    """The GPU map of a cluster of pools: each pool's :class:`GpuMap` (its ``first_gpu`` on),
    side by side in the config's order; the same questions as one :class:`GpuMap`."""

    maps: tuple[GpuMap, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(node for m in self.maps for node in m.nodes)

    @property
    def gpus(self) -> int:
        return sum(m.gpus for m in self.maps)

    @property
    def gpus_per_node(self) -> int:
        """G, when every pool's nodes have G GPUs (node k of :attr:`nodes` then holds ids
        ``k*G .. k*G+G-1``); 0 when the pools' nodes differ."""
        counts = {m.gpus_per_node for m in self.maps}
        return counts.pop() if len(counts) == 1 else 0

    def of_node(self, node: str) -> GpuMap:
        found = next((m for m in self.maps if node in m.nodes), None)
        if found is None:
            raise ValueError(f"node {node} is in no pool of this cluster")
        return found

    def of_gpu(self, gpu: int) -> GpuMap:
        found = next((m for m in self.maps if m.first_gpu <= gpu < m.end_gpu), None)
        if found is None:
            raise ValueError(f"GPU {gpu} is not in this cluster (0 .. {self.gpus - 1})")
        return found

    def gpu(self, node: str, index: int) -> int:
        return self.of_node(node).gpu(node, index)

    def locate(self, gpu: int) -> tuple[str, int]:
        return self.of_gpu(gpu).locate(gpu)

    def describe(self) -> str:
        return "; ".join(m.describe() for m in self.maps)

    def node_gpus(self, node: str) -> tuple[int, ...]:
        return self.of_node(node).node_gpus(node)

    def gpus_of(self, job: SlurmJob) -> tuple[int, ...]:
        return tuple(sorted(gpu for m in self.maps for gpu in m.gpus_of(job)))

    def placement(self, gpus: Sequence[int]) -> Placement:
        """Where a set of GPU ids runs, in its one pool (a block never spans two)."""
        if not gpus:
            raise ValueError("a placement needs at least one GPU")
        pools = {self.of_gpu(g) for g in gpus}
        if len(pools) != 1:
            names = sorted(str(m.pool) for m in pools)
            raise ValueError(f"GPUs {sorted(gpus)} span pools {names}; a block lies in one pool")
        return pools.pop().placement(gpus)


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
    gpu_map: GpuMap | PooledMap
    model: str  # with pools: each pool's model, joined by "+"
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
    """Read the partition (each pool's nodes) at ``now``. ``ours``: Slurm job ids gpuplan
    started or adopted."""
    nodes = client.nodes(settings.partition)
    gpu_map: GpuMap | PooledMap
    if settings.pools:
        gpu_map, model = read_pools(nodes, settings)
        nodes = [node for node in nodes if node.name in gpu_map.nodes]
    else:
        if not nodes:
            raise InputError(
                "slurm.partition", "a partition with nodes (sinfo lists none in it)", settings.partition
            )
        per_node = _gpus_per_node(nodes, f"slurm.partition {settings.partition!r}")
        gpu_map = GpuMap(tuple(n.name for n in nodes), per_node)
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


def read_pools(nodes: Sequence[SlurmNode], settings: SlurmSettings) -> tuple[PooledMap, str]:
    """Each pool of ``settings.pools`` from the partitions' ``nodes``: its GPU map (from the
    pools before it on) and its model; refused, naming ``cluster.pools[i]``, when a pool has no
    nodes, a node is in two pools, or Slurm's GPU count is not the config's."""
    maps: list[GpuMap] = []
    models: list[str] = []
    for index, pool in enumerate(settings.pools):
        name = f"cluster.pools[{index}]"
        mine = _pool_nodes(nodes, pool, name)
        where = f"partition {pool.partition!r}"
        where += "" if pool.feature is None else f" with feature {pool.feature!r}"
        taken = next((n.name for n in mine for m in maps if n.name in m.nodes), None)
        if taken is not None:
            expected = f"nodes of no other pool ({where})"
            raise InputError(f"{name}.feature", expected, f"{taken}, in another pool")
        per_node = _gpus_per_node(mine, f"{name} ({where})")
        models.append(pool.feature or _pool_model(mine, settings, pool, name))
        placed = GpuMap(
            nodes=tuple(n.name for n in mine),
            gpus_per_node=per_node,
            first_gpu=sum(m.gpus for m in maps),
            pool=pool.pool,
            partition=pool.partition,
            feature=pool.feature,
        )
        if placed.gpus != pool.gpus:
            counted = f"{placed.gpus} ({len(mine)} node{'s' * (len(mine) != 1)} x {per_node}, {where})"
            raise InputError(f"{name}.gpus", f"Slurm's count of pool {pool.pool}: {counted}", pool.gpus)
        maps.append(placed)
    return PooledMap(tuple(maps)), "+".join(models)


def _pool_model(nodes: Sequence[SlurmNode], settings: SlurmSettings, pool: SlurmPool, name: str) -> str:
    """The one GPU model of a pool's partition, from its nodes' features (as one partition's)."""
    try:
        return _model(nodes, replace(settings, partition=pool.partition))
    except InputError as error:
        expected = f"{error.expected}; or the pool's `feature`, to take the nodes of one model"
        raise InputError(f"{name}.partition {pool.partition!r}", expected, error.got) from None


def _pool_nodes(nodes: Sequence[SlurmNode], pool: SlurmPool, name: str) -> list[SlurmNode]:
    """The nodes of one pool: of its partition, with its feature; none is an error that names
    the pool's ``partition`` (Slurm has no such partition) or ``feature`` (no node has it)."""
    in_partition = [n for n in nodes if pool.partition in n.partitions]
    mine = [n for n in in_partition if pool.feature is None or pool.feature in n.features]
    if mine:
        return mine
    if pool.feature is None or not in_partition:
        expected = f"a Slurm partition with nodes (sinfo lists none in {pool.partition!r})"
        raise InputError(f"{name}.partition", expected, pool.partition)
    known = sorted({f for n in in_partition for f in n.features})
    expected = f"a feature of nodes of partition {pool.partition!r} (sinfo lists {known})"
    raise InputError(f"{name}.feature", expected, pool.feature)


def is_ours(job: SlurmJob, ours: Collection[int]) -> bool:
    return job.id in ours or job.comment.startswith(COMMENT_PREFIX)


def _foreign(
    jobs: Iterable[SlurmJob], gpu_map: GpuMap | PooledMap, ours: Collection[int]
) -> Iterable[ForeignWork]:
    for job in jobs:
        if job.state != RUNNING or is_ours(job, ours):
            continue
        gpus = gpu_map.gpus_of(job)
        if gpus:
            until = None if job.end is None or job.time_limit_minutes is None else ceil_hour(job.end)
            yield ForeignWork(job_id=job.id, name=job.name, user=job.user, gpus=gpus, until=until)


def _gpus_per_node(nodes: Sequence[SlurmNode], field_name: str) -> int:
    """G, the same on every node, each GPU its own typed GRES ``gpu:g0:1 ... gpu:g{G-1}:1``
    (``field_name``: what the nodes are, ``slurm.partition 'main'`` or a pool's)."""
    counts = {node.name: node.gpus for node in nodes}
    if len(set(counts.values())) != 1 or not next(iter(counts.values())):
        raise InputError(
            field_name,
            "nodes with the same number of GPUs (at least one)",
            counts,
        )
    per_node = next(iter(counts.values()))
    layout = {f"g{i}": 1 for i in range(per_node)}
    for node in nodes:
        if dict(node.gres) != layout:
            raise InputError(
                field_name,
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
