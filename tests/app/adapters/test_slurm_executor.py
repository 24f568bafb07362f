"""The Slurm executor end to end on the fixture: plan cycles driven by the test, Slurm's real answers.

Each test builds a service on a SQLite file whose cluster is the fixture's partition (two
nodes of 8 GPUs), runs the cycle's steps itself (``reconcile``, ``adopt``, then ``plan_cycle``) at
hours it chooses, and reads what Slurm runs with ``scontrol show job -d``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contract.records import Amendment, App, Assignment, Cluster, Commit, JobState, Outcome
from gpuplan.app.adapters.executors.slurm import SlurmExecutor
from gpuplan.app.adapters.slurm.batch import parse_comment
from gpuplan.app.adapters.slurm.client import (
    RUNNING,
    BatchRequest,
    Placement,
    SlurmError,
    SlurmJob,
    gres_indices,
)
from gpuplan.app.adapters.slurm.cluster import ceil_hour
from gpuplan.app.core.config import AppTraffic, ServiceConfig
from gpuplan.app.cycle.reconcile import poll, reconcile
from gpuplan.app.cycle.tick import CycleReport, plan_cycle
from gpuplan.app.jobs.adopt import adopt
from gpuplan.app.jobs.submit import submit
from gpuplan.app.lab.seed import ensure_service
from gpuplan.app.service import Service, poll_once
from storage.factory import open_store
from storage.store import Store
from tests.app.adapters.test_slurm_client import wait_for
from tests.slurm import PARTITION, SlurmServer

HOUR = timedelta(hours=1)
FEATURES = {
    "variant": "lora_sft", "params_billion": 8, "num_layers": 32, "hidden_size": 4096,
    "seq_len_tokens": 4096, "mean_sample_tokens": 1200, "dataset_tokens_million": 200, "epochs": 2,
    "global_batch_size": 128, "micro_batch_size": 2, "lora_rank": 32, "base_4bit": False,
    "precision": "bf16", "gpu_type": "h100-80gb", "gpu_memory_gb": 80, "gradient_checkpointing": True,
    "optimizer": "adamw", "sharding": "none", "rollout_samples_per_prompt": 0, "rollout_new_tokens": 0,
    "reward_model_params_billion": 0, "sequence_packing": True,
}  # fmt: skip


_PINNED_HOUR: list[datetime] = []  # the hour each test runs in, whatever the wall clock does meanwhile


@pytest.fixture(autouse=True)
def _one_hour_per_test() -> Iterator[None]:
    """A test that starts at 12:59:50 plans in hour 12 throughout, not in 12 then 13."""
    _PINNED_HOUR.append(datetime.now(UTC).replace(minute=0, second=0, microsecond=0))
    yield
    _PINNED_HOUR.clear()


def this_hour() -> datetime:
    return _PINNED_HOUR[0] if _PINNED_HOUR else datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


def traffic_csv(path: Path, end: datetime) -> Path:
    """Four weeks of an app that needs 1 GPU at night and 4 from 08:00 to 20:00 (100 requests per GPU)."""
    lines = ["hour,requests"]
    hour = end - 28 * 24 * HOUR
    while hour < end:
        lines.append(f"{hour:%Y-%m-%d %H:%M:%S},{400.0 if 8 <= hour.hour < 20 else 100.0}")
        hour += HOUR
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class SlurmService:
    """A store, a config and the Slurm executor on the fixture; ``cycle(now)`` runs one plan cycle."""

    store: Store
    config: ServiceConfig
    executor: SlurmExecutor
    slurm: SlurmServer

    def cycle(self, now: datetime) -> CycleReport:
        adopt(self.executor, self.store, reconcile(self.executor, self.store, now), now, self.config)
        return plan_cycle(self.store, now, self.config, self.executor)

    def submit(self, job_id: str, gpus: int, hours: float, now: datetime, **slurm: Any) -> str:
        spec = {"id": job_id, "kind": "training", "priority": 50, "gpus": gpus, "hours": hours, **FEATURES}
        spec["slurm"] = {"command": "sleep 300", **slurm}
        return submit(self.store, spec, now, self.config, replan=False, held=self.executor).job

    def slurm_job(self, job_id: str) -> SlurmJob:
        stored = self.store.job(job_id)
        assert stored is not None
        found = self.executor.client.job(stored.spec["slurm"]["job_id"])
        assert found is not None
        return found

    def committed(self, hour: datetime) -> dict[str, tuple[int, ...]]:
        commit = self.store.commit(hour)
        assert commit is not None
        return {a.job: a.gpus for a in commit.assignments}

    def replicas(self, app: str) -> set[int]:
        """GPU ids of the app's live replicas, as their comments name them."""
        live = [j for j in self.executor.client.jobs(PARTITION) if not j.finished]
        return {int(t["gpu"]) for j in live if (t := parse_comment(j.comment)) and t.get("app") == app}

    def shown_gpus(self, slurm_id: int) -> tuple[int, ...]:
        """GPU ids from ``scontrol show job -d`` (its per-node ``Nodes=... GRES=...(IDX:..)``)."""
        text = self.slurm.run("scontrol", "show", "job", "-d", "--oneliner", str(slurm_id))
        found = []
        for node, detail in re.findall(r"\bNodes=(node\d+) CPU_IDs=\S+ Mem=\S+ GRES=(\S+)", text):
            found += [
                self.executor.read(None, datetime.now(UTC)).gpu_map.gpu(node, i) for i in gres_indices(detail)
            ]
        return tuple(sorted(found))


