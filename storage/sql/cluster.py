"""The cluster (its size, horizon and down windows) and the real-time apps with their profiles."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import (
    delete,
    select,
)

from contract.records import (
    App,
    Cluster,
    DownWindowRecord,
    GpuMapReading,
)
from storage.tables import (
    AppRow,
    ClusterRow,
    DownWindowRow,
    GpuMapRow,
    ProfileRow,
    table_of,
)

if TYPE_CHECKING:
    pass

from storage.sql.engine import SqlBase

log = logging.getLogger(__name__)

# The reads a plan and the served status make every time, built once (read on bare connections,
# SqlBase._reading: building a query and ORM objects cost more than running it).
_CLUSTER = select(table_of(ClusterRow)).where(ClusterRow.id == 1)
_DOWN_WINDOWS = (
    select(table_of(DownWindowRow))
    .where(DownWindowRow.cluster_id == 1)
    .order_by(DownWindowRow.gpu, DownWindowRow.starts_at, DownWindowRow.id)
)
_GPU_MAP = select(table_of(GpuMapRow)).order_by(GpuMapRow.position)
_APPS = select(table_of(AppRow)).order_by(AppRow.id)


class ClusterStore(SqlBase):
    """The cluster row, its down windows, the apps and their demand profiles."""

    # -- cluster and apps ----------------------------------------------------------------
    def cluster(self) -> Cluster | None:
        with self._reading() as connection:
            row = connection.execute(_CLUSTER).first()
            if row is None:
                return None
            windows = connection.execute(_DOWN_WINDOWS)
            return Cluster(
                gpus=row.gpus,
                step_minutes=row.step_minutes,
                horizon_steps=row.horizon_steps,
                decay=row.decay,
                rt_penalty=row.rt_penalty,
                down=tuple(DownWindowRecord(w.gpu, w.starts_at, w.ends_at) for w in windows),
            )

    def save_cluster(self, cluster: Cluster) -> None:
        with self._session() as session:
            session.execute(delete(DownWindowRow).where(DownWindowRow.cluster_id == 1))
            session.merge(
                ClusterRow(
                    id=1,
                    gpus=cluster.gpus,
                    step_minutes=cluster.step_minutes,
                    horizon_steps=cluster.horizon_steps,
                    decay=cluster.decay,
                    rt_penalty=cluster.rt_penalty,
                )
            )
            session.flush()  # the cluster row before the windows that refer to it
            session.add_all(
                DownWindowRow(cluster_id=1, gpu=w.gpu, starts_at=w.start, ends_at=w.end) for w in cluster.down
            )

    def apps(self) -> list[App]:
        with self._reading() as connection:
            return [
                App(r.id, r.priority, r.swap_cap, r.requests_per_gpu_hour, r.headroom)
                for r in connection.execute(_APPS)
            ]

    def save_app(self, app: App) -> None:
        with self._session() as session:
            session.merge(
                AppRow(
                    id=app.id,
                    priority=app.priority,
                    swap_cap=app.swap_cap,
                    requests_per_gpu_hour=app.requests_per_gpu_hour,
                    headroom=app.headroom,
                )
            )

    def profile(self, app: str) -> bytes | None:
        with self._session(read_only=True) as session:
            row = session.get(ProfileRow, app)
            return None if row is None else bytes(row.blob)

    def save_profile(self, app: str, blob: bytes, *, through: datetime) -> None:
        with self._session() as session:
            session.merge(ProfileRow(app=app, blob=blob, through=through))

    def profile_through(self, app: str) -> datetime | None:
        with self._session(read_only=True) as session:
            return session.scalar(select(ProfileRow.through).where(ProfileRow.app == app))

    # -- the partition's GPU map -----------------------------------------------------------
    def gpu_map(self) -> GpuMapReading | None:
        with self._reading() as connection:
            rows = connection.execute(_GPU_MAP).all()
        if not rows:
            return None
        return GpuMapReading(
            partition=rows[0].partition,
            nodes=tuple(r.node for r in rows),
            gpus_per_node=rows[0].gpus,
            read_at=rows[0].read_at,
        )

    def save_gpu_map(self, reading: GpuMapReading) -> None:
        with self._session() as session:
            session.execute(delete(GpuMapRow))
            session.add_all(
                GpuMapRow(
                    position=k,
                    node=node,
                    first_gpu=k * reading.gpus_per_node,
                    gpus=reading.gpus_per_node,
                    partition=reading.partition,
                    read_at=reading.read_at,
                )
                for k, node in enumerate(reading.nodes)
            )
