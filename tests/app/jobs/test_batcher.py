"""Group commit and warm starts on the served submit path, and the reads served from memory.

Real SQLite files and the demo service after one cycle (tests/http_fixtures.py); plans made
on work-only budgets, so that two services given the same submits plan the same.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.errors import InputError
from contract.records import ApiToken, DownWindowRecord, Job, JobEstimate, JobState, Outcome, RunMode, Scope
from contract.scenario import JobKind
from contract.scenario_io import parse_scenario
from gpuplan.app.core.bridge import EntryTexts, encoded_scenario, inputs_hash
from gpuplan.app.core.config import demo_config, load_config
from gpuplan.app.core.tokens import NotSignedInError, authenticate, create_token, sha256_hex
from gpuplan.app.jobs import batcher, promises
from gpuplan.app.jobs.changes import FreshMarks
from gpuplan.app.jobs.submit import SubmitResult, answer, hot_path_plan
from gpuplan.app.views.status import QueueRows, Status, status
from scheduler.check import check_plan
from scheduler.model import HOT_PATH_BUDGET_MS
from storage.store import Store
from tests.http_fixtures import T0, Served, served
from tests.service_fixtures import _in_tmp_path, models_dir, quick_config
from tests.waiting import wait_until

__all__ = ["_in_tmp_path", "models_dir"]

CALLERS = 10


def _spec(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"job-{n}",
        "kind": "batch_inference",
        "gpus": (1, 2, 4)[n % 3],
        "hours": 1 + n % 5,
        **extra,
    }


@contextmanager
def _service(
    tmp_path: Path, models: Path, name: str = "gpuplan", clock: Callable[[], datetime] | None = None
) -> Iterator[Served]:
    config = quick_config(models)
    with served(f"sqlite:///{tmp_path / f'{name}.db'}", models, config=config, clock=clock) as service:
        yield service


@contextmanager
def _clocked(tmp_path: Path, models: Path) -> Iterator[tuple[Served, Callable[[], None]]]:
    """A service on a clock of its own, and a plan cycle ten minutes on (within the hour)."""
    now = [T0]
    with _service(tmp_path, models, clock=lambda: now[0]) as service:

        def cycle() -> None:
            now[0] = T0 + timedelta(minutes=10)
            service.cycle(now[0])

        yield service, cycle


def _token(service: Served, role: str = "admin") -> ApiToken:
    return authenticate(service.store, service.tokens[role])


def _submit_together(service: Served, specs: list[dict[str, Any]]) -> list[SubmitResult | BaseException]:
    """Submit ``specs`` from one thread each while the plan lock is held, so that the first
    waits for the lock and the rest wait for it: two batches, the first one job, then the rest."""
    ctx = service.context
    token = _token(service)
    answers: list[SubmitResult | BaseException] = [InputError("-", "an answer", "none")] * len(specs)

    def one(i: int) -> None:
        try:
            answers[i] = ctx.submit(token, specs[i], source="test")
        except BaseException as error:  # the test reads it
            answers[i] = error

    with ctx.plan_lock():
        threads = [threading.Thread(target=one, args=(0,))]
        threads[0].start()
        wait_until(lambda: ctx.batcher._running and not ctx.batcher._waiting)  # the first taken
        for i in range(1, len(specs)):  # one at a time: the batch keeps their order
            threads.append(threading.Thread(target=one, args=(i,)))
            threads[-1].start()
            wait_until(lambda i=i: len(ctx.batcher._waiting) == i)
    for thread in threads:
        thread.join(60)
    return answers


def test_concurrent_submits_are_stored_once_in_two_batches_and_each_is_in_the_next_status(
    tmp_path: Path, models_dir: Path
) -> None:
    with _service(tmp_path, models_dir) as service:
        answers = _submit_together(service, [_spec(n) for n in range(CALLERS)])
        assert all(isinstance(a, SubmitResult) for a in answers), answers
        stats = service.context.batcher.stats
        assert stats.sizes == [1, CALLERS - 1]  # the rest waited and went in one batch
        # the cycle committed this hour: its plan was made afresh from the next ahead of the
        # first batch, and both batches are inserted into it
        assert (stats.prepared, stats.fresh, stats.warm) == (1, 0, 2)
        stored = [job.id for job in service.store.jobs() if job.id.startswith("job-")]
        assert sorted(stored) == sorted(f"job-{n}" for n in range(CALLERS))
        queue = {row["job"]: row for row in service.context.status(None)["queue"]}
        run = service.store.run()
        assert run is not None and run.mode is RunMode.SUBMIT and run.extra.get("warm_from") is not None
        for answer in answers:
            assert isinstance(answer, SubmitResult)
            expected = None if answer.planned_start is None else answer.planned_start.isoformat()
            assert queue[answer.job]["planned_start"] == expected
        # the warm run is a legal plan of the scenario stored with it
        assert check_plan(parse_scenario(run.scenario), run.grid) == []


def test_the_callers_a_batch_answered_go_together_in_the_next_and_a_lone_one_never_waits(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a batch of nine, the next batch waits until nine submits wait: arriving one by
    one, they go together, not the first alone. A caller whose last batch was its own does not
    wait for the window (a minute here, so that neither case hangs on the machine's speed)."""
    monkeypatch.setattr(batcher, "GATHER_S", 60.0)
    with _service(tmp_path, models_dir) as service:
        ctx = service.context
        token = _token(service)
        pool = ThreadPoolExecutor(CALLERS - 1)
        for n in range(2):  # one caller, one by one: each batch its own, none waits
            pool.submit(ctx.submit, token, _spec(n), source="test").result(timeout=30)
        _submit_together(service, [_spec(n) for n in range(2, 2 + CALLERS)])
        assert ctx.batcher.stats.sizes == [1, 1, 1, CALLERS - 1]
        answers = []
        for i in range(CALLERS - 1):  # the nine come back one at a time
            spec = _spec(100 + i)
            answers.append(pool.submit(ctx.submit, token, spec, source="test"))
            wait_until(lambda i=i: len(ctx.batcher._waiting) == i + 1 or ctx.batcher.stats.batches > 4)
        assert all(isinstance(a.result(timeout=30), SubmitResult) for a in answers)
        pool.shutdown()
        assert ctx.batcher.stats.sizes == [1, 1, 1, CALLERS - 1, CALLERS - 1]


