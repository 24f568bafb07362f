"""The Slurm client against the real thing (tests/slurm.py): held jobs, exact GPUs, nodes, completions.

Pure parsers (host lists, GRES detail, ``scontrol``'s one-liners) are checked on Slurm's own
spellings first; everything else runs against the fixture's slurmctld.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest

from gpuplan.app.adapters.slurm.client import (
    CANCELLED,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    BatchRequest,
    Placement,
    SlurmClient,
    SlurmError,
    expand_hostlist,
    gres_indices,
    node_sort_key,
    parse_oneliner,
)
from tests.slurm import PARTITION, SlurmServer

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], what: str, timeout_s: float = 30.0) -> T:
    """Poll ``probe`` until it answers something truthy (Slurm acts asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {timeout_s:g} s")
        time.sleep(0.1)


# -- parsers -------------------------------------------------------------------------------------


def test_host_lists_expand_as_slurm_writes_them() -> None:
    assert expand_hostlist("node[0-2,5]") == ("node0", "node1", "node2", "node5")
    assert expand_hostlist("gpu[08-10],cpu3") == ("gpu08", "gpu09", "gpu10", "cpu3")
    assert expand_hostlist("node0") == ("node0",)
    assert expand_hostlist("") == ()
    assert expand_hostlist("rack[1-2]-n[0-1]") == ("rack1-n0", "rack1-n1", "rack2-n0", "rack2-n1")


def test_gres_detail_gives_the_gpu_indices() -> None:
    assert gres_indices("gpu:g3:1(IDX:3),gpu:g5:1(IDX:5)") == (3, 5)
    assert gres_indices("gpu:2(IDX:0-1)") == (0, 1)
    assert gres_indices("gpu:4(IDX:0-1,6-7)") == (0, 1, 6, 7)
    assert gres_indices("gpu:g0:0(IDX:N/A)") == ()


def test_nodes_sort_by_name_with_numbers_as_numbers() -> None:
    assert sorted(["node10", "node2", "node1"], key=node_sort_key) == ["node1", "node2", "node10"]


def test_oneliner_values_keep_their_spaces() -> None:
    line = (
        "ReservationName=m1 StartTime=2026-12-01T11:00:00 Flags=MAINT,SPEC_NODES Nodes=node[0-1] Users=root"
    )
    fields = parse_oneliner(line)
    assert fields["Flags"] == "MAINT,SPEC_NODES"
    assert fields["Nodes"] == "node[0-1]"
    assert parse_oneliner("Reason=disk full [root@2026-12-01T09:00:00] State=IDLE")["Reason"] == (
        "disk full [root@2026-12-01T09:00:00]"
    )


def test_a_placement_asks_for_typed_gres_or_whole_nodes() -> None:
    assert Placement(nodes=("node1",), gpus=(3, 5)).gres() == "gpu:g3:1,gpu:g5:1"
    assert Placement(nodes=("node0", "node1"), gpus_per_node=8).gres() == "gpu:8"
    with pytest.raises(ValueError, match="exact GPUs are asked on one node"):
        Placement(nodes=("node0", "node1"), gpus=(1,))


# -- against the cluster -------------------------------------------------------------------------


@pytest.fixture
def client(slurm: SlurmServer) -> SlurmClient:
    return SlurmClient(slurm.settings())


def sleep_job(name: str, seconds: float = 30, **fields: object) -> BatchRequest:
    return BatchRequest(name=name, partition=PARTITION, command=f"sleep {seconds}", **fields)  # type: ignore[arg-type]


def running(client: SlurmClient, job_id: int) -> object:
    job = client.job(job_id)
    return job if job is not None and job.state == RUNNING else None


def scheduler_passes(slurm: SlurmServer) -> int:
    """How many passes slurmctld's main scheduler has made over the queue (``sdiag``)."""
    main = slurm.run("sdiag").split("Main schedule statistics", 1)[1]
    return int(re.search(r"Total cycles:\s*(\d+)", main).group(1))  # type: ignore[union-attr]


@pytest.mark.slurm
def test_a_held_job_waits_then_runs_on_exactly_the_gpus_asked(
    slurm: SlurmServer, client: SlurmClient
) -> None:
    job_id = client.submit(
        BatchRequest(
            name="exact",
            partition=PARTITION,
            command=f"echo CVD=$CUDA_VISIBLE_DEVICES > {slurm.root}/cvd-$SLURM_JOB_ID; sleep 30",
            comment='gpuplan:{"id": "exact"}',
            placement=Placement(nodes=("node1",), gpus=(3, 5)),
            time_limit_minutes=10,
        )
    )
    held = client.job(job_id)
    assert held is not None
    assert (held.state, held.held, held.comment) == (PENDING, True, 'gpuplan:{"id": "exact"}')
    # A held job is never started by the scheduler's own passes: an unheld job asked after it
    # on the same node starts, and a full pass over the queue (sdiag's count) leaves it PENDING.
    passes = scheduler_passes(slurm)
    after = client.submit(sleep_job("after", hold=False, placement=Placement(nodes=("node1",), gpus=(0,))))
    wait_for(lambda: running(client, after), "the unheld job submitted after it RUNNING")
    wait_for(lambda: scheduler_passes(slurm) > passes, "a scheduling pass since the submission")
    assert client.job(job_id).state == PENDING  # type: ignore[union-attr]
    client.cancel(after)
    client.release(job_id)
    job = wait_for(lambda: running(client, job_id), "the released job RUNNING")
    assert job.nodes == ("node1",)  # type: ignore[attr-defined]
    assert dict(job.gpus) == {"node1": (3, 5)}  # type: ignore[attr-defined]
    assert job.time_limit_minutes == 10  # type: ignore[attr-defined]
    cvd = slurm.root / f"cvd-{job_id}"
    assert wait_for(lambda: cvd.exists() and cvd.read_text().strip(), "the job's output") == "CVD=3,5"
    assert "IDX:3" in slurm.run("scontrol", "show", "job", "-d", str(job_id))


@pytest.mark.slurm
def test_a_pending_job_is_placed_by_update_then_released(client: SlurmClient) -> None:
    exact = client.submit(sleep_job("moved"))
    client.place(exact, Placement(nodes=("node0",), gpus=(2, 6)))
    whole = client.submit(sleep_job("whole"))
    client.place(whole, Placement(nodes=("node1",), gpus_per_node=8))
    client.release(exact)
    client.release(whole)
    job = wait_for(lambda: running(client, exact), "the placed job RUNNING")
    assert dict(job.gpus) == {"node0": (2, 6)}  # type: ignore[attr-defined]
    node = wait_for(lambda: running(client, whole), "the whole-node job RUNNING")
    assert dict(node.gpus) == {"node1": tuple(range(8))}  # type: ignore[attr-defined]
    assert node.exclusive  # type: ignore[attr-defined]
    client.release(exact)  # idempotent on a running job
    assert client.job(exact).state == RUNNING  # type: ignore[union-attr]


@pytest.mark.slurm
def test_completions_come_from_the_jobcomp_log(client: SlurmClient) -> None:
    since = datetime.now(UTC) - timedelta(seconds=2)
    ok = client.submit(sleep_job("quick", 1, hold=False))
    bad = client.submit(BatchRequest(name="bad", partition=PARTITION, command="exit 3", hold=False))
    long = client.submit(sleep_job("long", 60, hold=False))
    wait_for(lambda: running(client, long), "the long job RUNNING")
    client.cancel(long)
    client.cancel(long)  # idempotent

    def ended() -> dict[int, object] | None:
        found = {c.id: c for c in client.completions(since) if c.id in {ok, bad, long}}
        return found if len(found) == 3 else None

    found = wait_for(ended, "three completions")
    assert {i: c.state for i, c in found.items()} == {ok: COMPLETED, bad: FAILED, long: CANCELLED}  # type: ignore[attr-defined]
    quick = found[ok]
    assert quick.start is not None and quick.end is not None  # type: ignore[attr-defined]
    assert quick.start.tzinfo is UTC  # type: ignore[attr-defined]
    assert 0 <= (quick.end - quick.start).total_seconds() <= 30  # type: ignore[attr-defined]
    assert abs((quick.end - datetime.now(UTC)).total_seconds()) < 120  # type: ignore[attr-defined]
    assert found[bad].exit_code.startswith("3:")  # type: ignore[attr-defined]
    # A plan's clock ahead of Slurm's (a replay, the first minute of an hour) asks from the future.
    assert client.completions(datetime.now(UTC) + timedelta(hours=1)) is not None


@pytest.mark.slurm
def test_nodes_show_state_features_and_gres(slurm: SlurmServer, client: SlurmClient) -> None:
    nodes = client.nodes(PARTITION)
    assert [n.name for n in nodes] == ["node0", "node1"]
    assert all(n.features == ("h100",) and n.gpus == 8 and not n.unavailable for n in nodes)
    assert dict(nodes[0].gres) == {f"g{i}": 1 for i in range(8)}
    slurm.run("scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=disk full")
    drained = client.nodes(PARTITION)[1]
    assert drained.unavailable
    assert drained.reason == "disk full"


@pytest.mark.slurm
def test_maintenance_reservations_are_read(slurm: SlurmServer, client: SlurmClient) -> None:
    slurm.run(
        "scontrol", "create", "reservation", "ReservationName=maint", "StartTime=now+2hours",
        "Duration=90", "Nodes=node0", "Flags=MAINT", "Users=root",
    )  # fmt: skip
    (reservation,) = client.reservations()
    assert (reservation.name, reservation.nodes, reservation.maintenance) == ("maint", ("node0",), True)
    assert reservation.end - reservation.start == timedelta(minutes=90)


@pytest.mark.slurm
def test_a_failing_call_names_the_command_and_slurms_message(slurm: SlurmServer) -> None:
    client = SlurmClient(slurm.settings())
    with pytest.raises(
        SlurmError, match=re.escape("`scontrol update jobid=999999 Comment=x` failed (exit 1)")
    ) as info:
        client.update(999999, Comment="x")
    assert "Invalid job id" in info.value.slurm_message
    with pytest.raises(SlurmError, match="sbatch") as refused:
        client.submit(sleep_job("nowhere", placement=Placement(nodes=("node7",), gpus=(0,))))
    assert "node" in refused.value.slurm_message.lower()
    assert client.jobs() == [] or all(j.name != "nowhere" for j in client.jobs())


@pytest.mark.slurm
def test_every_call_is_time_limited(slurm: SlurmServer) -> None:
    slurm.stop_controller()
    client = SlurmClient(slurm.settings(timeout_s=2.0))
    # With no controller, squeue retries for longer than the limit: the client stops it.
    with pytest.raises(SlurmError, match=re.escape("`squeue --json` failed: no answer within 2 s")):
        client.jobs()
