"""A cluster of two GPU models in Slurm: its pools read both ways, jobs and replicas on their pool.

The fixture cluster has two nodes of 4 fake GPUs: ``node0`` is an A100 node and ``node1`` an
H100 node (their features), both in partition ``main``, and each alone in its model's
partition (``gpu-a100``, ``gpu-h100``). The config lists ``h100`` first, so the H100 pool is
GPU ids 0-3 on ``node1`` and the A100 pool ids 4-7 on ``node0``: a plan's id is its pool's
first GPU plus an offset, which the executor maps back to that pool's node and device.
Each test runs with the pools read as one partition per pool, and as the node features of
the shared partition.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.errors import InputError
from contract.records import Cluster, JobState
from gpuplan.app.adapters.executors.slurm import SlurmExecutor
from gpuplan.app.adapters.slurm.batch import parse_comment
from gpuplan.app.adapters.slurm.client import RUNNING, BatchRequest, Placement, gres_indices
from gpuplan.app.adapters.slurm.cluster import GpuMap, PooledMap, read_cluster
from gpuplan.app.core.config import ServiceConfig, load_config
from gpuplan.app.cycle.reconcile import reconcile
from gpuplan.app.jobs.submit import submit
from gpuplan.app.lab.seed import ensure_service
from storage.factory import open_store
from tests.app.adapters.test_slurm_executor import FEATURES, SlurmService
from tests.service_fixtures import _in_tmp_path, models_dir, run_cli
from tests.slurm import SlurmServer
from tests.waiting import wait_until

__all__ = ["_in_tmp_path", "models_dir"]

HOUR = timedelta(hours=1)
#: How each layout names the pools' places in Slurm: the pools' keys, and the slurm section's.
LAYOUTS: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "partition per pool": ([{"partition": "gpu-h100"}, {"partition": "gpu-a100"}], {}),
    "features of one partition": ([{}, {}], {"partition": "main"}),
}
POOLS = [{"name": "h100", "gpu_model": "h100", "gpus": 4}, {"name": "a100", "gpu_model": "a100", "gpus": 4}]


def write_config(
    folder: Path,
    slurm: SlurmServer,
    layout: str,
    *,
    pools: list[dict[str, Any]] | None = None,
    apps: list[dict[str, Any]] | None = None,
) -> Path:
    """A daemon config of the two pools on the fixture, laid out as ``layout``."""
    places, section = LAYOUTS[layout]
    listed = [{**place, **pool} for pool, place in zip(pools or POOLS, places, strict=True)]
    document = {
        "cluster": {"pools": listed},
        "apps": apps or [],
        "plan_budget_ms": 200.0,
        "plan_wall_clock": False,
        "review_every_hours": None,
        "models_dir": str(folder / "models"),
        "executor": "slurm",
        "slurm": {"slurm_conf": str(slurm.conf), "timeout_s": 20.0, **section},
    }
    path = folder / "gpuplan.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="module")
def two_models() -> Iterator[SlurmServer]:
    """munged, slurmctld and two slurmd: node0 an A100 node, node1 an H100 node."""
    server = SlurmServer.start(gpus_per_node=4, models=("a100", "h100"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mixed(two_models: SlurmServer) -> Iterator[SlurmServer]:
    """The two-model cluster with no job and every node idle, before and after."""
    two_models.reset()
    yield two_models
    two_models.reset()


@pytest.fixture(params=sorted(LAYOUTS))
def layout(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- the GPU map of pools, without Slurm ---------------------------------------------------------

EIGHTS_AND_FOURS = PooledMap(
    (
        GpuMap(("n0", "n1"), 8, first_gpu=0, pool="h100", partition="gpu-h100"),
        GpuMap(("n2", "n3"), 4, first_gpu=16, pool="a100", partition="gpu", feature="a100"),
    )
)


def test_a_pools_gpu_ids_start_at_its_first_gpu_on_its_own_nodes() -> None:
    assert EIGHTS_AND_FOURS.gpus == 24
    assert EIGHTS_AND_FOURS.gpus_per_node == 0  # the pools' nodes differ: no one G
    assert EIGHTS_AND_FOURS.gpu("n3", 1) == 21
    assert EIGHTS_AND_FOURS.locate(21) == ("n3", 1)
    assert EIGHTS_AND_FOURS.node_gpus("n2") == (16, 17, 18, 19)
    assert EIGHTS_AND_FOURS.placement([21, 22]) == Placement(
        nodes=("n3",), gpus=(1, 2), partition="gpu", constraint="a100"
    )
    assert EIGHTS_AND_FOURS.placement(range(8, 16)) == Placement(
        nodes=("n1",), gpus_per_node=8, partition="gpu-h100"
    )
    assert EIGHTS_AND_FOURS.describe() == (
        "pool h100 (gpu-h100): n0 0-7, n1 8-15; pool a100 (gpu, feature a100): n2 16-19, n3 20-23"
    )
    with pytest.raises(ValueError, match=re.escape("span pools ['a100', 'h100']")):
        EIGHTS_AND_FOURS.placement([15, 16])
    with pytest.raises(ValueError, match=re.escape("GPU 24 is not in this cluster (0 .. 23)")):
        EIGHTS_AND_FOURS.locate(24)


# -- the config, without Slurm -------------------------------------------------------------------


def _load(tmp_path: Path, pools: list[dict[str, Any]], slurm: dict[str, Any] | None) -> ServiceConfig:
    document: dict[str, Any] = {"cluster": {"pools": pools}, "apps": []}
    if slurm is not None:
        document["slurm"] = slurm
    path = tmp_path / "gpuplan.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_config(path)


def test_the_config_places_each_pool_in_slurm(tmp_path: Path) -> None:
    by_partition = _load(
        tmp_path, [{**POOLS[0], "partition": "gpu-h100"}, {**POOLS[1], "partition": "gpu-a100"}], {}
    )
    assert by_partition.slurm is not None
    assert by_partition.slurm.partition == "gpu-h100,gpu-a100"  # held jobs wait on either
    assert [(p.pool, p.partition, p.feature, p.gpus) for p in by_partition.slurm.pools] == [
        ("h100", "gpu-h100", None, 4),
        ("a100", "gpu-a100", None, 4),
    ]
    by_feature = _load(tmp_path, [POOLS[0], {**POOLS[1], "feature": "a100-80gb"}], {"partition": "gpu"})
    assert by_feature.slurm is not None and by_feature.slurm.partition == "gpu"
    assert [(p.partition, p.feature) for p in by_feature.slurm.pools] == [
        ("gpu", "h100"),
        ("gpu", "a100-80gb"),
    ]
    assert [p.gpus for p in by_feature.pools] == [4, 4]  # the pools themselves are the scenario's


@pytest.mark.parametrize(
    ("pools", "slurm", "message"),
    [
        (
            [{**POOLS[0], "partition": "gpu-h100"}, POOLS[1]],
            None,
            "`cluster.pools[0].partition` must be absent without a `slurm:` section; got 'gpu-h100'.",
        ),
        (
            [{**POOLS[0], "partition": "gpu-h100"}, POOLS[1]],
            {},
            (
                "`cluster.pools[1].partition` must be the Slurm partition of the pool (or slurm.partition, "
                "shared by the pools); got 'missing'."
            ),
        ),
        (
            [{**POOLS[0], "feature": "x"}, {**POOLS[1], "feature": "x"}],
            {"partition": "gpu"},
            "`cluster.pools[1].feature` must be a node feature of partition 'gpu' that no other pool uses; got 'x'.",
        ),
        (
            [{**POOLS[0], "partition": "gpu"}, {**POOLS[1], "partition": "gpu", "feature": "h100"}],
            {},
            (
                "`cluster.pools[1].feature` must be a node feature of partition 'gpu' that no other pool uses; "
                "got 'h100'."
            ),
        ),
    ],
    ids=[
        "a partition without slurm",
        "a pool without a partition",
        "one feature twice",
        "a feature another pool takes by default",
    ],
)
def test_a_pool_placed_in_slurm_wrongly_is_one_line(
    tmp_path: Path, pools: list[dict[str, Any]], slurm: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(InputError) as raised:
        _load(tmp_path, pools, slurm)
    assert str(raised.value).endswith(message)
    assert "\n" not in str(raised.value)


# -- against the two-model cluster ---------------------------------------------------------------


def now() -> datetime:
    return datetime.now(UTC)


@pytest.mark.slurm
def test_the_pools_are_read_from_slurm_in_the_configs_order(
    mixed: SlurmServer, tmp_path: Path, layout: str
) -> None:
    config = load_config(write_config(tmp_path, mixed, layout))
    assert config.slurm is not None
    executor = SlurmExecutor.from_config(config)
    view = read_cluster(executor.client, config.slurm, now())
    gpu_map = view.gpu_map
    assert isinstance(gpu_map, PooledMap)
    assert [(m.pool, m.nodes, m.first_gpu, m.gpus) for m in gpu_map.maps] == [
        ("h100", ("node1",), 0, 4),
        ("a100", ("node0",), 4, 4),
    ]
    assert view.model == "h100+a100"
    assert view.cluster(Cluster(gpus=8)).gpus == 8
    # GPU 5 is the A100 pool's second: node0's IDX 1, asked of the pool's partition or feature.
    placement = gpu_map.placement([5])
    assert (placement.nodes, placement.gpus) == (("node0",), (1,))
    if layout == "partition per pool":
        assert (placement.partition, placement.constraint) == ("gpu-a100", None)
    else:
        assert (placement.partition, placement.constraint) == ("main", "a100")
    # Work gpuplan did not start is pinned on the global ids of its pool's GPUs.
    for node, device, partition in (("node1", 2, "gpu-h100"), ("node0", 1, "gpu-a100")):
        shared = "main" if layout == FEATURES_OF_MAIN else partition
        request = BatchRequest(
            name="theirs", partition=shared, command="sleep 60", hold=False, time_limit_minutes=90,
            placement=Placement(nodes=(node,), gpus=(device,)),
        )  # fmt: skip
        executor.client.submit(request)

    def both_running() -> bool:
        jobs = executor.client.jobs(config.slurm.partition)  # type: ignore[union-attr]
        return sum(job.state == RUNNING for job in jobs) == 2

    wait_until(both_running, "the two foreign jobs RUNNING", timeout_s=30.0, every_s=0.1)
    foreign = read_cluster(executor.client, config.slurm, now()).foreign
    assert sorted(work.gpus for work in foreign) == [(2,), (5,)]  # node1's IDX 2, node0's IDX 1


def wait_running(service: SlurmService, slurm_id: int) -> None:
    def started() -> bool:
        job = service.executor.client.job(slurm_id)
        return job is not None and job.state == RUNNING

    wait_until(started, f"Slurm job {slurm_id} RUNNING", timeout_s=30.0, every_s=0.1)


def shown(service: SlurmService, slurm_id: int) -> dict[str, str]:
    """``scontrol show job -d``'s partition, features, node list and per-node GRES of one job."""
    text = service.slurm.run("scontrol", "show", "job", "-d", "--oneliner", str(slurm_id))
    fields = dict(re.findall(r"\b(Partition|Features|NodeList)=(\S+)", text))
    (detail,) = re.findall(r"\bNodes=node\d+ CPU_IDs=\S+ Mem=\S+ GRES=(\S+)", text)
    return {**fields, "GRES": detail}