@pytest.fixture
def service(slurm: SlurmServer, sqlite_url: str, tmp_path: Path) -> Iterator[SlurmService]:
    now = this_hour()
    config = ServiceConfig(
        cluster=Cluster(gpus=16),
        apps=(App(id="chat", priority=90.0, swap_cap=2, requests_per_gpu_hour=100.0),),
        traffic=(AppTraffic("chat", traffic_csv(tmp_path / "chat.csv", now)),),
        models_dir=tmp_path / "models",
        commits_file=None,
        review_every_hours=None,
        plan_budget_ms=200.0,
        plan_wall_clock=False,
        slurm=slurm.settings(),
        replica_commands={"chat": "sleep 3600"},
    )
    store = open_store(sqlite_url)
    try:
        ensure_service(store, config, now - HOUR)
        executor = SlurmExecutor.from_config(config)
        executor.replica_start_wait_s = 10.0
        yield SlurmService(store, config, executor, slurm)
    finally:
        store.close()


@pytest.mark.slurm
def test_submitted_jobs_run_on_exactly_the_committed_gpus(service: SlurmService) -> None:
    now = this_hour() + timedelta(minutes=1)
    jobs = [service.submit(f"train-{n}", gpus, 3.0, now) for n, gpus in enumerate((2, 4, 1, 8))]
    for job_id in jobs:
        assert service.slurm_job(job_id).held
    report = service.cycle(now)
    assert report.committed and report.jobs_committed >= 2
    committed = service.committed(this_hour())
    for job_id in jobs:
        if job_id not in committed:
            assert service.slurm_job(job_id).held, f"{job_id} is not committed but was released"
            continue
        slurm_id = service.slurm_job(job_id).id
        wait_for(lambda slurm_id=slurm_id: service.executor.client.job(slurm_id).state == RUNNING, "RUNNING")  # type: ignore[misc, union-attr]
        assert service.shown_gpus(slurm_id) == committed[job_id], job_id
    # Executing the commit again, as every reconcile does, releases nothing twice.
    again = service.executor.enact(service.store.commit(this_hour()), service.executor.read(None, now))  # type: ignore[arg-type]
    assert (again.released, again.started, again.cancelled) == ((), (), ())


@pytest.mark.slurm
def test_replicas_follow_the_committed_sets_across_three_hours(service: SlurmService) -> None:
    first = datetime.now(UTC).replace(hour=6, minute=1, second=0, microsecond=0)  # 1 GPU, then the rise
    seen = []
    for hour in range(3):
        now = first + hour * HOUR
        service.cycle(now)
        wanted = set(service.committed(now.replace(minute=0)).get("chat", ()))
        assert service.replicas("chat") == wanted
        for job in service.executor.client.jobs(PARTITION):
            tag = parse_comment(job.comment)
            if tag and tag.get("app") == "chat" and not job.finished:
                wait_for(
                    lambda job=job: service.executor.client.job(job.id).state == RUNNING, "replica RUNNING"
                )  # type: ignore[misc, union-attr]
                assert service.shown_gpus(job.id) == (tag["gpu"],)
        poll(service.executor, service.store, now)  # the count of running replicas, as the metric shows it
        assert service.executor.replicas_running == {"chat": len(wanted)}
        seen.append(wanted)
    # The planner may hold a steady set while nothing else wants the GPUs (fewer moves at equal
    # value), so a fourth hour's commit moves two of the app's GPUs by hand: the executor follows.
    moved = {*sorted(seen[-1])[2:], *[g for g in range(16) if g not in seen[-1]][:2]}
    later = first.replace(minute=0) + 3 * HOUR
    service.executor.deliver(Commit(later, None, (Assignment("chat", tuple(sorted(moved))),)))
    wait_for(lambda: service.replicas("chat") == moved, "the replicas on the moved set only")