def test_a_job_the_cluster_cannot_hold_is_refused_alone_and_its_batch_goes_on(
    tmp_path: Path, models_dir: Path
) -> None:
    """The batch checks its jobs' sizes against the cluster (read once for them all): the one
    larger than the cluster gets its error, naming the field; the others are stored and planned."""
    with _service(tmp_path, models_dir) as service:
        gpus = service.store.cluster().gpus  # type: ignore[union-attr]
        specs = [_spec(0), _spec(1, gpus=2 * gpus), _spec(2)]
        answers = _submit_together(service, specs)
        assert isinstance(answers[0], SubmitResult) and isinstance(answers[2], SubmitResult)
        assert isinstance(answers[1], InputError)
        assert f"`gpus` must be at most the cluster's {gpus} GPUs; got {2 * gpus}" in str(answers[1])
        assert service.context.batcher.stats.sizes == [1, 1]  # the refused one alone left out
        assert service.store.job("job-1") is None
        assert {"job-0", "job-2"} <= {job.id for job in service.store.jobs()}


def test_a_batch_plans_as_its_submits_one_by_one_would(tmp_path: Path, models_dir: Path) -> None:
    """A batch leaves the plan that its submits, one by one, leave; each answer is its job's
    start in that plan (one by one, a later submit may still move an earlier one's start:
    a batch answers with where each job stands once all of them are in)."""
    specs = [_spec(n, priority=10 + 7 * n) for n in range(6)]
    with (
        _service(tmp_path, models_dir, "together") as together,
        _service(tmp_path, models_dir, "alone") as alone,
    ):
        batched = _submit_together(together, specs)
        token = _token(alone)
        for spec in specs:
            alone.context.submit(token, spec, source="test")
        assert alone.context.batcher.stats.sizes == [1] * len(specs)
        assert alone.context.batcher.stats.warm == len(specs)  # the first into the plan made ahead
        planned_together, planned_alone = together.store.run(), alone.store.run()
        assert planned_together is not None and planned_alone is not None
        assert planned_together.grid == planned_alone.grid
        assert planned_together.objective == planned_alone.objective
        # the second batch (job-1 .. job-5) answers from the plan it leaves, the final one
        final = {
            job.id: answer(planned_alone, job, job.promised_start)
            for job in alone.store.jobs()
            if job.id.startswith("job-")
        }
        # and the same promises: each counts the work submitted before it, weighed by the next
        promised_together, promised_alone = (
            {job.id: job.promised_start for job in service.store.jobs()} for service in (together, alone)
        )
        assert promised_together == promised_alone
        assert any(
            job.promised_start != final[job.id].planned_start for job in alone.store.jobs() if job.id in final
        )
    assert batched[1:] == [final[spec["id"]] for spec in specs[1:]]
    assert any(a.planned_start is not None for a in final.values())