#: The two ways an app names where it serves: its one pool, or its models with their rates
#: (the A100s serve twice the H100s' requests per GPU-hour here, so it needs fewer of them).
APP_PLACES: dict[str, dict[str, Any]] = {
    "pool": {"requests_per_gpu_hour": 100.0, "pool": "a100"},
    "gpu_models": {"gpu_models": {"h100": 50.0, "a100": 100.0}},
}


@pytest.fixture(params=sorted(APP_PLACES))
def app_place(request: pytest.FixtureRequest) -> dict[str, Any]:
    return APP_PLACES[str(request.param)]


@pytest.fixture
def pooled(
    mixed: SlurmServer, sqlite_url: str, tmp_path: Path, layout: str, app_place: dict[str, Any]
) -> Iterator[SlurmService]:
    traffic = tmp_path / "chat.csv"
    end = now().replace(minute=0, second=0, microsecond=0)
    hours = [end - k * HOUR for k in range(28 * 24, 0, -1)]
    traffic.write_text("hour,requests\n" + "".join(f"{h:%Y-%m-%d %H:%M:%S},100.0\n" for h in hours))
    chat = {
        "id": "chat", "priority": 90, "swap_cap": 2, "traffic": str(traffic),
        "replica_command": "sleep 3600", **app_place,
    }  # fmt: skip
    config = load_config(write_config(tmp_path, mixed, layout, apps=[chat]))
    store = open_store(sqlite_url)
    try:
        ensure_service(store, config, end - HOUR, from_file=True)
        executor = SlurmExecutor.from_config(config)
        executor.replica_start_wait_s = 10.0
        yield SlurmService(store, config, executor, mixed)
    finally:
        store.close()