@pytest.mark.slurm
def test_a_dead_replica_is_restarted_on_its_gpu(service: SlurmService) -> None:
    now = this_hour().replace(hour=12) + timedelta(minutes=1)
    service.cycle(now)
    wanted = service.replicas("chat")
    assert wanted
    victim = next(
        j
        for j in service.executor.client.jobs(PARTITION)
        if (t := parse_comment(j.comment)) and t.get("app") == "chat"
    )
    service.executor.client.cancel(victim.id)
    wait_for(lambda: service.executor.client.job(victim.id).finished, "the replica gone")  # type: ignore[union-attr]
    poll(service.executor, service.store, now + timedelta(minutes=1))
    assert service.replicas("chat") == wanted


@pytest.mark.slurm
def test_completions_and_scancel_enter_the_history(service: SlurmService) -> None:
    now = datetime.now(UTC).replace(microsecond=0)  # the real clock, in whole seconds as Slurm keeps it
    service.submit("short", 1, 1.0, now, command="sleep 2")
    service.submit("doomed", 1, 1.0, now)
    service.submit("never", 1, 1.0, now)
    service.slurm.run("scancel", str(service.slurm_job("never").id))  # while held: it never runs
    service.cycle(now)
    never = service.store.job("never")
    assert never is not None and (never.state, never.outcome) == (JobState.DONE, Outcome.CANCELLED)
    assert "never" not in service.committed(this_hour())
    doomed = service.slurm_job("doomed").id
    wait_for(lambda: service.executor.client.job(doomed).state == RUNNING, "RUNNING")  # type: ignore[union-attr]
    service.slurm.run("scancel", str(doomed))
    short = service.slurm_job("short")
    wait_for(lambda: service.executor.client.job(short.id).finished, "the short job done")  # type: ignore[union-attr]
    wait_for(lambda: service.executor.client.job(doomed).finished, "the cancelled job done")  # type: ignore[union-attr]
    finished = poll(service.executor, service.store, datetime.now(UTC))
    assert {j.id: j.outcome for j in finished} == {"short": Outcome.OK, "doomed": Outcome.CANCELLED}
    history = service.store.history().set_index("job_id")
    ended = service.executor.client.job(short.id)
    assert ended is not None and ended.start is not None and ended.end is not None
    row = history.loc["short"]
    assert (row["start_time"].to_pydatetime(), row["end_time"].to_pydatetime()) == (ended.start, ended.end)
    assert row["outcome"] == "completed" and row["gpus"] == 1
    assert history.loc["doomed", "outcome"] == "cancelled"
    assert poll(service.executor, service.store, datetime.now(UTC)) == []  # nothing is recorded twice