def _unpromised(entry: dict[str, Any], job: str) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if key != "promise" or entry["id"] != job}


def test_a_warm_batch_stores_its_scenario_as_planned_and_hashed_from_one_encoding(
    tmp_path: Path, models_dir: Path
) -> None:
    """The batch's scenario is encoded once, for the store and the inputs' hash: read back, it
    is the scenario the batch planned (the one the next batch starts from), and its hash is
    the one any run of those inputs gets (bridge.inputs_hash)."""
    with _service(tmp_path, models_dir) as service:
        for n in range(1, 4):  # each batch's entries after the first reuse their texts (EntryTexts)
            service.context.submit(_token(service), _spec(n, priority=10 + 20 * n), source="test")
            assert service.context.batcher.stats.warm == n
            stored, kept = service.store.run(), service.context.batcher._base
            assert stored is not None and kept is not None
            assert "warm_from" in stored.extra  # a warm run (from the plan made ahead: null)
            # the one kept adds the promises just made, as the next cycle's snapshot will have them
            assert stored.scenario == {
                **kept.run.scenario,
                "jobs": [_unpromised(j, f"job-{n}") for j in kept.run.scenario["jobs"]],
            }
            assert stored.inputs_hash == inputs_hash(stored.scenario) == kept.run.inputs_hash
            assert parse_scenario(stored.scenario).batch_jobs[-1].id == f"job-{n}"


def test_entry_texts_encode_as_one_encoding_of_the_whole_would() -> None:
    """Entries seen last time are reused by identity; a replaced or a new one is encoded."""
    first = {"name": "s", "gpus": 8, "jobs": [{"id": "a", "b": 1}, {"id": "b", "x": [1.5]}], "decay": 0.9}
    second = {**first, "jobs": [first["jobs"][0], {**first["jobs"][1], "promise": 2}, {"id": "c"}]}
    texts = EntryTexts()
    for document in (first, second, {**second, "jobs": []}, second):
        reused = encoded_scenario(document, entries=texts)
        assert reused[0].text == encoded_scenario(document)[0].text
        assert json.loads(reused[0].text) == document and reused[1] == inputs_hash(document)
    with pytest.raises(ValueError):
        encoded_scenario({**first, "jobs": [{"id": "d", "x": float("nan")}]}, entries=texts)


