"""Group commit of submits, answered by a warm start from the last stored plan.

The served API's submits queue here once each spec is checked and its job forecast. One
caller at a time takes every submit waiting and, under the plan lock it shares with the
daemon's cycle:

1. checks them against the store together: the cluster read once for the sizes it can hold
   (a job it cannot is refused alone), the ids as they are stored (below);
2. plans them once: the last stored plan (the cycle's, or the previous batch's) with the
   new jobs inserted and repaired (:func:`scheduler.warm.insert`, each job in arrival order
   with a hot-path budget of its own, so a batch answers as its submits one by one
   would), and stores the jobs, their promises (each job's planned start) and the run in
   one transaction (:meth:`~storage.store.Store.record_submits`: the marks move as one, and
   the batch extends the queue's :class:`~gpuplan.app.jobs.changes.Mirror`);
3. when an id is taken, or there is no such plan, or it is stale (anything stored since,
   by this process or another; a new hour; older than one cycle period), or the repaired
   plan fails the checker: stores the jobs (one by one when an id is taken, which refuses
   that submit alone), plans the stored ones (warm, or a fresh hot-path plan of the whole
   queue) and keeps their promises;
4. answers each caller with its own job's start.

After any other change this process makes (a cycle, a recalibration, a cancel, a traffic
push, a poll), the batches' thread makes the next base at once, ahead of the next submit
(:meth:`SubmitBatcher._prepare`): the cycle's plan where it can be one (a cycle that commits the
hour stores a plan that starts in it, which no batch can extend), else a fresh plan of the
queue, so that the first submit after a change is inserted too.

Submits that arrive meanwhile wait for the next batch: a submit waits for at most the batch
in flight and its own, however many arrive together, and after a batch of several for at most
:data:`GATHER_S` more, while the callers that batch answered come back
(:meth:`SubmitBatcher._gathered`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from contract.errors import InputError
from contract.records import Cluster, Job, PlanRun, RunMode
from contract.scenario import BatchJob, Instance
from contract.scenario_io import parse_scenario
from gpuplan.app.core.bridge import (
    STEP,
    EntryTexts,
    encoded_scenario,
    floor_hour,
    promise_step,
    queued_entry,
    run_record,
)
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.core.forecasters import Forecasters
from gpuplan.app.cycle.tick import first_open_hour, fresh_run, require_cluster
from gpuplan.app.jobs.changes import Changes, CyclePlan
from gpuplan.app.jobs.promises import arrivals_since, batch_gpus, promised_starts, recent_arrivals
from gpuplan.app.jobs.submit import SubmitResult, answer, check_fits, hot_path_plan, promise
from scheduler.budget import Budget
from scheduler.check import check_plan
from scheduler.metrics import score
from scheduler.model import Allocation, Placement, build_grid
from scheduler.warm import Refuted, insert, read_allocation, trimmed_realtime
from storage.store import Store, marks_after_submits

log = logging.getLogger(__name__)

#: The name of the batches' thread.
WORKER = "gpuplan-submits"

#: How long a batch waits at most for the callers of the last one to come back (_gathered).
GATHER_S = 0.015


@dataclass(frozen=True)
class WarmBase:
    """A stored plan to insert into: the run, its instance and decisions, and the store's marks
    and the change stamp right after it was stored (it holds while neither moves); the shapes
    it has no place for, which its inserts keep up to date (:class:`scheduler.warm.Refuted`)."""

    run: PlanRun
    instance: Instance
    allocation: Allocation
    marks: tuple[int, ...]
    stamp: int
    refuted: Refuted = field(default_factory=Refuted, compare=False)
    # the stored cluster while the base holds, once a batch has read it (its submits checked on it)
    cluster: Cluster | None = field(default=None, compare=False)


@dataclass
class _Ticket:
    job: Job
    source: str
    answer: Future[SubmitResult] = field(default_factory=Future)
    result: SubmitResult | None = None
    error: BaseException | None = None


@dataclass
class BatchStats:
    """How the batches were answered (the tests and the load benchmark read them)."""

    batches: int = 0
    jobs: int = 0
    warm: int = 0  # batches answered by a warm start
    fresh: int = 0  # batches answered by a fresh plan of the whole queue
    prepared: int = 0  # fresh plans made ahead of the next batch after a change (_prepare)
    sizes: list[int] = field(default_factory=list)


class SubmitBatcher:
    """See the module's docstring; :meth:`submit` blocks until its job is stored and planned."""

    def __init__(
        self,
        store: Store,
        *,
        config: ServiceConfig,
        forecasters: Forecasters,
        clock: Callable[[], datetime],
        plan_lock: Callable[[], AbstractContextManager[None]],
        changes: Changes,
    ) -> None:
        self.store, self.config, self.forecasters = store, config, forecasters
        self.clock, self.plan_lock, self.changes = clock, plan_lock, changes
        self.stats = BatchStats()
        self._base: WarmBase | None = None
        self._cycle_seen: CyclePlan | None = None
        # The recent arrivals the promises count (promises.recent_arrivals), as of the marks
        # with which they were read or to which this process's batches alone brought them.
        self._arrivals: tuple[tuple[int, ...], datetime, tuple[Job, ...]] | None = None
        self._lock = threading.Condition()
        self._waiting: list[_Ticket] = []
        self._running = False
        self._answered = 0  # how many submits the last batch answered (their callers may return)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=WORKER)
        self._entry_texts = EntryTexts()  # the batches' thread's alone
        changes.on_change(self._changed)

    def submit(self, job: Job, *, source: str) -> SubmitResult:
        """:meth:`queue`, waited for."""
        return self.queue(job, source=source).result()

    def queue(self, job: Job, *, source: str) -> Future[SubmitResult]:
        """Store ``job`` (its spec checked, its forecast made: :func:`estimated_job`) with the
        others waiting, plan them, answer it; ``source`` names the spec in an error. The
        batches run one after another in a worker thread of their own, so a caller waits
        without a thread (an event loop awaits the future)."""
        ticket = _Ticket(job, source)
        with self._lock:
            self._waiting.append(ticket)
            if not self._running:
                self._running = True
                self._worker.submit(self._drain)
            elif len(self._waiting) >= self._answered:
                self._lock.notify()
        return ticket.answer

    def settle(self) -> None:
        """Wait for the work handed to the batches' thread so far (a plan made ahead, batches)."""
        self._worker.submit(lambda: None).result()

    def _changed(self) -> None:
        """Something changed: the next batch's base is made ahead (:meth:`_prepare`), unless the
        change is a batch of this thread's own, which keeps its run as the base."""
        if not threading.current_thread().name.startswith(WORKER):
            self._worker.submit(self._prepare)

    def _prepare(self) -> None:
        """After a change (a cycle, a recalibration, a cancel, a traffic push, a poll), the next
        batch's base made ahead when none holds: the cycle's plan when it can be one, else the
        queue planned afresh in this thread and kept in memory, not stored (the first batch
        stores it with its jobs, its ``warm_from`` null). The first submit after a change is
        then inserted into a plan instead of waiting for one of the whole queue. A cycle that
        commits the hour leaves a plan that starts in it, which no batch can extend (a plan made
        now starts an hour later). Nothing is made when a base holds or when planning fails
        (logged: that batch plans afresh)."""

        try:
            with self.plan_lock():
                now, marks = self.clock(), self.store.marks()
                base = self._warm_base(now, marks)
                if base is not None:  # the cycle's plan, adopted
                    self._base = base
                    return
                _, run = fresh_run(self.store, now, self.config, self.forecasters)
                instance, allocation = self._decisions(run)
                if allocation is None:
                    return
                self.changes.mirror_at(self.store, marks)  # the queue read now, not by that batch
                self._base = WarmBase(run, instance, allocation, marks, self.changes.stamp)
                self.stats.prepared += 1
        except Exception:
            log.exception("the plan made ahead of the next submit failed; that submit plans afresh")

    def _drain(self) -> None:
        """Every batch waiting, one after another, until none is."""
        while True:
            with self._lock:
                batch, self._waiting = self._gathered(), []
                if not batch:
                    self._running = False
                    return
            self._answer(batch)
            with self._lock:  # read by queue() on the callers' threads
                self._answered = len(batch)

    def _gathered(self) -> list[_Ticket]:
        """The submits waiting (the lock held), once as many wait as the last batch answered, or
        after at most :data:`GATHER_S`. The callers a batch answers tend to come back together,
        each after reading the status its answer changed; a batch begun as the first of them
        arrives would go with that one alone, the others in the next, and each batch has a fixed
        part (the lock, the marks, the run stored) whatever its size. A lone caller, whose last
        batch was its own, never waits."""
        deadline = time.monotonic() + GATHER_S
        while self._waiting and len(self._waiting) < self._answered:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._lock.wait(left)
        return self._waiting

    def _answer(self, submitted: list[_Ticket]) -> None:

        try:
            with self.plan_lock():
                now = self.clock()
                before = self.store.marks()  # before the batch's jobs move them
                base = self._warm_base(now, before)
                # the cluster the base holds on (read once for as long as it holds)
                cluster = base.cluster if base is not None and base.cluster else require_cluster(self.store)
                batch = self._fitting(submitted, now, cluster)
                if not batch:
                    return
                # The queue as it stands, which a warm batch extends: read (once) when what this
                # process stored last is not what the store holds now.
                mirror = self.changes.mirror_at(self.store, before)
                queued = None if base is None else self._queue_warm(base, batch, now)
                allocation: Allocation | None
                inserted = queued is not None  # into the base: its refuted shapes carry on
                if queued is not None:  # the jobs and their run stored in one transaction
                    stored, (run, instance, allocation) = batch, queued
                    promised = {t.job.id: t.job.promised_start for t in batch if t.job.promised_start}
                    # the marks moved as one (Store.record_submits), when nothing else moved them
                    after = marks_after_submits(before, run.id or 0, len(batch))
                    jobs = tuple(t.job for t in batch)
                    if mirror.marks == before:
                        self.changes.mirror = mirror.extended(after, jobs, run)
                    if self._arrivals is not None and self._arrivals[0] == before:
                        self._arrivals = (after, self._arrivals[1], self._arrivals[2] + jobs)
                else:
                    stored, after = self._store_jobs(batch), None
                    if not stored:
                        return
                    waiting = [t.job for t in stored]
                    run, instance, allocation, starts = self._plan(base, waiting, now)
                    inserted = starts is not None
                    promised = promise(self.store, run, waiting, now, self.config, starts=starts)
                for ticket in stored:
                    ticket.result = answer(run, ticket.job, promised.get(ticket.job.id), self.config.pools)
                # The next batch's base: this run, while nothing moves. After one transaction the
                # marks are known without a read: a change by another process meanwhile leaves the
                # store's others, and the next batch plans afresh.
                stamp = self.changes.bump()
                marks = self.store.marks() if after is None else after
                refuted = base.refuted if inserted and base is not None else Refuted()
                self._base = (
                    None
                    if allocation is None
                    else self._promised(
                        WarmBase(run, instance, allocation, marks, stamp, refuted, cluster), promised
                    )
                )
                self.stats.batches += 1
                self.stats.jobs += len(stored)
                self.stats.sizes.append(len(stored))
        except BaseException as error:
            for ticket in submitted:
                if ticket.result is None and ticket.error is None:
                    ticket.error = error
        finally:
            for ticket in submitted:
                if ticket.result is not None:
                    ticket.answer.set_result(ticket.result)
                else:
                    ticket.answer.set_exception(ticket.error or RuntimeError("the batch gave no answer"))

    def _fitting(self, batch: list[_Ticket], now: datetime, cluster: Cluster) -> list[_Ticket]:
        """The batch's submits whose jobs ``cluster`` can hold (:func:`check_fits`); each other
        one is refused alone. Their ids are checked when they are stored (a taken id refuses
        that submit alone, :meth:`_store_jobs`)."""
        fitting = []
        for ticket in batch:
            try:
                check_fits(cluster, ticket.job, now, source=ticket.source, pools=self.config.pools)
            except InputError as error:
                ticket.error = error
            else:
                fitting.append(ticket)
        return fitting

    def _recent_arrivals(self, marks: tuple[int, ...], jobs: list[Job]) -> list[Job]:
        """:func:`recent_arrivals` for ``jobs`` on a store at ``marks``: from memory while the
        marks are those it was read at, or moved by this process's batches alone since."""
        since = arrivals_since(jobs, self.config)
        kept = self._arrivals
        if kept is None or kept[0] != marks or kept[1] > since:
            kept = self._arrivals = (marks, since, tuple(recent_arrivals(self.store, jobs, self.config)))
        return [job for job in kept[2] if job.submitted_at >= since]

    def _queue_warm(
        self, base: WarmBase, batch: list[_Ticket], now: datetime
    ) -> tuple[PlanRun, Instance, Allocation] | None:
        """The batch's jobs inserted into ``base``, and stored with its run and their promises
        in one transaction; None when the checker refuses the plan or an id is taken (then
        nothing is stored)."""
        ids = {t.job.id for t in batch}
        if len(ids) < len(batch):  # a repeated id: stored one by one, the repeat refused
            return None
        planned = self._warm(base, [t.job for t in batch], now)
        if planned is None:
            return None
        run, instance, allocation, starts = planned
        for ticket in batch:
            ticket.job = replace(ticket.job, promised_start=starts.get(ticket.job.id))
        try:
            stored = self.store.record_submits([t.job for t in batch], run, forecasts_of=base.run)
        except InputError:
            for ticket in batch:
                ticket.job = replace(ticket.job, promised_start=None)
            return None
        self.stats.warm += 1
        return stored, instance, allocation

    def _store_jobs(self, batch: list[_Ticket]) -> list[_Ticket]:
        """The batch's jobs stored in one transaction; when an id is taken, one by one, and the
        submit whose id is taken is refused alone."""
        try:
            self.store.add_jobs([t.job for t in batch])
            return batch
        except InputError:
            stored = []
            for ticket in batch:
                try:
                    self.store.add_job(ticket.job)
                except InputError as error:
                    ticket.error = error
                else:
                    stored.append(ticket)
            return stored

    # -- planning --------------------------------------------------------------------------

    def _plan(
        self, base: WarmBase | None, jobs: list[Job], now: datetime
    ) -> tuple[PlanRun, Instance, Allocation | None, dict[str, datetime] | None]:
        """The stored run that answers ``jobs`` (inserted into ``base`` when there is one), its
        instance and decisions, and the jobs' promises when the insertion made them."""
        if base is not None:
            warm = self._warm(base, jobs, now)
            if warm is not None:
                self.stats.warm += 1
                return (self.store.record_run(warm[0]), *warm[1:])
        self.stats.fresh += 1
        run = hot_path_plan(self.store, now, self.config, self.forecasters)
        assert run is not None
        return (run, *self._decisions(run), None)

    def _warm_base(self, now: datetime, marks: tuple[int, ...]) -> WarmBase | None:
        """The stored plan to insert into, if one still holds at the store's ``marks``: the
        previous batch's, or the one the cycle stored since; None when nothing holds (then
        the queue is planned afresh)."""
        cycle = self.changes.cycle_plan
        base = self._base
        if cycle is not None and cycle is not self._cycle_seen:
            self._cycle_seen = cycle
            if base is None or cycle.stamp > base.stamp:
                base = self._adopted(cycle, now)
        if base is None or base.stamp != self.changes.stamp:
            return None
        max_age = timedelta(minutes=self.config.cycle_minutes)
        if not (base.run.created_at <= now <= base.run.created_at + max_age):
            return None
        # Within the hour it was made in, its start is still the first open hour: a commit since
        # would have moved the marks.
        hour = floor_hour(now)
        if floor_hour(base.run.created_at) != hour or base.marks != marks:
            return None
        return base

    def _adopted(self, cycle: CyclePlan, now: datetime) -> WarmBase | None:
        """The cycle's plan as the base, unless it starts in the hour it committed (a plan made
        now starts an hour later; a batch's plan starts, by construction, where one made at
        its marks would)."""

        if cycle.run.start != first_open_hour(self.store, now):
            return None
        instance, allocation = self._decisions(cycle.run)
        if allocation is None:
            return None
        return WarmBase(cycle.run, instance, allocation, cycle.marks, cycle.stamp)

    def _promised(self, base: WarmBase, promised: Mapping[str, datetime]) -> WarmBase:
        """``base`` with the promises just made in its scenario, as the next cycle's snapshot
        will have them (the promised jobs weigh their promises in the next repair)."""
        if self.config.promises.penalty <= 0 or not promised:
            return base
        steps = {job: promise_step(start, base.run.start) for job, start in promised.items()}
        jobs = [
            {**entry, "promise": steps[entry["id"]]}
            if entry["id"] in steps and entry.get("promise") is None
            else entry
            for entry in base.run.scenario["jobs"]
        ]
        return replace(
            base,
            run=replace(base.run, scenario={**base.run.scenario, "jobs": jobs}),
            instance=_with_promises(base.instance, steps),
        )

    @staticmethod
    def _decisions(run: PlanRun) -> tuple[Instance, Allocation | None]:
        """A stored run's instance, and its grid read back as decisions (None: not a legal plan),
        each service holding its need, not more (:func:`scheduler.warm.trimmed_realtime`): a
        submit between cycles is placed in the room the next cycle's plan would have, not
        behind GPUs a service held over its need (a daily peak held all day on a quiet queue)."""

        instance = parse_scenario(run.scenario, source=f"run {run.id}")
        allocation = read_allocation(instance, run.grid)
        return instance, None if allocation is None else trimmed_realtime(instance, allocation)

    def _warm(
        self, base: WarmBase, jobs: list[Job], now: datetime
    ) -> tuple[PlanRun, Instance, Allocation, dict[str, datetime]] | None:
        """``base`` with ``jobs`` inserted and repaired, as the run to store, and their
        promises; None when the checker refuses it.

        Each job is promised once it is in, and the next is inserted into a plan that weighs
        that promise: the plan and the promises are those of the submits one by one."""

        started = time.perf_counter()
        scenario = base.run.scenario
        entries = [
            queued_entry(
                job,
                self.config.plan_with,
                step_minutes=base.instance.step_minutes,
                order=len(scenario["jobs"]) + i,
            )
            for i, job in enumerate(jobs)
        ]
        added = parse_scenario(
            {"gpus": base.instance.gpus, "horizon": base.instance.horizon_steps, "jobs": entries},
            source="the submitted jobs",
        ).batch_jobs
        instance = replace(base.instance, batch_jobs=base.instance.batch_jobs + added)
        budget_ms = self.config.submit_budget_ms
        wall_clock = self.config.plan_wall_clock
        promised: dict[str, datetime] = {}
        steps: dict[str, int] = {}  # the promises the jobs after each one weigh
        # the arrivals and the batch GPUs the promises count, read once for the batch
        stored, capacity = self._recent_arrivals(base.marks, jobs), batch_gpus(base.run)
        order = {job.id: i for i, job in enumerate(jobs)}

        def promised_as(placed: BatchJob, placement: Placement) -> BatchJob | None:
            """Promise the job just placed; the jobs after it weigh that promise."""
            i = order[placed.id]
            start = {placed.id: base.run.start + placement.start_step * STEP}
            promised.update(
                promised_starts(
                    self.store,
                    base.run,
                    [jobs[i]],
                    now,
                    self.config,
                    planned=start,
                    arriving=jobs[: i + 1],
                    stored=stored,
                    capacity=capacity,
                )
            )
            if self.config.promises.penalty <= 0 or i == len(jobs) - 1 or placed.id not in promised:
                return None
            steps[placed.id] = promise_step(promised[placed.id], base.run.start)
            entries[i] = {**entries[i], "promise": steps[placed.id]}
            return None if placed.promise_step is not None else replace(placed, promise_step=steps[placed.id])

        allocation = insert(
            instance,
            base.allocation,
            [job.id for job in jobs],
            lambda: Budget.of(budget_ms, wall_clock=wall_clock),
            placed_as=promised_as,
            refuted=base.refuted,
        )
        instance = _with_promises(instance, steps)
        grid = build_grid(instance, allocation)
        violations = check_plan(instance, grid)
        if violations:  # a bug in the repair: logged, and the queue planned afresh
            log.error("warm start from run %s broke the contract: %s", base.run.id, violations[0])
            return None
        # encoded once, for the store and the inputs' hash
        document, digest = encoded_scenario(
            {**scenario, "jobs": [*scenario["jobs"], *entries]}, entries=self._entry_texts
        )
        run = run_record(
            document,
            start=base.run.start,
            created_at=now,
            mode=RunMode.SUBMIT,
            policy="fast",
            grid=grid,
            metrics=score(instance, grid).as_dict(),
            latency_ms=(time.perf_counter() - started) * 1000,
            forecasts=base.run.forecasts,
            inputs_hash_=digest,
        )
        return replace(run, extra={"warm_from": base.run.id}), instance, allocation, promised


def _with_promises(instance: Instance, steps: Mapping[str, int]) -> Instance:
    """``instance`` with the promises ``steps`` on the batch jobs that have none yet."""
    batch_jobs = tuple(
        replace(job, promise_step=steps[job.id]) if job.id in steps and job.promise_step is None else job
        for job in instance.batch_jobs
    )
    return replace(instance, batch_jobs=batch_jobs)