@pytest.mark.slurm
def test_a_completion_polled_within_the_hour_starts_the_waiting_job_on_its_gpus(
    service: SlurmService,
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    service.submit("short", 8, 1.0, now, command="sleep 2")
    service.submit("wide", 2, 3.0, now)
    service.cycle(now)
    freed = service.committed(this_hour())["short"]
    service.submit("next", 8, 1.0, now)  # no block of 8 is free in this hour's commit
    assert "next" not in service.committed(this_hour())
    short = service.slurm_job("short")
    wait_for(lambda: service.executor.client.job(short.id).finished, "the short job done")  # type: ignore[union-attr]
    daemon = Service(service.store, service.config, service.executor, reconciler=service.executor)
    assert [job.id for job in poll_once(daemon, datetime.now(UTC))] == ["short"]
    (amendment,) = service.store.amendments(this_hour(), this_hour() + HOUR)
    assert list(amendment.assignments) == [Assignment("next", freed)]
    released = service.slurm_job("next")
    wait_for(lambda: service.executor.client.job(released.id).state == RUNNING, "the next job RUNNING")  # type: ignore[union-attr]
    assert service.shown_gpus(released.id) == freed


@pytest.mark.slurm
def test_a_drained_node_is_down_in_the_next_plan_and_foreign_work_is_pinned(service: SlurmService) -> None:
    now = this_hour() + timedelta(minutes=1)
    service.slurm.run("scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=fan")
    foreign = service.executor.client.submit(
        BatchRequest(
            name="theirs", partition=PARTITION, command="sleep 300", hold=False, time_limit_minutes=120,
            placement=Placement(nodes=("node0",), gpus=(5,)),
        )
    )  # fmt: skip
    wait_for(lambda: service.executor.client.job(foreign).state == RUNNING, "the foreign job RUNNING")  # type: ignore[union-attr]
    jobs = [service.submit(f"job-{n}", 1, 4.0, now) for n in range(10)]
    service.cycle(now)
    run = service.store.run()
    assert run is not None
    horizon = run.scenario["horizon"]
    down = {w["gpu"]: (w["start"], w["end"]) for w in run.scenario["down"]}
    theirs = service.executor.client.job(foreign)
    assert theirs is not None and theirs.end is not None
    until = (ceil_hour(theirs.end) - this_hour()) // HOUR  # the hour its time limit ends in, included
    assert down == {**dict.fromkeys(range(8, 16), (0, horizon)), 5: (0, until)}
    for gpu, (start, end) in down.items():
        assert all(cell is None for cell in run.grid[gpu][start:end]), (gpu, run.grid[gpu])
    committed = service.committed(this_hour())
    assert not any(set(gpus) & {5, *range(8, 16)} for gpus in committed.values())
    assert len([j for j in jobs if j in committed]) >= 1


@pytest.mark.slurm
def test_a_refused_sbatch_is_a_clear_error_and_nothing_is_stored(service: SlurmService) -> None:
    now = this_hour()
    with pytest.raises(SlurmError, match=re.escape("`sbatch --parsable --job-name=bad")) as info:
        service.submit(
            "bad", 1, 1.0, now, time_limit_minutes=8 * 24 * 60
        )  # the partition's MaxTime is 7 days
    assert "time limit" in info.value.slurm_message.lower()
    assert service.store.job("bad") is None


@pytest.mark.slurm
def test_a_held_job_with_a_gpuplan_comment_is_adopted(service: SlurmService) -> None:
    import json

    spec = {"id": "adopt-me", "kind": "training", "priority": 20, "gpus": 2, "hours": 1.0, **FEATURES}
    slurm_id = service.executor.client.submit(
        BatchRequest(
            name="mine", partition=PARTITION, command="sleep 300", comment="gpuplan:" + json.dumps(spec)
        )
    )
    now = this_hour() + timedelta(minutes=1)
    service.cycle(now)
    stored = service.store.job("adopt-me")
    assert stored is not None and stored.spec["slurm"] == {"job_id": slurm_id}
    job = service.executor.client.job(slurm_id)
    assert job is not None and parse_comment(job.comment) == {"id": "adopt-me"}
    assert stored.state is JobState.RUNNING
    wait_for(lambda: service.executor.client.job(slurm_id).state == RUNNING, "RUNNING")  # type: ignore[union-attr]
    assert service.shown_gpus(slurm_id) == service.committed(this_hour())["adopt-me"]


def live_ours(service: SlurmService) -> list[SlurmJob]:
    return [j for j in service.executor.client.jobs(PARTITION) if parse_comment(j.comment) and not j.finished]


@pytest.mark.slurm
def test_a_job_that_vanished_from_slurm_ends_and_frees_its_gpus(
    service: SlurmService, caplog: pytest.LogCaptureFixture
) -> None:
    now = this_hour() + timedelta(minutes=1)
    real = service.store.job(service.submit("real", 2, 3.0, now))
    assert real is not None

    def ghost(job_id: str, slurm_id: int) -> None:  # bound to a Slurm job no controller ever had
        service.store.add_job(
            replace(real, id=job_id, spec={**real.spec, "slurm": {**real.spec["slurm"], "job_id": slurm_id}})
        )

    ghost("ghost", 987_654)
    report = plan_cycle(service.store, now, service.config, None)  # commits; nothing acts on Slurm
    assert report.committed and service.committed(this_hour()).keys() >= {"real", "ghost"}
    ghost("held-ghost", 987_655)  # still queued
    with caplog.at_level("WARNING"):
        reconcile(service.executor, service.store, now + timedelta(minutes=5))
    for job_id, outcome in (("ghost", Outcome.FAILED), ("held-ghost", Outcome.CANCELLED)):
        ended = service.store.job(job_id)
        assert ended is not None and (ended.state, ended.outcome) == (JobState.DONE, outcome)
    assert "drift: job ghost (Slurm 987654) vanished from Slurm" in caplog.text
    still = service.store.job("real")
    assert still is not None and still.state is JobState.RUNNING  # what Slurm does run stays
    # The next plan starts without the ghost.
    service.cycle(now + HOUR)
    assert "ghost" not in service.committed(this_hour() + HOUR)


@pytest.mark.slurm
def test_slurmctld_stopped_during_a_cycle_fails_it_and_the_next_succeeds_with_nothing_doubled(
    service: SlurmService, caplog: pytest.LogCaptureFixture
) -> None:
    now = this_hour().replace(hour=12) + timedelta(minutes=1)  # the app holds 4 GPUs at noon
    jobs = [service.submit(f"job-{n}", 2, 3.0, now) for n in range(3)]
    # Without a controller every command waits out its time limit: a short one here.
    service.config = replace(service.config, slurm=service.slurm.settings(timeout_s=3.0))
    service.executor = SlurmExecutor.from_config(service.config)
    reconcile(service.executor, service.store, now)
    service.slurm.stop_controller()  # between the reading and the commit's release
    with caplog.at_level("ERROR"):
        report = plan_cycle(service.store, now, service.config, service.executor)
    assert report.committed  # the commit is stored; acting on it failed, and said so
    assert any("executor slurm failed on the commit" in r.message for r in caplog.records)
    pending = service.store.pending_deliveries("slurm")  # the outbox keeps it, to be re-sent
    assert [(d.item.hour, d.attempts) for d in pending] == [(now.replace(minute=0), 1)]
    with pytest.raises(SlurmError):
        service.cycle(now + timedelta(minutes=30))  # Slurm still away: the cycle fails
    service.slurm.start_controller()
    service.cycle(now + timedelta(minutes=31))
    assert service.store.pending_deliveries("slurm") == []  # re-sent, done, acknowledged
    committed = service.committed(now.replace(minute=0))
    assert service.replicas("chat") == set(committed["chat"])
    ours = live_ours(service)
    tags = [tuple(sorted(parse_comment(j.comment).items())) for j in ours]  # type: ignore[union-attr]
    assert len(tags) == len(set(tags)), f"a job or replica runs twice: {tags}"
    for job_id in jobs:
        state = service.slurm_job(job_id)
        assert state.held == (job_id not in committed), job_id


@pytest.mark.slurm
def test_a_commit_stored_but_never_acted_on_is_released_once_at_the_next_cycle(service: SlurmService) -> None:
    now = this_hour() + timedelta(minutes=1)
    job_id = service.submit("crash", 2, 3.0, now)
    report = plan_cycle(service.store, now, service.config, None)  # the process dies right after its commit
    assert report.committed and service.slurm_job(job_id).held
    restarted = SlurmExecutor.from_config(service.config)  # a new daemon process
    service.executor = restarted
    service.cycle(now + timedelta(minutes=30))
    slurm_id = service.slurm_job(job_id).id
    wait_for(lambda: restarted.client.job(slurm_id).state == RUNNING, "RUNNING")  # type: ignore[union-attr]
    assert service.shown_gpus(slurm_id) == service.committed(this_hour())[job_id]
    service.cycle(now + timedelta(minutes=40))
    assert [j.id for j in live_ours(service) if j.name == job_id] == [slurm_id]


@pytest.mark.slurm
def test_gpuplan_submit_refused_by_slurm_exits_1_naming_sbatch_and_stores_nothing(
    service: SlurmService, sqlite_url: str, tmp_path: Path
) -> None:
    import yaml

    from tests.service_fixtures import run_cli

    config = tmp_path / "gpuplan.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "cluster": {"gpus": 16},
                "apps": [],
                "slurm": {"partition": PARTITION, "slurm_conf": str(service.slurm.conf)},
            }
        )
    )
    spec = {"id": "too-long", "kind": "batch_inference", "gpus": 1, "hours": 2.0}
    job = tmp_path / "job.yaml"
    job.write_text(
        yaml.safe_dump({**spec, "slurm": {"command": "sleep 1", "time_limit_minutes": 8 * 24 * 60}})
    )
    refused = run_cli("submit", job, "--config", config, "--db", sqlite_url)
    assert refused.code == 1
    assert refused.err.startswith("gpuplan submit: error: `sbatch --parsable --job-name=too-long")
    assert "Requested time limit is invalid" in refused.err
    assert service.store.job("too-long") is None
    assert not [j for j in service.executor.client.jobs(PARTITION) if j.name == "too-long"]
    job.write_text(yaml.safe_dump({**spec, "slurm": {"command": "sleep 1", "time_limit_minutes": 60}}))
    accepted = run_cli("submit", job, "--config", config, "--db", sqlite_url, "--json")
    assert accepted.code == 0, accepted.err
    assert service.slurm_job("too-long").held