def test_queue_rows_are_the_rows_built_afresh_and_encode_as_one_encoding_would(
    tmp_path: Path, models_dir: Path
) -> None:
    """From one status to the next, a queued job's row is reused while the job, its planned start
    and what its reason reads of the plan are unchanged, and built again otherwise; the texts of
    any team's status are one encoding of it."""

    def text(state: Status) -> str:
        document = state.as_dict()
        del document["at"]
        return json.dumps(document, separators=(",", ":"))

    with _service(tmp_path, models_dir) as service:
        ctx, token = service.context, _token(service)
        rows = QueueRows()
        last: list[dict[str, Any]] = []
        carried = 0  # rows reused from the status after the submit before
        for n in range(6):
            big = {"gpus": 8, "hours": 20} if n % 2 else {}  # some the plan cannot start
            ctx.submit(token, _spec(n, priority=10 + 15 * n, **big), source="test")
            if n == 3:
                ctx.cancel(token, "job-1")
            mirror = ctx.changes.mirror_at(service.store, service.store.marks())  # as the served status
            known = (mirror.jobs, mirror.run)
            fresh = status(service.store, ctx.clock(), known=known)
            reused = status(service.store, ctx.clock(), known=known, rows=rows)
            assert reused.as_dict() == fresh.as_dict()
            for team in (None, token.team, "nobody"):
                assert reused.of_team(team).text_without_at(rows) == text(fresh.of_team(team)), team
            carried += sum(any(row is old for old in last) for row in reused.queue)
            again = status(service.store, ctx.clock(), known=known, rows=rows)  # nothing changed
            assert all(a is b for a, b in zip(again.queue, reused.queue, strict=True))
            last = again.queue
        assert carried > 0 and "job-1" not in {row["job"] for row in reused.queue}
        assert any(row["planned_start"] is None for row in reused.queue)
        # plans that move what the reasons read and not the starts: the same starts from an hour
        # earlier (each wait one hour longer), no real-time GPUs, a one-GPU cluster, every GPU
        # real-time
        run = known[1]
        assert run is not None
        earlier = replace(run, start=run.start - timedelta(hours=1), grid=[[None, *r] for r in run.grid])
        realtime = {j["id"] for j in run.scenario["jobs"] if j["kind"] == "realtime"}
        for variant in (
            earlier,
            replace(run, grid=[[None if c in realtime else c for c in r] for r in run.grid]),
            replace(run, scenario={**run.scenario, "gpus": 1}),
            replace(run, grid=[[min(realtime)] * len(r) for r in run.grid]),  # no GPU free
            run,
        ):
            fresh = status(service.store, ctx.clock(), known=(mirror.jobs, variant))
            reused = status(service.store, ctx.clock(), known=(mirror.jobs, variant), rows=rows)
            assert reused.as_dict() == fresh.as_dict()
            assert reused.text_without_at(rows) == text(fresh)
        # a row given by another status (not the last rows()) is encoded, not looked up
        assert rows.text(fresh.queue) == json.dumps(fresh.queue, separators=(",", ":"))


def test_the_served_status_reads_what_lies_beside_the_queue_once_per_read_of_the_queue(
    tmp_path: Path, models_dir: Path
) -> None:
    """The real-time apps' rows and the leader are read once for the statuses after a run of
    submits, and again after a cycle's commit (shown at once) and in the next hour; each
    served status is the one built afresh."""
    now = [T0 + timedelta(minutes=10)]
    with _service(tmp_path, models_dir, clock=lambda: now[0]) as service:
        ctx, token, store = service.context, _token(service), service.store
        reads = [0]
        last_commit = store.last_commit

        def counted(before: datetime | None = None) -> Any:
            reads[0] += 1
            return last_commit(before)

        store.last_commit = counted  # type: ignore[method-assign]

        def served_is_fresh() -> tuple[dict[str, Any], int]:
            """The served status, checked against one built afresh, and the commit reads it made."""
            before = reads[0]
            served_doc = json.loads(ctx.status_json(None))
            made = reads[0] - before
            assert served_doc == status(store, now[0]).as_dict()
            return served_doc, made

        seen_since = set()
        # (minutes on from T0, the job): two hours without a cycle, then a cycle that commits
        # the third hour after a status in it
        for minutes, n in ((5, 0), (5, 1), (5, 2), (65, 3), (65, 4), (125, 5), (135, 6), (135, 7)):
            if n == 6:
                service.cycle(T0 + timedelta(minutes=minutes))
            now[0] = T0 + timedelta(minutes=minutes)
            ctx.submit(token, _spec(n), source="test")
            document, served_reads = served_is_fresh()
            realtime = [r for r in document["running"] if r["kind"] == "realtime"]
            assert realtime, "the demo's apps hold GPUs in every committed hour"
            seen_since |= {r["since"] for r in realtime}
            # the first status after a cycle or in a new hour reads them, the others do not
            assert served_reads == (1 if n in (0, 3, 5, 6) else 0), n
        # the hour without a cycle shows the commit before it; the cycle's commit shows at once
        first = T0.replace(minute=0)
        assert seen_since == {first.isoformat(), (first + timedelta(hours=2)).isoformat()}