def expected_slurm(layout: str, pool: str) -> dict[str, str]:
    """What Slurm shows of a job released on ``pool``: its partition and its features."""
    if layout == "partition per pool":
        return {"Partition": f"gpu-{pool}", "Features": "(null)"}
    return {"Partition": "main", "Features": pool}


@pytest.mark.slurm
def test_a_pooled_cycle_releases_each_job_on_its_pools_gpus_and_the_replica_on_its_apps_pool(
    pooled: SlurmService, layout: str, app_place: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpuplan.cluster")
    at = now().replace(second=0, microsecond=0)
    hour = at.replace(minute=0)
    spec = {"kind": "training", "priority": 50, "gpus": 2, "hours": 3.0, **FEATURES}
    # Two jobs per model: left to choose, all four would wait for the faster H100s.
    for job_id, model in (("train-a", "h100"), ("train-b", "h100"), ("train-c", "a100"), ("train-d", "a100")):
        job = {**spec, "id": job_id, "gpu_models": [model], "slurm": {"command": "sleep 300"}}
        submit(pooled.store, job, at, pooled.config, replan=False, held=pooled.executor)
    pooled.cycle(at)
    where = {"h100": "gpu-h100", "a100": "gpu-a100"}
    if layout == FEATURES_OF_MAIN:
        where = {pool: f"main, feature {pool}" for pool in where}
    partition = pooled.executor.settings.partition
    assert [r.getMessage() for r in caplog.records if r.name == "gpuplan.cluster"] == [
        (
            f"Slurm partition {partition}: 8 GPUs (h100+a100), GPU id = node's first + IDX: "
            f"pool h100 ({where['h100']}): node1 0-3; pool a100 ({where['a100']}): node0 4-7"
        )
    ]
    stored_map = pooled.store.gpu_map()  # status's map: node k of the pools' order holds k*4 onwards
    assert stored_map is not None and (stored_map.nodes, stored_map.gpus_per_node) == (("node1", "node0"), 4)
    committed = pooled.committed(hour)
    chat = committed["chat"]
    # The app serves on one pool: its own (the A100s), or the one of its models the plan chose.
    app_pool, app_node, app_first = ("a100", "node0", 4) if min(chat) >= 4 else ("h100", "node1", 0)
    assert chat and all(app_first <= gpu < app_first + 4 for gpu in chat)
    assert app_pool == "a100" or "gpu_models" in app_place
    # Four 2-GPU jobs and the app on 8 GPUs in two pools of 4: a job waits, and each of the
    # others lies inside one pool.
    batch = {job: gpus for job, gpus in committed.items() if job != "chat"}
    assert 2 <= len(batch) <= 3 and all(max(g) < 4 or min(g) >= 4 for g in batch.values())
    pools_used = set()
    for job_id, gpus in sorted(batch.items()):
        stored = pooled.store.job(job_id)
        assert stored is not None and stored.state is JobState.RUNNING
        pool, node, first = ("h100", "node1", 0) if max(gpus) < 4 else ("a100", "node0", 4)
        pools_used.add(pool)
        wait_running(pooled, stored.spec["slurm"]["job_id"])
        seen = shown(pooled, stored.spec["slurm"]["job_id"])
        assert {k: seen[k] for k in ("Partition", "Features")} == expected_slurm(layout, pool), job_id
        assert seen["NodeList"] == node
        assert gres_indices(seen["GRES"]) == tuple(g - first for g in gpus), job_id
        assert pooled.shown_gpus(stored.spec["slurm"]["job_id"]) == gpus  # read back as global ids
    assert pools_used == {"h100", "a100"}
    replicas = {
        int(tag["gpu"]): job.id
        for job in pooled.executor.client.jobs(pooled.executor.settings.partition)
        if (tag := parse_comment(job.comment)) and tag.get("app") == "chat" and not job.finished
    }
    assert sorted(replicas) == sorted(chat)
    for gpu, slurm_id in replicas.items():
        wait_running(pooled, slurm_id)
        seen = shown(pooled, slurm_id)
        assert {k: seen[k] for k in ("Partition", "Features")} == expected_slurm(layout, app_pool)
        assert (seen["NodeList"], gres_indices(seen["GRES"])) == (app_node, (gpu - app_first,))


PARTITIONS, FEATURES_OF_MAIN = sorted(LAYOUTS, reverse=True)
COUNT_UNLIKE_SLURMS = (
    "`cluster.pools[0].gpus` must be Slurm's count of pool h100: 4 (1 node x 4, partition {}); got 8."
)
#: (layout, edits of the two pools, the one line): a pool that Slurm does not have as configured.
MISTAKES: dict[str, tuple[str, list[dict[str, Any]], str]] = {
    "a partition Slurm lacks": (
        PARTITIONS,
        [{}, {"partition": "gpu-l40s"}],
        (
            "`cluster.pools[1].partition` must be a Slurm partition with nodes (sinfo lists none in "
            "'gpu-l40s'); got 'gpu-l40s'."
        ),
    ),
    "a feature Slurm lacks": (
        FEATURES_OF_MAIN,
        [{}, {"feature": "l40s"}],
        (
            "`cluster.pools[1].feature` must be a feature of nodes of partition 'main' (sinfo lists "
            "['a100', 'h100']); got 'l40s'."
        ),
    ),
    "a count unlike Slurm's": (PARTITIONS, [{"gpus": 8}, {}], COUNT_UNLIKE_SLURMS.format("'gpu-h100'")),
    "a count unlike Slurm's, by feature": (
        FEATURES_OF_MAIN,
        [{"gpus": 8}, {}],
        COUNT_UNLIKE_SLURMS.format("'main' with feature 'h100'"),
    ),
}


@pytest.mark.slurm
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_pool_slurm_does_not_have_is_one_line_and_nothing_is_stored(
    mixed: SlurmServer, sqlite_url: str, tmp_path: Path, mistake: str
) -> None:
    layout, edits, message = MISTAKES[mistake]
    pools = [{**pool, **edit} for pool, edit in zip(POOLS, edits, strict=True)]
    config = load_config(write_config(tmp_path, mixed, layout, pools=pools))
    store = open_store(sqlite_url)
    try:
        at = now()
        ensure_service(store, config, at - HOUR, from_file=True)
        before = store.cluster()
        with pytest.raises(InputError) as raised:
            reconcile(SlurmExecutor.from_config(config), store, at)
        assert str(raised.value) == message
        assert store.cluster() == before and store.gpu_map() is None  # nothing of the reading stored
        assert store.commit(at.replace(minute=0, second=0, microsecond=0)) is None
    finally:
        store.close()


@pytest.mark.slurm
def test_the_daemon_runs_a_pooled_slurm_cycle_and_refuses_a_count_unlike_slurms(
    mixed: SlurmServer, tmp_path: Path, models_dir: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    config = write_config(tmp_path, mixed, FEATURES_OF_MAIN)
    store = open_store(db)
    try:
        at = now()
        ensure_service(store, load_config(config), at, from_file=True)
        spec = {"id": "train-a", "kind": "training", "priority": 50, "gpus": 4, "hours": 3.0, **FEATURES}
        loaded = load_config(config)
        held = SlurmExecutor.from_config(loaded)
        submit(store, {**spec, "slurm": {"command": "sleep 300"}}, at, loaded, replan=False, held=held)
    finally:
        store.close()
    once = ("daemon", "--once", "--config", config, "--db", db, "--models", models_dir)
    result = run_cli(*once)
    assert result.code == 0, result.err
    store = open_store(db)
    try:
        job = store.job("train-a")
        assert job is not None and job.state is JobState.RUNNING and job.first_gpu in (0, 4)
        slurm_id = job.spec["slurm"]["job_id"]
    finally:
        store.close()
    pool, node = ("h100", "node1") if job.first_gpu == 0 else ("a100", "node0")
    shown = mixed.run("scontrol", "show", "job", "-d", "--oneliner", str(slurm_id))
    assert f" Features={pool} " in shown and f" ReqNodeList={node} " in shown
    # The same database on a config whose H100 pool Slurm does not have 8 GPUs of: one line, exit 1.
    wrong = write_config(tmp_path, mixed, FEATURES_OF_MAIN, pools=[{**POOLS[0], "gpus": 8}, POOLS[1]])
    refused = run_cli(*once[:3], wrong, *once[4:])
    assert refused.code != 0
    errors = [line for line in refused.err.splitlines() if "cluster.pools" in line]
    assert len(errors) == 1 and errors[0].endswith(COUNT_UNLIKE_SLURMS.format("'main' with feature 'h100'"))