@pytest.mark.slurm
def test_a_job_slurm_does_not_start_is_reported_and_returns_to_the_queue(
    service: SlurmService, caplog: pytest.LogCaptureFixture
) -> None:
    service.config = replace(service.config, slurm=service.slurm.settings(start_grace_s=1.0))
    service.executor = SlurmExecutor.from_config(service.config)
    service.executor.replica_commands = {}  # batch only: every GPU is the job's to take
    now = this_hour() + timedelta(minutes=1)
    service.submit("stuck", 4, 3.0, now)
    plan_cycle(service.store, now, service.config, None)  # committed, not yet released
    planned = service.committed(this_hour())["stuck"]
    node = service.executor.read(None, now).gpu_map.locate(planned[0])[0]
    service.slurm.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=fan")
    poll(service.executor, service.store, now)  # released onto a node that takes no work
    slurm_id = service.slurm_job("stuck").id
    assert service.executor.client.job(slurm_id).state == "PENDING"  # type: ignore[union-attr]

    def requeued() -> bool:
        poll(service.executor, service.store, now + timedelta(minutes=1))
        job = service.store.job("stuck")
        return job is not None and job.state is JobState.QUEUED

    with caplog.at_level("WARNING"):
        wait_for(requeued, "the job back in the queue")  # once 1 s passed since Slurm made it eligible
    assert any("did not start" in r.message and "back to the queue" in r.message for r in caplog.records)
    stuck = service.store.job("stuck")
    assert stuck is not None and stuck.state is JobState.QUEUED
    assert service.slurm_job("stuck").held
    service.cycle(now + HOUR)  # the next hour's plan places it anew, off the drained node
    moved = service.committed(this_hour() + HOUR)["stuck"]
    assert not set(moved) & set(service.executor.read(None, now).gpu_map.node_gpus(node))
    wait_for(lambda: service.executor.client.job(slurm_id).state == RUNNING, "RUNNING")  # type: ignore[union-attr]
    assert service.shown_gpus(slurm_id) == moved