def test_a_submit_is_checked_on_the_cluster_as_this_processs_last_change_left_it(
    tmp_path: Path, models_dir: Path
) -> None:
    """The cluster read for a batch is kept while its base holds; a change (a poll that finds
    GPUs down for good) ends the base, and the next submit is checked on the cluster it left."""
    with _service(tmp_path, models_dir) as service:
        ctx, token, store = service.context, _token(service), service.store
        for n in range(2):  # the second is inserted into the first's plan, on its cluster
            ctx.submit(token, _spec(n), source="test")
        assert ctx.batcher.stats.warm >= 1
        cluster = store.cluster()
        assert cluster is not None
        gone = tuple(DownWindowRecord(gpu, T0 - timedelta(hours=1), None) for gpu in range(2, cluster.gpus))
        with ctx.plan_lock():
            store.save_cluster(replace(cluster, down=(*cluster.down, *gone)))
            ctx.changes.bump()  # as a poll does
        with pytest.raises(InputError, match="at most 2: the largest aligned block"):
            ctx.submit(token, _spec(2), source="test")  # four GPUs
        assert store.job("job-2") is None


def test_a_taken_id_in_a_batch_refuses_that_submit_alone(tmp_path: Path, models_dir: Path) -> None:
    with _service(tmp_path, models_dir) as service:
        answers = _submit_together(service, [_spec(0), _spec(1), _spec(1), _spec(2)])
        refused = [a for a in answers if isinstance(a, InputError)]
        assert len(refused) == 1 and "job-1" in str(refused[0])
        assert sorted(j.id for j in service.store.jobs() if j.id.startswith("job-")) == [
            "job-0",
            "job-1",
            "job-2",
        ]


def test_after_each_kind_of_change_the_next_submit_is_warm_but_after_another_process(
    tmp_path: Path, models_dir: Path
) -> None:
    """A change of this process makes the next base ahead of the next submit (the cycle's plan,
    or a fresh one); a change only the store's marks show (another process's) leaves the
    next submit to plan afresh."""
    with _clocked(tmp_path, models_dir) as (service, cycle):
        ctx, token = service.context, _token(service)
        stats = ctx.batcher.stats
        moves = [
            # the cycle's plan starts in the hour it committed: one from the next made ahead
            ("first", lambda: None, (1, 0)),
            ("none", lambda: None, (2, 0)),
            ("a cancel", lambda: ctx.cancel(token, "job-1"), (3, 0)),
            ("none", lambda: None, (4, 0)),
            (
                "a traffic push",
                lambda: ctx.push_traffic("lora-serving", [(T0.replace(minute=0), 100.0)]),
                (5, 0),
            ),
            (
                "another process's run",
                lambda: hot_path_plan(service.store, T0, ctx.config, ctx.forecasters),
                (5, 1),
            ),
            ("a cycle within the hour", cycle, (6, 1)),
        ]
        for n, (change, make, expected) in enumerate(moves):
            make()
            ctx.submit(token, _spec(n), source="test")
            assert (stats.warm, stats.fresh) == expected, change


