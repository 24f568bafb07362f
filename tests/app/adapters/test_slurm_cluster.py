"""The cluster source against the fixture: GPU ids from nodes, down hours, the model, foreign work."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from contract.errors import InputError
from contract.records import Cluster, DownWindowRecord
from gpuplan.app.adapters.slurm.client import BatchRequest, Placement, SlurmClient
from gpuplan.app.adapters.slurm.cluster import GpuMap, ceil_hour, read_cluster
from gpuplan.app.core.config import load_config
from storage.factory import open_store
from tests.app.adapters.test_slurm_client import running, wait_for
from tests.slurm import PARTITION, SlurmServer

TWO_NODES = GpuMap(("node0", "node1"), 8)


def test_node_k_holds_gpu_ids_k_times_g_onwards() -> None:
    assert TWO_NODES.gpus == 16
    assert TWO_NODES.gpu("node1", 3) == 11
    assert TWO_NODES.locate(11) == ("node1", 3)
    assert TWO_NODES.node_gpus("node1") == tuple(range(8, 16))
    with pytest.raises(ValueError, match=re.escape("GPU 16 is not in this cluster (0 .. 15)")):
        TWO_NODES.locate(16)


def test_a_block_becomes_exact_gpus_on_its_node_or_whole_nodes() -> None:
    assert TWO_NODES.placement([11, 13]) == Placement(nodes=("node1",), gpus=(3, 5))
    assert TWO_NODES.placement(range(8, 16)) == Placement(nodes=("node1",), gpus_per_node=8)
    assert TWO_NODES.placement(range(16)) == Placement(nodes=("node0", "node1"), gpus_per_node=8)
    with pytest.raises(ValueError, match="span nodes"):
        TWO_NODES.placement([7, 8])


def test_ceil_hour_keeps_whole_hours() -> None:
    hour = datetime(2026, 12, 1, 9, tzinfo=UTC)
    assert ceil_hour(hour) == hour
    assert ceil_hour(hour + timedelta(seconds=1)) == hour + timedelta(hours=1)


def test_the_slurm_section_is_read_with_paths_from_the_configs_folder(tmp_path: Path) -> None:
    config = tmp_path / "gpuplan.yaml"
    config.write_text("slurm:\n  partition: gpu\n  slurm_conf: etc/slurm.conf\n  gpu_models: [h100]\n")
    slurm = load_config(config).slurm
    assert slurm is not None
    assert (slurm.partition, slurm.slurm_conf, slurm.gpu_models) == (
        "gpu",
        tmp_path / "etc/slurm.conf",
        ("h100",),
    )
    assert (slurm.bin_dir, slurm.poll_seconds) == (None, 60.0)
    config.write_text("slurm:\n  slurm_conf: /etc/slurm/slurm.conf\n")
    with pytest.raises(
        InputError, match=re.escape("`slurm.partition` must be the name of the Slurm partition")
    ):
        load_config(config)
    config.write_text("slurm:\n  partition: gpu\n  timeout: 3\n")
    with pytest.raises(InputError, match=re.escape("`slurm.timeout` must be one of")):
        load_config(config)


# -- against the cluster -------------------------------------------------------------------------


@pytest.fixture
def client(slurm: SlurmServer) -> SlurmClient:
    return SlurmClient(slurm.settings())


def now() -> datetime:
    return datetime.now(UTC)


@pytest.mark.slurm
def test_the_partition_gives_gpu_ids_in_node_order_and_its_model(
    slurm: SlurmServer, client: SlurmClient
) -> None:
    view = read_cluster(client, slurm.settings(), now())
    assert view.gpu_map == TWO_NODES
    assert view.model == "h100"
    assert (view.down, view.foreign) == ((), ())
    assert view.cluster(Cluster(gpus=1, horizon_steps=12)) == Cluster(gpus=16, horizon_steps=12)


@pytest.mark.slurm
def test_a_job_on_g3_and_g5_of_node1_holds_gpu_ids_11_and_13(client: SlurmClient, slurm: SlurmServer) -> None:
    job_id = client.submit(
        BatchRequest(
            name="pair",
            partition=PARTITION,
            command="sleep 30",
            hold=False,
            placement=TWO_NODES.placement([11, 13]),
        )
    )
    job = wait_for(lambda: running(client, job_id), "the job RUNNING")
    assert dict(job.gpus) == {"node1": (3, 5)}  # type: ignore[attr-defined]
    assert TWO_NODES.gpus_of(job) == (11, 13)  # type: ignore[arg-type]


@pytest.mark.slurm
def test_a_drained_or_down_node_makes_its_gpus_down_from_this_hour(
    slurm: SlurmServer, client: SlurmClient
) -> None:
    slurm.run("scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=fan")
    at = now()
    hour = at.replace(minute=0, second=0, microsecond=0)
    view = read_cluster(client, slurm.settings(), at)
    assert view.down == tuple(DownWindowRecord(gpu, hour, None) for gpu in range(8, 16))
    slurm.run("scontrol", "update", "NodeName=node1", "State=RESUME")
    slurm.run("scontrol", "update", "NodeName=node0", "State=DOWN", "Reason=gone")
    assert {w.gpu for w in read_cluster(client, slurm.settings(), now()).down} == set(range(8))


@pytest.mark.slurm
def test_a_maintenance_reservation_makes_its_nodes_gpus_down_for_its_hours(
    slurm: SlurmServer, client: SlurmClient
) -> None:
    at = now()
    start = (at + timedelta(hours=3)).replace(minute=30, second=0, microsecond=0)
    slurm.run(
        "scontrol", "create", "reservation", "ReservationName=maint", f"StartTime={start:%Y-%m-%dT%H:%M:%S}",
        "Duration=60", "Nodes=node1", "Flags=MAINT", "Users=root",
    )  # fmt: skip
    slurm.run(
        "scontrol", "create", "reservation", "ReservationName=plain", "StartTime=now+1hour",
        "Duration=60", "Nodes=node0", "Users=root",
    )  # fmt: skip
    view = read_cluster(client, slurm.settings(), at)
    first, last = start.replace(minute=0), start.replace(minute=0) + timedelta(hours=2)
    assert view.down == tuple(DownWindowRecord(gpu, first, last) for gpu in range(8, 16))


@pytest.mark.slurm
def test_work_gpuplan_did_not_start_is_pinned_where_it_runs(slurm: SlurmServer, client: SlurmClient) -> None:
    foreign = client.submit(
        BatchRequest(
            name="theirs", partition=PARTITION, command="sleep 60", hold=False, time_limit_minutes=90,
            placement=Placement(nodes=("node0",), gpus=(2,)),
        )
    )  # fmt: skip
    ours = client.submit(
        BatchRequest(
            name="ours", partition=PARTITION, command="sleep 60", hold=False, comment='gpuplan:{"id": "a"}',
            placement=Placement(nodes=("node0",), gpus=(4,)),
        )
    )  # fmt: skip
    started = client.submit(
        BatchRequest(
            name="started", partition=PARTITION, command="sleep 60", hold=False,
            placement=Placement(nodes=("node1",), gpus=(0,)),
        )
    )  # fmt: skip
    for job_id in (foreign, ours, started):
        wait_for(lambda job_id=job_id: running(client, job_id), "the jobs RUNNING")  # type: ignore[misc]
    at = now()
    view = read_cluster(client, slurm.settings(), at, ours={started})
    (work,) = view.foreign
    assert (work.job_id, work.name, work.gpus, work.user) == (foreign, "theirs", (2,), "root")
    job = client.job(foreign)
    assert job is not None and job.end is not None
    assert work.until == ceil_hour(job.end)
    hour = at.replace(minute=0, second=0, microsecond=0)
    assert view.cluster(Cluster(gpus=16)).down == (DownWindowRecord(2, hour, work.until),)


@pytest.mark.slurm
def test_a_partition_of_mixed_models_is_refused_naming_them(slurm: SlurmServer, client: SlurmClient) -> None:
    slurm.run("scontrol", "update", "NodeName=node1", "AvailableFeatures=a100", "ActiveFeatures=a100")
    message = "`slurm.partition 'main'` must be nodes of one GPU model (one gpuplan cluster per model); got {'a100': ['node1'], 'h100': ['node0']}."
    with pytest.raises(InputError, match=re.escape(message)):
        read_cluster(client, slurm.settings(), now())
    slurm.run(
        "scontrol", "update", "NodeName=node1", "AvailableFeatures=h100,fast", "ActiveFeatures=h100,fast"
    )
    with pytest.raises(InputError, match=re.escape("exactly one feature per node naming its GPU model")):
        read_cluster(client, slurm.settings(), now())
    assert read_cluster(client, slurm.settings(gpu_models=("h100", "a100")), now()).model == "h100"


@pytest.mark.slurm
def test_an_unknown_partition_is_refused(slurm: SlurmServer, client: SlurmClient) -> None:
    with pytest.raises(InputError, match=re.escape("`slurm.partition` must be a partition with nodes")):
        read_cluster(client, slurm.settings(partition="nowhere"), now())


def test_executor_slurm_needs_the_slurm_section(tmp_path: Path) -> None:
    from gpuplan.app.adapters.executors.registry import make_executor

    config = tmp_path / "gpuplan.yaml"
    config.write_text("executor: slurm\ncluster:\n  gpus: 16\napps: []\n")
    store = open_store("sqlite://")
    try:
        with pytest.raises(InputError, match=re.escape("`slurm` must be a section naming the partition")):
            make_executor(load_config(config), store)
        config.write_text("executor: slurm\ncluster:\n  gpus: 16\napps: []\nslurm:\n  partition: main\n")
        assert type(make_executor(load_config(config), store)).__name__ == "SlurmExecutor"
    finally:
        store.close()