@pytest.mark.slurm
def test_a_job_running_elsewhere_than_planned_is_drift_and_its_real_gpus_are_pinned(
    service: SlurmService, caplog: pytest.LogCaptureFixture
) -> None:
    service.executor.replica_commands = {}
    now = this_hour() + timedelta(minutes=1)
    service.submit("moved", 2, 3.0, now)
    plan_cycle(service.store, now, service.config, None)  # committed, not released
    planned = service.committed(this_hour())["moved"]
    gpu_map = service.executor.read(None, now).gpu_map
    node = gpu_map.locate(planned[0])[0]
    other = next(n for n in gpu_map.nodes if n != node)
    slurm_id = service.slurm_job("moved").id
    service.executor.client.place(slurm_id, Placement(nodes=(other,), gpus=(6, 7)))  # someone moved it
    service.executor.client.release(slurm_id)
    wait_for(lambda: service.executor.client.job(slurm_id).state == RUNNING, "RUNNING")  # type: ignore[union-attr]
    real = (gpu_map.gpu(other, 6), gpu_map.gpu(other, 7))
    with caplog.at_level("WARNING"):
        service.cycle(now + timedelta(minutes=30))
    assert any(r.message.startswith("drift: job moved") for r in caplog.records)
    run = service.store.run()
    assert run is not None
    down = {w["gpu"]: (w["start"], w["end"]) for w in run.scenario["down"]}
    assert set(real) <= set(down) and all(down[gpu][0] == 0 for gpu in real)
    for gpu in real:
        start, end = down[gpu]
        assert all(cell is None for cell in run.grid[gpu][start:end]), (gpu, run.grid[gpu])
    assert [j.id for j in live_ours(service) if j.name == "moved"] == [slurm_id]  # not released again


@pytest.mark.slurm
def test_an_older_commit_delivered_again_releases_its_jobs_and_leaves_the_replicas(
    service: SlurmService,
) -> None:
    from contract.records import Assignment, Commit

    hour = this_hour()
    service.submit("late", 2, 3.0, hour)
    executor = service.executor
    assert executor.deliver(Commit(hour, None, (Assignment("chat", (0, 1)),)))
    assert service.replicas("chat") == {0, 1}
    older = Commit(hour - HOUR, None, (Assignment("chat", (2, 3)), Assignment("late", (8, 9))))
    assert executor.deliver(older)  # the outbox re-sends an hour that an outage left pending
    slurm_id = service.slurm_job("late").id
    wait_for(lambda: executor.client.job(slurm_id).state == RUNNING, "the older hour's job RUNNING")  # type: ignore[union-attr]
    assert service.shown_gpus(slurm_id) == (8, 9)
    assert service.replicas("chat") == {0, 1}  # the newer commit's replicas stay
    assert executor.deliver(Commit(hour, None, (Assignment("chat", (0, 1)),)))  # again: nothing changes
    assert service.replicas("chat") == {0, 1}