def test_a_job_another_process_stores_while_a_batch_is_stored_is_in_the_next_plan(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marks a warm batch leaves are those of its own transaction: a job another process
    stores right after it moves the store's marks past them, so the next batch plans afresh
    with that job in, instead of taking the batch's run (which lacks it) as its base."""
    with _service(tmp_path, models_dir) as service:
        ctx, token = service.context, _token(service)
        other = Job(
            id="other-process-job",
            kind=JobKind.BATCH_INFERENCE,
            priority=50.0,
            spec={"id": "other-process-job", "kind": "batch_inference", "gpus": 1, "hours": 1},
            submitted_at=T0,
            estimate=JobEstimate(1, 1.0, 1.0),
        )
        record_submits = service.store.record_submits

        def and_another_process(jobs: list[Job], run: Any, **options: Any) -> Any:
            stored = record_submits(jobs, run, **options)
            monkeypatch.setattr(service.store, "record_submits", record_submits)
            service.store.add_job(other)  # as another process would, between two batches' reads
            return stored

        monkeypatch.setattr(service.store, "record_submits", and_another_process)
        ctx.submit(token, _spec(0), source="test")
        ctx.submit(token, _spec(1), source="test")
        stats = ctx.batcher.stats
        assert (stats.warm, stats.fresh) == (1, 1)
        run = service.store.run()
        assert run is not None
        assert "other-process-job" in {job["id"] for job in run.scenario["jobs"]}


def test_a_plan_older_than_a_cycle_period_is_not_warmed(tmp_path: Path, models_dir: Path) -> None:
    now = [T0]
    config = quick_config(models_dir)
    with served(f"sqlite:///{tmp_path / 'g.db'}", models_dir, config=config, clock=lambda: now[0]) as service:
        ctx, token = service.context, _token(service)
        ctx.submit(token, _spec(0), source="test")  # into the plan made ahead of it
        now[0] = T0 + timedelta(minutes=config.cycle_minutes + 1)
        ctx.submit(token, _spec(1), source="test")
        assert (ctx.batcher.stats.warm, ctx.batcher.stats.fresh) == (1, 1)


def test_reads_are_served_from_memory_and_rebuilt_after_each_kind_of_change(
    tmp_path: Path, models_dir: Path
) -> None:
    with _clocked(tmp_path, models_dir) as (service, cycle):
        ctx, token = service.context, _token(service)
        changes: list[tuple[str, Callable[[], object], Callable[[set[str]], bool]]] = [
            ("a submit", lambda: ctx.submit(token, _spec(1), source="test"), lambda q: "job-1" in q),
            ("a cancel", lambda: ctx.cancel(token, "job-1"), lambda q: "job-1" not in q),
            (
                "a traffic push",
                lambda: ctx.push_traffic("lora-serving", [(T0.replace(minute=0), 100.0)]),
                lambda q: True,
            ),
            ("a cycle", cycle, lambda q: True),
            (
                "another process's change",
                lambda: service.store.finish_job("job-0", T0, Outcome.CANCELLED, lambda job: None),
                lambda q: "job-0" not in q,
            ),
        ]
        ctx.submit(token, _spec(0), source="test")
        for change, make, holds in changes:
            first = ctx.status(None)
            builds = ctx.reads.builds
            assert ctx.status(None)["queue"] == first["queue"]
            assert ctx.reads.builds == builds, change  # served from memory
            make()
            after = ctx.status(None)
            assert ctx.reads.builds == builds + 2, change  # the whole status rebuilt once, and encoded
            assert holds({row["job"] for row in after["queue"]}), change
            team = ctx.status(token.team)  # filtered from the whole status, not built again
            assert ctx.reads.builds == builds + 3, change
            assert team["queue"] == [row for row in after["queue"] if row["team"] == token.team]
        assert service.store.job("job-0").state is JobState.DONE  # type: ignore[union-attr]


def test_fresh_marks_are_read_after_each_caller_asked_one_query_for_those_asking_together(
    tmp_path: Path, models_dir: Path
) -> None:
    with _service(tmp_path, models_dir) as service:
        store, in_flight, release = service.store, threading.Event(), threading.Event()

        def read() -> tuple[int, ...]:
            if not in_flight.is_set():  # the first query waits, begun before the change below
                in_flight.set()
                release.wait(20)
            return store.marks()

        fresh = FreshMarks(read)
        before = store.marks()

        async def ask() -> list[tuple[int, ...]]:
            first = asyncio.ensure_future(fresh())
            await asyncio.get_running_loop().run_in_executor(None, in_flight.wait, 20)
            store.revoke_token(service.token_ids["reader"], T0)  # another process's change
            askers = [asyncio.ensure_future(fresh()) for _ in range(CALLERS)]
            await asyncio.sleep(0)  # each has asked
            assert fresh.waiting == CALLERS and fresh.reads == 0
            release.set()
            await first
            return list(await asyncio.gather(*askers))

        seen = asyncio.run(ask())
        assert seen == [store.marks()] * CALLERS  # none took the query begun before it asked
        assert seen[0][-1] == before[-1] + 1  # the revocation counted, last
        assert fresh.reads == 2  # the callers that asked together shared one query


class _Counting:
    """The store's token reads, counted: ``"all"`` for every token, the hash for one."""

    def __init__(self, store: Store, calls: list[str]) -> None:
        self.store, self.calls = store, calls

    def tokens(self) -> list[ApiToken]:
        self.calls.append("all")
        return self.store.tokens()

    def token_by_hash(self, secret_sha256: str) -> ApiToken | None:
        self.calls.append(secret_sha256)
        return self.store.token_by_hash(secret_sha256)


def test_a_cached_token_is_refused_once_another_process_revokes_it(tmp_path: Path, models_dir: Path) -> None:
    with _service(tmp_path, models_dir) as service:
        ctx, secret = service.context, service.tokens["reader"]
        looked_up: list[str] = []
        ctx.tokens.store = _Counting(service.store, looked_up)  # type: ignore[assignment]
        token = ctx.authenticate(secret, service.store.marks())
        assert ctx.authenticate(secret, service.store.marks()) == token
        assert looked_up == ["all"]  # the second request found it in memory
        service.store.revoke_token(token.id, T0)
        with pytest.raises(NotSignedInError, match="revoked"):
            ctx.authenticate(secret, service.store.marks())
        assert looked_up == ["all", "all"]  # read again after the revocation, and refused


def test_many_tokens_signing_in_together_cost_one_read_and_a_new_one_its_own(
    tmp_path: Path, models_dir: Path
) -> None:
    with _service(tmp_path, models_dir) as service:
        ctx, store = service.context, service.store
        secrets = [
            create_token(store, f"team{n}", frozenset({Scope.READ}), None, T0).secret for n in range(20)
        ]
        looked_up: list[str] = []
        ctx.tokens.store = _Counting(store, looked_up)  # type: ignore[assignment]
        marks = store.marks()
        with ThreadPoolExecutor(8) as pool:
            tokens = list(pool.map(lambda secret: ctx.authenticate(secret, marks), secrets))
        assert [t.team for t in tokens] == [f"team{n}" for n in range(20)]
        assert looked_up == ["all"]
        late = create_token(store, "late", frozenset({Scope.READ}), None, T0).secret
        assert ctx.authenticate(late, store.marks()).team == "late"
        assert looked_up == ["all", sha256_hex(late)]  # created since the read: looked up alone
        with pytest.raises(NotSignedInError, match="not known"):
            ctx.authenticate("no-such-token", store.marks())
        assert looked_up[-1] == sha256_hex("no-such-token")


def test_the_status_after_a_warm_batch_is_built_from_memory_as_the_store_has_it(
    tmp_path: Path, models_dir: Path
) -> None:
    with _service(tmp_path, models_dir) as service:
        ctx, token = service.context, _token(service)

        def served_and_stored() -> tuple[dict[str, Any], dict[str, Any]]:
            served = ctx.status(None)
            stored = status(service.store, ctx.clock()).as_dict()
            return {**served, "at": None}, {**stored, "at": None}

        ctx.submit(token, _spec(0), source="test")  # into the plan made ahead, which read the mirror
        served, stored = served_and_stored()
        assert served == stored
        for n in range(1, 4):
            earlier = service.store.marks()
            ctx.submit(token, _spec(n, priority=10 + 20 * n), source="test")
            assert ctx.batcher.stats.warm == n + 1
            mirror = ctx.changes.mirror
            assert mirror is not None and mirror.marks == service.store.marks()  # the batch extended it
            # a reader that saw the marks before the batch may have it (newer, by this batch only)
            assert ctx.changes.mirror_at(service.store, earlier) is mirror
            served, stored = served_and_stored()
            assert served == stored and f"job-{n}" in {row["job"] for row in served["queue"]}
        ctx.cancel(token, "job-2")  # not a batch: the mirror is read again
        served, stored = served_and_stored()
        assert served == stored and "job-2" not in {row["job"] for row in served["queue"]}


def test_the_arrivals_a_batch_promises_by_are_kept_in_memory_as_the_store_has_them(
    tmp_path: Path, models_dir: Path
) -> None:
    """A warm batch extends the recent arrivals it read (the promises count them); they are
    read again once anything else moves the marks, and always equal a read of the store."""
    with _service(tmp_path, models_dir) as service:
        ctx, token = service.context, _token(service)
        batcher, config = ctx.batcher, service.context.config
        reads: list[int] = []
        read = promises.recent_arrivals

        def counted(*args: Any) -> list[Job]:
            reads.append(1)
            return read(*args)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("gpuplan.app.jobs.batcher.recent_arrivals", counted)
            ctx.submit(token, _spec(0), source="test")  # the first warm batch (the plan made ahead)
            probe = [replace(service.store.job("job-0"), submitted_at=ctx.clock())]  # type: ignore[type-var]
            for n in range(1, 4):
                ctx.submit(token, _spec(n, priority=10 + 20 * n), source="test")
                marks = service.store.marks()
                kept = batcher._recent_arrivals(marks, probe)
                assert [j.id for j in kept] == [j.id for j in read(service.store, probe, config)]
            assert len(reads) == 1  # read by the first warm batch, extended by the next three
            ctx.cancel(token, "job-2")  # not a batch: read again
            kept = batcher._recent_arrivals(service.store.marks(), probe)
            assert [j.id for j in kept] == [j.id for j in read(service.store, probe, config)]
            assert len(reads) == 2


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, HOT_PATH_BUDGET_MS),
        ({"submit_budget_ms": None}, HOT_PATH_BUDGET_MS),
        ({"submit_budget_ms": 25}, 25.0),
    ],
)
def test_the_submit_budget_is_the_hot_paths_unless_the_config_names_one(
    tmp_path: Path, given: dict[str, Any], expected: float
) -> None:
    app = {"id": "chat", "peak_gpus": 4, "traffic": str(demo_config().traffic[0].path)}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"cluster": {"gpus": 8}, "apps": [app], **given}))
    assert load_config(path).submit_budget_ms == expected


def test_a_submit_budget_out_of_range_names_the_field(tmp_path: Path) -> None:
    app = {"id": "chat", "peak_gpus": 4, "traffic": str(demo_config().traffic[0].path)}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"cluster": {"gpus": 8}, "apps": [app], "submit_budget_ms": 0}))
    with pytest.raises(InputError, match="submit_budget_ms") as error:
        load_config(path)
    assert "a number of milliseconds > 0 and <= 600,000; got 0." in str(error.value)
