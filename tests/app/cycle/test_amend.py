"""Amendments: additions to a committed hour that never move or remove committed work and keep
the hours legal; stored, numbered, shown by ``report commits``, refused when illegal."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.errors import InputError
from contract.records import (
    App,
    Assignment,
    Cluster,
    DownWindowRecord,
    Job,
    JobEstimate,
    JobState,
    ObservedTraffic,
    Outcome,
)
from contract.scenario import BatchJob, DownWindow, Instance, JobKind, RealtimeJob
from gpuplan.app.adapters.executors import InMemoryExecutor
from gpuplan.app.core.bridge import STEP, hour_allocation
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.cycle.amend import amend, check_amendment, propose
from scheduler.check import check_plan
from scheduler.model import SolveOptions
from scheduler.policies import PolicyName, plan
from storage.factory import open_store
from storage.store import Store
from tests.service_fixtures import commit_by_hand, run_cli
from tests.strategies import instance_of, scenarios

H0 = datetime(2026, 12, 2, 10, tzinfo=UTC)


def _column(grid: tuple[tuple[str | None, ...], ...], step: int) -> dict[str, tuple[int, ...]]:
    held: dict[str, list[int]] = {}
    for gpu, row in enumerate(grid):
        if step < len(row) and row[step] is not None:
            held.setdefault(str(row[step]), []).append(gpu)
    return {job: tuple(gpus) for job, gpus in held.items()}


def _two_hours(instance: Instance, amended_jobs: set[str]) -> Instance:
    """The instance cut to its first two steps; jobs an amendment starts may start at step 1."""
    return replace(
        instance,
        horizon_steps=2,
        batch_jobs=tuple(
            replace(job, release_step=min(job.release_step, 1)) if job.id in amended_jobs else job
            for job in instance.batch_jobs
        ),
        realtime_jobs=tuple(replace(rt, demand=rt.demand[:2]) for rt in instance.realtime_jobs),
        down=tuple(
            DownWindow(w.gpu, w.start_step, min(w.end_step, 2)) for w in instance.down if w.start_step < 2
        ),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=scenarios(max_gpus=32, max_jobs=12, horizon=6), data=st.data())
def test_an_amendment_only_adds_and_keeps_the_hours_legal(
    doc: dict[str, object], data: st.DataObject
) -> None:
    instance = instance_of(doc)
    grid = plan(instance, PolicyName.FAST, SolveOptions(budget_ms=2.0, wall_clock=False)).grid
    before, held, next_hour = _column(grid, 0), _column(grid, 1), _column(grid, 2)
    apps = [App(rt.id, rt.priority, rt.swap_cap, requests_per_gpu_hour=1.0) for rt in instance.realtime_jobs]
    need = {app.id: data.draw(st.integers(0, instance.gpus), label=f"need {app.id}") for app in apps}
    placed_early = set(before) | set(held)
    queued = {job.id: job.gpus for job in instance.queued_jobs if job.id not in placed_early}
    starting = [job for job in next_hour if job in queued]
    down = frozenset(g for g in range(instance.gpus) if instance.down_masks[1] >> g & 1)
    additions = propose(
        gpus=instance.gpus,
        down=down,
        held=held,
        before=before,
        apps=apps,
        need=need,
        next_hour=next_hour,
        starting=starting,
    )
    problems = check_amendment(
        additions,
        gpus=instance.gpus,
        down=down,
        held=held,
        before=before,
        apps={app.id: app for app in apps},
        queued=queued,
    )
    assert problems == []
    # Nothing committed moves or goes: every job keeps every GPU it held.
    amended = {job: set(gpus) for job, gpus in held.items()}
    for a in additions:
        assert amended.get(a.job, set()).isdisjoint(a.gpus)
        amended.setdefault(a.job, set()).update(a.gpus)
    for job, gpus in held.items():
        assert set(gpus) <= amended[job]
    for job in {a.job for a in additions} & set(held):
        assert job in need  # only a real-time app grows; a batch block never does
    # The amended hour after the hour before is a legal plan of the contract.
    rows = [[None, None] for _ in range(instance.gpus)]
    for step, column in ((0, before), (1, {j: tuple(g) for j, g in amended.items()})):
        for job, gpus in column.items():
            for gpu in gpus:
                rows[gpu][step] = job  # type: ignore[call-overload]
    two = _two_hours(instance, {a.job for a in additions if a.job in queued})
    assert check_plan(two, tuple(tuple(row) for row in rows)) == []
    # A real-time app gets what it needs, up to its swap cap's room and the idle GPUs.
    for app in apps:
        added = sum(len(a.gpus) for a in additions if a.job == app.id)
        assert len(held.get(app.id, ())) + added <= max(need[app.id], len(held.get(app.id, ())))


def test_propose_prefers_the_next_hours_gpus_and_starts_planned_jobs() -> None:
    chat = App("chat", 80.0, swap_cap=2, requests_per_gpu_hour=10.0)
    additions = propose(
        gpus=8,
        down=frozenset({7}),
        held={"chat": (6,), "train": (0, 1)},
        before={"chat": (6,)},
        apps=[chat],
        need={"chat": 4},
        next_hour={"chat": (3, 5, 6), "quant": (4,)},
        starting=["quant"],
    )
    # Swap cap 2: two GPUs, GPU 5 first (the next hour's plan gives it to chat), then GPU 3.
    assert additions == [Assignment("chat", (3, 5)), Assignment("quant", (4,))]


def test_gpus_an_app_released_at_the_hour_come_back_within_its_swap_cap() -> None:
    chat = App("chat", 80.0, swap_cap=2, requests_per_gpu_hour=10.0)
    before = {"chat": (0, 1, 2, 3)}  # the commit let 2 and 3 go: the whole swap cap used

    def proposed(held: dict[str, tuple[int, ...]], need: int) -> list[Assignment]:
        return propose(
            gpus=8,
            down=frozenset(),
            held=held,
            before=before,
            apps=[chat],
            need={"chat": need},
            next_hour={},
            starting=[],
        )

    assert proposed({"chat": (0, 1), "train": (4, 5, 6, 7)}, 4) == [Assignment("chat", (2, 3))]
    # Taking them back narrows the change to nothing: the cap's room is whole again.
    held = {"chat": (0, 1), "train": (4, 5)}
    more = proposed(held, 8)
    assert more == [Assignment("chat", (2, 3, 6, 7))]
    apps = {"chat": chat}
    assert (
        check_amendment(more, gpus=8, down=frozenset(), held=held, before=before, apps=apps, queued={}) == []
    )
    from_two = {"chat": (0, 1)}
    assert check_amendment(
        more, gpus=8, down=frozenset(), held=held, before=from_two, apps=apps, queued={}
    ) == ["chat: 4 GPUs change from the hour before, more than its swap cap 2"]


def _store_with_committed_hour(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/amend.db"
    store = open_store(url)
    try:
        store.save_cluster(Cluster(gpus=8))
        store.save_app(App("chat", 80.0, swap_cap=2, requests_per_gpu_hour=10.0))
        estimate = JobEstimate(gpus=2, hours_p50=3.0, hours_p90=4.0)
        for job_id in ("late", "big"):
            store.add_job(
                Job(
                    job_id,
                    JobKind.TRAINING,
                    50.0,
                    {"id": job_id},
                    H0 - timedelta(minutes=20),
                    estimate=estimate,
                    team="ml" if job_id == "late" else None,
                )
            )
        commit_by_hand(store, (H0 - STEP, H0), (Assignment("chat", (6, 7)),), gpus=8)
    finally:
        store.close()
    return url


def test_amend_stores_numbered_additions_that_start_jobs_and_report_shows_them(tmp_path: Path) -> None:
    url = _store_with_committed_hour(tmp_path)
    store = open_store(url)
    executor = InMemoryExecutor()
    try:
        at = H0 + timedelta(minutes=30)
        first = amend(store, at, [Assignment("chat", (5,)), Assignment("late", (0, 1))], executor=executor)
        second = amend(store, at + timedelta(minutes=10), [Assignment("chat", (4,))], executor=executor)
        assert first is not None and second is not None
        assert (first.seq, second.seq) == (1, 2)
        assert executor.amendments == [first, second]
        allocation = hour_allocation(store, H0)
        assert allocation is not None
        assert {a.job: a.gpus for a in allocation.assignments} == {
            "chat": (4, 5, 6, 7),
            "late": (0, 1),
        }
        late = store.job("late")
        assert late is not None and late.state is JobState.RUNNING and late.started_at == at
        assert amend(store, at, []) is None
    finally:
        store.close()
    rows = json.loads(run_cli("report", "commits", "--db", url, "--json").out)
    amended = [(r["job"], r["amendment"], r["at"]) for r in rows if r["amendment"] is not None]
    assert amended == [
        ("chat", 1, "2026-12-02T10:30:00+00:00"),
        ("late", 1, "2026-12-02T10:30:00+00:00"),
        ("chat", 2, "2026-12-02T10:40:00+00:00"),
    ]
    assert [(r["job"], r["amendment"]) for r in rows if r["amendment"] is None] == [("chat", None)] * 2
    # A team's view keeps only its jobs' additions (and the amendments that add any).
    ours = json.loads(run_cli("report", "commits", "--db", url, "--team", "ml", "--json").out)
    assert [(r["job"], r["amendment"]) for r in ours] == [("late", 1)]


@pytest.mark.parametrize(
    ("additions", "message"),
    [
        ([Assignment("chat", (7,))], "chat: GPU 7 is committed in this hour"),
        (
            [Assignment("chat", (3, 4, 5))],
            "chat: 3 GPUs change from the hour before, more than its swap cap 2",
        ),
        ([Assignment("late", (1, 2))], "late: needs an aligned block of 2 GPUs; got [1, 2]"),
        ([Assignment("nobody", (0,))], "nobody: neither a real-time app nor a queued job"),
        ([Assignment("chat", (8,))], "chat: GPU 8 is not in the cluster's 0..7"),
    ],
)
def test_an_illegal_amendment_is_refused_and_nothing_is_stored(
    tmp_path: Path, additions: list[Assignment], message: str
) -> None:
    url = _store_with_committed_hour(tmp_path)
    store = open_store(url)
    try:
        with pytest.raises(InputError, match=re.escape(message)):
            amend(store, H0 + timedelta(minutes=30), additions)
        assert store.amendments() == []
        with pytest.raises(InputError, match=re.escape("`hour` must be an hour that is committed")):
            amend(store, H0 + STEP, [Assignment("chat", (5,))])
    finally:
        store.close()


def test_observed_traffic_is_read_at_its_rate() -> None:
    assert ObservedTraffic("chat", H0, 600.0, 30.0).hourly_rate() == 1200.0


def test_promises_off_score_and_plan_as_the_contract() -> None:
    jobs = tuple(
        BatchJob(f"j{i}", JobKind.TRAINING, priority=10.0 * (i + 1), gpus=2, duration_steps=3, promise_step=i)
        for i in range(6)
    )
    rt = RealtimeJob("chat", 80.0, demand=tuple([2] * 12), swap_cap=1)
    promised = Instance("p", gpus=8, horizon_steps=12, batch_jobs=jobs, realtime_jobs=(rt,))
    plain = replace(promised, batch_jobs=tuple(replace(j, promise_step=None) for j in jobs))
    options = SolveOptions(budget_ms=5.0, wall_clock=False)
    for policy in (PolicyName.FAST, PolicyName.PRIORITY_BACKFILL):
        with_promises, without = plan(promised, policy, options), plan(plain, policy, options)
        assert with_promises.grid == without.grid
        assert with_promises.metrics == without.metrics
        assert "promise_cost" not in with_promises.metrics.as_dict()
    # Weighed, a promise costs its delay: the objective says so, and the cost is reported.
    weighed = replace(promised, promise_penalty=1.0)
    result = plan(weighed, PolicyName.FAST, options)
    cost = result.metrics.promise_cost
    assert cost is not None and cost >= 0
    m = result.metrics
    assert m.objective == pytest.approx(m.value - m.penalty - cost)


def test_a_promised_job_is_weighed_against_later_higher_priority_work() -> None:
    """Two jobs for the same 4 GPUs: the promised one first only when promises weigh.

    Without a penalty the higher-priority arrival goes first (its value decays less);
    with one, delaying the promised job two steps costs more than the order gains."""
    promised = BatchJob("promised", JobKind.TRAINING, priority=10.0, gpus=4, duration_steps=2, promise_step=0)
    urgent = BatchJob("urgent", JobKind.TRAINING, priority=12.0, gpus=4, duration_steps=2)
    instance = Instance("w", gpus=4, horizon_steps=6, batch_jobs=(promised, urgent), realtime_jobs=())
    options = SolveOptions(budget_ms=5.0, wall_clock=False)
    for policy in (PolicyName.FAST, PolicyName.FULL):
        plain = plan(instance, policy, options)
        weighed = plan(replace(instance, promise_penalty=1.0), policy, options)
        assert plain.grid[0][0] == "urgent", policy
        assert weighed.grid[0][0] == "promised" and weighed.metrics.promise_cost == 0, policy
    # Arriving work worth more than the penalty still goes first.
    precious = replace(urgent, priority=1000.0)
    first = plan(
        replace(instance, batch_jobs=(promised, precious), promise_penalty=1.0), PolicyName.FAST, options
    )
    assert first.grid[0][0] == "urgent"


def test_a_delay_within_the_slack_is_free_and_a_broken_promise_costs_its_break() -> None:
    """The promise weighed as it is judged: a start within the slack keeps it at no cost,
    one past it costs the break at once and a step of the penalty for each step beyond, per
    job (times its priority), whatever its width."""
    promised = BatchJob("promised", JobKind.TRAINING, priority=10.0, gpus=4, duration_steps=2, promise_step=0)
    short = BatchJob("urgent", JobKind.TRAINING, priority=12.0, gpus=4, duration_steps=1)
    shaped = Instance(
        "s",
        gpus=4,
        horizon_steps=6,
        batch_jobs=(promised, short),
        promise_penalty=4.0,
        promise_slack_steps=1,
        promise_break_steps=4.0,
    )
    assert shaped.promise_cost(promised, 0) == shaped.promise_cost(promised, 1) == 0
    assert shaped.promise_cost(promised, 2) == 4 * 10 * (1 + 4)
    assert shaped.promise_cost(promised, 4) == 4 * 10 * (3 + 4)
    assert shaped.promise_cost(promised, None) == 4 * 10 * (6 - 1 + 4)  # left out: as at the end
    assert shaped.promise_cost(replace(promised, gpus=1), 2) == shaped.promise_cost(promised, 2)
    linear = replace(shaped, promise_slack_steps=0, promise_break_steps=0.0)
    assert linear.promise_cost(promised, 1) == 4 * 10
    # Two steps of a job worth much more: late by one step past the slack.
    long = replace(short, priority=70.0, duration_steps=2)
    options = SolveOptions(budget_ms=5.0, wall_clock=False)
    for policy in (PolicyName.FAST, PolicyName.FULL):
        # one step late keeps the promise: the arrival goes first, free
        within = plan(shaped, policy, options)
        assert within.grid[0][0] == "urgent" and within.metrics.promise_cost == 0, policy
        # without the slack that step costs more than the order gains
        assert plan(linear, policy, options).grid[0][0] == "promised", policy
        # past the slack, the step beyond alone is worth paying; with the break it is not
        no_break = replace(shaped, batch_jobs=(promised, long), promise_break_steps=0.0)
        assert plan(no_break, policy, options).grid[0][0] == "urgent", policy
        kept = plan(replace(no_break, promise_break_steps=4.0), policy, options)
        assert kept.grid[0][0] == "promised" and kept.metrics.promise_cost == 0, policy


def test_the_service_gives_its_plans_the_promise_terms_in_steps() -> None:
    from gpuplan.app.core.config import PromiseTerms

    terms = PromiseTerms(penalty=0.5, slack_hours=1, break_hours=4.0)
    assert terms.scenario_keys(60) == {"promise_penalty": 0.5, "promise_slack": 1, "promise_break": 4.0}
    assert terms.scenario_keys(30) == {"promise_penalty": 0.5, "promise_slack": 2, "promise_break": 8.0}
    assert PromiseTerms(penalty=0.0).scenario_keys(60) == {}  # off: the contract's scenario
    with pytest.raises(
        InputError, match=re.escape("`promise_slack_hours` must be an integer in [0, 24]; got 25.")
    ):
        PromiseTerms(slack_hours=25)
    with pytest.raises(
        InputError, match=re.escape("`promise_break_hours` must be a number in [0, 168]; got -1")
    ):
        PromiseTerms(break_hours=-1.0)


def test_the_service_reads_its_promise_terms_from_the_config(tmp_path: Path) -> None:
    import yaml

    from gpuplan.app.core.config import PromiseTerms, load_config

    base = {"cluster": {"gpus": 4}, "apps": [{"id": "chat", "requests_per_gpu_hour": 100}]}
    path = tmp_path / "gpuplan.yaml"
    path.write_text(yaml.safe_dump(base))
    assert load_config(path).promises == PromiseTerms(penalty=0.2, slack_hours=1, break_hours=28.0)
    path.write_text(yaml.safe_dump({**base, "promise_slack_hours": 2, "promise_break_hours": 6}))
    assert load_config(path).promises == PromiseTerms(penalty=0.2, slack_hours=2, break_hours=6.0)
    path.write_text(yaml.safe_dump({**base, "promise_break_hours": 200}))
    with pytest.raises(
        InputError, match=re.escape("`promise_break_hours` must be a number in [0, 168]; got 200.")
    ):
        load_config(path)


def test_the_cycle_within_a_committed_hour_starts_the_next_hours_work_now(tmp_path: Path) -> None:
    from gpuplan.app.adapters.executors import JsonLinesExecutor
    from gpuplan.app.cycle.amend import amend_cycle
    from gpuplan.app.jobs.submit import submit

    store = open_store(f"sqlite:///{tmp_path}/cycle.db")
    feed = tmp_path / "commits.jsonl"
    executor = JsonLinesExecutor(feed)
    config = ServiceConfig(
        cluster=Cluster(gpus=8), apps=(), models_dir=tmp_path / "models", commits_file=feed
    )
    try:
        store.save_cluster(config.cluster)
        first, none = amend_cycle(store, H0, config, executor)
        assert first.committed and none is None  # the hour's first cycle commits; nothing to amend
        spec = {"id": "bi-1", "kind": "batch_inference", "priority": 90, "gpus": 4, "hours": 2}
        submit(store, spec, H0 + timedelta(minutes=20), config, replan=False)
        at = H0 + timedelta(minutes=30)
        report, amendment = amend_cycle(store, at, config, executor)
        assert not report.committed and report.start == H0 + STEP
        assert amendment is not None and amendment.seq == 1
        assert [a.job for a in amendment.assignments] == ["bi-1"]
        # the cycle's line says what the amendment did, not only that nothing was committed
        assert (report.amendment, report.jobs_amended, report.realtime_gpus_amended) == (1, 1, 0)
        assert report.log_line().endswith(" amendment=1 jobs_amended=1 realtime_gpus_amended=0")
        job = store.job("bi-1")
        assert job is not None and job.state is JobState.RUNNING and job.started_at == at
        # The next hour's cycle plans from the amended hour: the job stays on its block.
        nxt, _ = amend_cycle(store, H0 + STEP + timedelta(minutes=5), config, executor)
        commit = store.commit(H0 + STEP)
        assert nxt.committed and commit is not None
        assert [a for a in commit.assignments if a.job == "bi-1"] == list(amendment.assignments)
    finally:
        store.close()
    lines = [json.loads(line) for line in feed.read_text().splitlines()]
    assert {
        "hour": H0.isoformat(),
        "seq": 1,
        "job": "bi-1",
        "gpus": list(amendment.assignments[0].gpus),
        "amendment": 1,
        "at": at.isoformat(),
    } in lines


@contextmanager
def _full_hour(tmp_path: Path) -> Iterator[tuple[Store, ServiceConfig, dict[str, tuple[int, ...]]]]:
    """8 GPUs, H0 committed with "long" (8 hours) and "short" (3) on a block of 4 each: the store,
    its config and the blocks."""
    from gpuplan.app.cycle.amend import amend_cycle
    from gpuplan.app.jobs.submit import submit

    store = open_store(f"sqlite:///{tmp_path}/freed.db")
    config = ServiceConfig(cluster=Cluster(gpus=8), apps=(), models_dir=tmp_path / "models")
    try:
        store.save_cluster(config.cluster)
        for job_id, hours in (("long", 8), ("short", 3)):
            spec = {"id": job_id, "kind": "batch_inference", "priority": 50, "gpus": 4, "hours": hours}
            submit(store, spec, H0 - timedelta(minutes=10), config, replan=False)
        first, _ = amend_cycle(store, H0, config)
        committed = store.commit(H0)
        assert first.committed and committed is not None
        blocks = {a.job: a.gpus for a in committed.assignments}
        assert set(blocks) == {"long", "short"}  # the cluster is full
        yield store, config, blocks
    finally:
        store.close()


def _submit_next(store: Store, config: ServiceConfig, at: datetime) -> None:
    from gpuplan.app.jobs.submit import submit

    spec = {"id": "next", "kind": "batch_inference", "priority": 90, "gpus": 4, "hours": 2}
    submit(store, spec, at, config, replan=False)


def test_a_block_freed_within_the_hour_starts_the_next_hours_work_at_the_next_cycle(tmp_path: Path) -> None:
    from gpuplan.app.cycle.amend import amend_cycle
    from gpuplan.app.cycle.finish import finish

    with _full_hour(tmp_path) as (store, config, blocks):
        committed = store.commit(H0)
        # "short" ends at :05, well before its estimate; new work arrives at :10.
        finish(store, "short", H0 + timedelta(minutes=5), Outcome.OK)
        _submit_next(store, config, H0 + timedelta(minutes=10))
        at = H0 + timedelta(minutes=30)
        _, amendment = amend_cycle(store, at, config)
        # The :30 cycle starts it on the block "short" freed; "long" keeps its own.
        assert amendment is not None
        assert list(amendment.assignments) == [Assignment("next", blocks["short"])]
        assert store.commit(H0) == committed
        job = store.job("next")
        assert job is not None and job.state is JobState.RUNNING and job.started_at == at
        allocation = hour_allocation(store, H0)
        assert allocation is not None
        assert {a.job: a.gpus for a in allocation.assignments} == {**blocks, "next": blocks["short"]}
        # A block still held by a running job is never taken.
        with pytest.raises(InputError, match=f"GPU {blocks['long'][0]} is committed in this hour"):
            amend(store, at, [Assignment("late", blocks["long"])])


def test_a_completion_within_the_hour_starts_the_next_hours_work_at_once(tmp_path: Path) -> None:
    from gpuplan.app.cycle.amend import answer_freed
    from gpuplan.app.cycle.finish import finish

    with _full_hour(tmp_path) as (store, config, blocks):
        _submit_next(store, config, H0 + timedelta(minutes=2))
        at = H0 + timedelta(minutes=5)
        # A job that held nothing in the hour frees nothing: no re-plan.
        runs = len(store.runs())
        assert answer_freed(store, at, config, ["next"]) is None and len(store.runs()) == runs
        finish(store, "short", at, Outcome.OK)
        amendment = answer_freed(store, at, config, ["short"])
        assert amendment is not None and amendment.made_at == at
        assert list(amendment.assignments) == [Assignment("next", blocks["short"])]
        job = store.job("next")
        assert job is not None and job.state is JobState.RUNNING and job.started_at == at


def test_utilization_of_a_past_hour_reads_its_amendments_and_what_was_down_then(tmp_path: Path) -> None:
    """Work an amendment placed in a committed hour is in that hour's row; the hour's down GPUs
    are those it was committed with, not today's cluster's (a node resumed since)."""
    from gpuplan.app.cycle.amend import amend_cycle
    from gpuplan.app.jobs.submit import submit
    from gpuplan.app.views.report_inputs import utilization_inputs_in
    from gpuplan.app.views.reports import utilization

    store = open_store(f"sqlite:///{tmp_path}/util.db")
    down = (DownWindowRecord(6, H0, None), DownWindowRecord(7, H0, None))
    config = ServiceConfig(cluster=Cluster(gpus=8, down=down), apps=(), models_dir=tmp_path / "models")
    try:
        store.save_cluster(config.cluster)
        amend_cycle(store, H0, config)
        spec = {"id": "bi-1", "kind": "batch_inference", "priority": 90, "gpus": 4, "hours": 2}
        submit(store, spec, H0 + timedelta(minutes=20), config, replan=False)
        _, amendment = amend_cycle(store, H0 + timedelta(minutes=30), config)
        assert amendment is not None and [a.job for a in amendment.assignments] == ["bi-1"]
        store.save_cluster(Cluster(gpus=8))  # the node is back: no window any more
        cluster, commits, kinds, down_at = utilization_inputs_in(store, None)
        report = utilization(commits, cluster, kinds, down_at)
    finally:
        store.close()
    row = next(r for r in report.rows if r.hour == H0)
    assert (row.batch_inference, row.down, row.idle) == (4, 2, 2)