@pytest.mark.slurm
def test_stopping_a_cancelled_job_scancels_its_slurm_job(service: SlurmService) -> None:
    from contract.records import Assignment, Commit

    hour = this_hour()
    service.submit("stopped", 1, 3.0, hour)
    assert service.executor.deliver(Commit(hour, None, (Assignment("stopped", (3,)),)))
    slurm_id = service.slurm_job("stopped").id
    wait_for(lambda: service.executor.client.job(slurm_id).state == RUNNING, "RUNNING")  # type: ignore[union-attr]
    service.executor.stop("stopped", datetime.now(UTC))
    wait_for(lambda: service.executor.client.job(slurm_id).state == "CANCELLED", "CANCELLED")  # type: ignore[union-attr]
    service.executor.stop("stopped", datetime.now(UTC))  # gone already: nothing to do


@pytest.mark.slurm
def test_a_job_past_its_time_limit_is_scancelled_when_the_config_says_stop(service: SlurmService) -> None:
    now = this_hour() + timedelta(minutes=1)
    spec = {"id": "overrun", "kind": "training", "priority": 50, "gpus": 1, "hours": 3.0, **FEATURES}
    spec |= {"time_limit_hours": 0.25, "slurm": {"command": "sleep 300"}}
    submit(service.store, spec, now, service.config, replan=False, held=service.executor)
    service.cycle(now)
    slurm_id = service.slurm_job("overrun").id
    wait_for(lambda: service.executor.client.job(slurm_id).state == RUNNING, "RUNNING")  # type: ignore[union-attr]
    started = service.store.job("overrun").started_at  # type: ignore[union-attr]
    assert started is not None
    past = started + timedelta(minutes=20)
    # The default, `overrun: warn`, tells the operator and leaves the job running.
    plan_cycle(service.store, past, service.config, service.executor)
    assert service.executor.client.job(slurm_id).state == RUNNING  # type: ignore[union-attr]
    assert service.store.job("overrun").state is JobState.RUNNING  # type: ignore[union-attr]
    stopping = replace(service.config, overrun="stop")
    plan_cycle(service.store, started + timedelta(minutes=10), stopping, service.executor)  # within its limit
    assert service.executor.client.job(slurm_id).state == RUNNING  # type: ignore[union-attr]
    plan_cycle(service.store, past, stopping, service.executor)
    wait_for(lambda: service.executor.client.job(slurm_id).state == "CANCELLED", "CANCELLED")  # type: ignore[union-attr]
    ended = service.store.job("overrun")
    assert ended is not None and ended.state is JobState.DONE and ended.outcome is Outcome.CANCELLED


@pytest.mark.slurm
def test_a_job_cancelled_while_queued_leaves_no_held_slurm_job(service: SlurmService) -> None:
    from gpuplan.app.cycle.finish import cancel

    now = datetime.now(UTC)
    service.submit("unwanted", 1, 3.0, now)
    slurm_id = service.slurm_job("unwanted").id
    cancel(service.store, "unwanted", now, service.executor)  # queued: nothing to stop yet
    assert service.executor.client.job(slurm_id).held  # type: ignore[union-attr]
    service.cycle(now)
    wait_for(lambda: service.executor.client.job(slurm_id).state == "CANCELLED", "CANCELLED")  # type: ignore[union-attr]
    assert "unwanted" not in service.committed(this_hour())


@pytest.mark.slurm
def test_a_running_job_whose_stop_was_lost_is_cancelled_at_the_next_reconcile(service: SlurmService) -> None:
    from gpuplan.app.cycle.finish import cancel

    now = this_hour() + timedelta(minutes=1)
    service.submit("lost-stop", 1, 3.0, now)
    service.cycle(now)
    slurm_id = service.slurm_job("lost-stop").id
    wait_for(lambda: service.executor.client.job(slurm_id).state == RUNNING, "RUNNING")  # type: ignore[union-attr]
    cancel(service.store, "lost-stop", now + timedelta(minutes=2), None)  # the daemon died before scancel
    assert service.executor.client.job(slurm_id).state == RUNNING  # type: ignore[union-attr]
    reconcile(service.executor, service.store, now + timedelta(minutes=3))
    wait_for(lambda: service.executor.client.job(slurm_id).state == "CANCELLED", "CANCELLED")  # type: ignore[union-attr]
    ended = service.store.job("lost-stop")
    assert ended is not None and ended.outcome is Outcome.CANCELLED  # the store's end stays


@pytest.mark.slurm
def test_an_amendment_adds_a_replica_and_the_poll_keeps_it(service: SlurmService) -> None:
    now = this_hour().replace(hour=12) + timedelta(minutes=1)
    service.cycle(now)
    hour = now.replace(minute=0)
    committed = service.committed(hour)
    before = {job.id for job in service.executor.client.jobs(PARTITION) if not job.finished}
    held = {gpu for gpus in committed.values() for gpu in gpus}
    idle = min(set(range(16)) - held)
    amendment = Amendment(hour, 1, now + timedelta(minutes=29), None, (Assignment("chat", (idle,)),))
    service.store.record_amendment(amendment)
    service.executor.amend(amendment)
    assert service.replicas("chat") == {*committed["chat"], idle}
    after = {job.id for job in service.executor.client.jobs(PARTITION) if not job.finished}
    assert before <= after, "an amendment cancelled work the hour's commit had started"
    # The poll re-enacts the hour from the store: its commit with the amendment, so the new replica stays.
    poll(service.executor, service.store, now + timedelta(minutes=30))
    assert service.replicas("chat") == {*committed["chat"], idle}


@pytest.mark.slurm
def test_the_partitions_gpu_map_is_logged_once_and_a_count_unlike_the_configs_is_warned(
    service: SlurmService, caplog: pytest.LogCaptureFixture
) -> None:
    now = this_hour() + timedelta(minutes=5)
    service.executor.base_cluster = replace(service.executor.base_cluster, gpus=24)
    with caplog.at_level("INFO", logger="gpuplan.cluster"):
        reconcile(service.executor, service.store, now)
        reconcile(service.executor, service.store, now + timedelta(minutes=1))
    readings = [r.getMessage() for r in caplog.records if r.name == "gpuplan.cluster"]
    gpu_map = service.executor.read(None, now).gpu_map
    assert gpu_map.gpus == 16
    first, second = gpu_map.nodes
    assert readings == [
        f"Slurm partition {PARTITION}: 16 GPUs (h100), GPU id = node's first + IDX: {first} 0-7, {second} 8-15",
        f"cluster.gpus is 24 in the config, but Slurm partition {PARTITION} has 16 GPUs: planning on Slurm's 16",
    ]
    cluster = service.store.cluster()
    assert cluster is not None and cluster.gpus == 16


@pytest.mark.slurm
def test_a_running_jobs_since_is_slurms_start_not_its_release(service: SlurmService) -> None:
    from gpuplan.app.views.status import status

    now = this_hour() + timedelta(minutes=1)
    job_id = service.submit("train-0", 2, 3.0, now)
    assert service.cycle(now).committed
    stored = service.store.job(job_id)
    assert stored is not None and stored.state is JobState.RUNNING and stored.started_at == now
    slurm_id = service.slurm_job(job_id).id
    wait_for(lambda: service.executor.client.job(slurm_id).state == RUNNING, "RUNNING")  # type: ignore[union-attr]
    started = service.slurm_job(job_id).start
    assert started is not None and started != now
    poll(service.executor, service.store, now + timedelta(minutes=1))
    stored = service.store.job(job_id)
    assert stored is not None and stored.started_at == started
    running = status(service.store, now + timedelta(minutes=1)).running
    assert [row["since"] for row in running if row["job"] == job_id] == [started.isoformat()]


@pytest.mark.slurm
def test_the_partitions_gpu_map_is_stored_at_each_change(service: SlurmService) -> None:
    now = this_hour() + timedelta(minutes=1)
    reconcile(service.executor, service.store, now)
    stored = service.store.gpu_map()
    gpu_map = service.executor.read(None, now).gpu_map
    assert stored is not None
    assert (stored.partition, stored.nodes, stored.gpus_per_node) == (
        PARTITION,
        gpu_map.nodes,
        gpu_map.gpus_per_node,
    )
    assert stored.read_at == now
    # The same map read again keeps the time it was first read.
    reconcile(service.executor, service.store, now + timedelta(minutes=5))
    assert service.store.gpu_map() == stored
