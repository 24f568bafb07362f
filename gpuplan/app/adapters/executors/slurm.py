"""The Slurm executor: each committed hour becomes Slurm's truth, and Slurm's truth comes back.

Chosen by ``executor: slurm`` in the daemon's config, with its ``slurm:`` section; the
client, the cluster source and the job comments it uses are in ``gpuplan/app/adapters/slurm/``.

Its entry points are idempotent, each one reading of ``squeue``/``sinfo`` and the fewest
Slurm actions that make the cluster match:

- :meth:`SlurmExecutor.deliver` (a commit, from the outbox): each batch job of the
  hour that is still held is placed on exactly its planned GPUs (typed GRES on its node,
  or whole nodes) and released; each app gets one replica job per committed GPU, new ones
  submitted before old ones are cancelled. A job already released, a replica already
  running, is left as it is: delivering a commit twice does nothing the second time.
- :meth:`SlurmExecutor.reconcile` (before each plan): the cluster from Slurm (GPU ids,
  down hours, foreign work) replaces the stored one; the jobs Slurm finished are returned,
  for :mod:`gpuplan.app.cycle.reconcile` to finish, as is a job that vanished from Slurm
  with no completion (failed if it ran, cancelled if it was held); a job that failed to
  start returns to the queue; held ``gpuplan:`` jobs are returned, for
  :mod:`gpuplan.app.jobs.adopt` to submit;
  drift is logged (a job running on GPUs other than planned has those GPUs pinned); the
  current hour's commit is enacted again (a daemon killed between its commit and its
  release releases at its next cycle).
- :meth:`SlurmExecutor.poll` (every ``poll_seconds``): completions, and the current hour's
  commit enacted again (a replica that died is restarted on its GPU).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, ClassVar

from contract.errors import InputError
from contract.records import (
    Amendment,
    Assignment,
    Cluster,
    Commit,
    DownWindowRecord,
    GpuMapReading,
    Job,
    JobState,
    Outcome,
)
from gpuplan.app.adapters.slurm.batch import (
    comment_of,
    held_request,
    parse_comment,
    replica_request,
    slurm_job_id,
)
from gpuplan.app.adapters.slurm.client import (
    CANCELLED,
    COMPLETED,
    PENDING,
    RUNNING,
    Completion,
    SlurmClient,
    SlurmJob,
)
from gpuplan.app.adapters.slurm.cluster import ClusterView, GpuMap, PooledMap, ceil_hour, read_cluster
from gpuplan.app.core.bridge import floor_hour, hour_allocation, merged_assignments
from gpuplan.app.core.ports import Adoptable, Check, Finished, Observed, Verdict
from gpuplan.app.core.slurm_settings import BatchSection, SlurmError, SlurmSettings
from storage.store import Store

if TYPE_CHECKING:
    from gpuplan.app.core.config import ServiceConfig

log = logging.getLogger("gpuplan.slurm")
#: The partition's readings (its GPU map, once and on change), shown at the daemon's default level.
cluster_log = logging.getLogger("gpuplan.cluster")

#: Slurm's end states -> the job history's outcome (every other end is a failure).
OUTCOMES = {COMPLETED: Outcome.OK, CANCELLED: Outcome.CANCELLED}
#: How long a commit waits for new replicas to run before it cancels the ones they replace.
REPLICA_START_WAIT_S = 20.0


@dataclass(frozen=True)
class Enacted:
    """What enacting a commit did (the log line and the tests read it)."""

    released: tuple[str, ...] = ()
    started: tuple[tuple[str, int], ...] = ()  # (app, GPU) replicas submitted
    cancelled: tuple[tuple[str, int], ...] = ()


@dataclass
class SlurmExecutor:
    """The executor of one Slurm partition (``slurm`` in the registry)."""

    #: The executor's name in the registry (and, with the outbox, its deliveries' key).
    name: ClassVar[str] = "slurm"

    settings: SlurmSettings
    apps: Sequence[str]  # the assignment ids of a commit that are real-time apps
    replica_commands: Mapping[str, str]  # app -> the command one replica runs
    base_cluster: Cluster  # horizon, decay, penalty and configured down windows
    client: SlurmClient = field(init=False)
    replica_start_wait_s: float = REPLICA_START_WAIT_S
    replicas_running: dict[str, int] = field(default_factory=dict, init=False)
    _refused: set[int] = field(default_factory=set, init=False)  # held jobs whose comment is not a spec
    _newest: datetime | None = field(default=None, init=False)  # the newest commit's hour delivered
    _delivered: dict[datetime, Commit] = field(default_factory=dict, init=False)  # hour -> allocation
    _map_seen: GpuMap | PooledMap | None = field(default=None, init=False)  # the GPU map last logged

    def __post_init__(self) -> None:
        self.client = SlurmClient(self.settings)

    @classmethod
    def from_config(cls, config: ServiceConfig) -> SlurmExecutor:
        if config.slurm is None:
            raise InputError("slurm", "a section naming the partition (executor: slurm)", "missing")
        return cls(
            settings=config.slurm,
            apps=tuple(app.id for app in config.apps),
            replica_commands=dict(config.replica_commands),
            base_cluster=config.cluster,
        )

    @property
    def poll_seconds(self) -> float:
        return self.settings.poll_seconds

    @property
    def target(self) -> str:
        partitions = "partitions" if len(self.settings.partitions) > 1 else "partition"
        if self.settings.pools:
            pools = ", ".join(p.pool for p in self.settings.pools)
            return f"Slurm {partitions} {self.settings.partition} (pools {pools})"
        return f"Slurm {partitions} {self.settings.partition}"

    def checks(self, now: datetime) -> Iterator[Check]:
        """``gpuplan doctor``'s lines for the partition, writing nothing: slurmctld answers, the
        partition reads as GPUs (its size against the config's), and this account may submit
        to it (``sbatch --test-only``, which queues nothing)."""
        settings, client = self.settings, self.client
        try:
            client.run("scontrol", "ping")
        except SlurmError as error:
            yield Check("executor.slurm", Verdict.FAIL, f"slurmctld is unreachable: {error}")
            return
        yield Check("executor.slurm", Verdict.OK, "slurmctld answers (scontrol ping)")
        try:
            view = self.read(None, now)
        except (InputError, SlurmError) as error:
            yield Check("executor.partition", Verdict.FAIL, str(error))
        else:
            gpu_map = view.gpu_map
            layout = (
                f"partition {settings.partition}: {len(gpu_map.nodes)} nodes x {gpu_map.gpus_per_node} "
                f"{view.model} GPUs = {gpu_map.gpus}, one typed GRES per GPU"
            )
            if gpu_map.gpus != self.base_cluster.gpus:
                yield Check(
                    "executor.partition",
                    Verdict.WARN,
                    f"{layout}; the config says cluster.gpus {self.base_cluster.gpus}: "
                    f"the daemon plans Slurm's {gpu_map.gpus}",
                )
            else:
                yield Check("executor.partition", Verdict.OK, layout)
        try:
            answer = client.run(
                "sbatch",
                "--test-only",
                "--hold",
                f"--partition={settings.partition}",
                "--job-name=gpuplan-doctor",
                "--wrap=true",
            )
        except SlurmError as error:
            yield Check(
                "executor.rights",
                Verdict.FAIL,
                f"this account may not submit to {settings.partition}: {error}",
            )
        else:
            shown = answer.strip().splitlines()[0] if answer.strip() else "sbatch --test-only accepted"
            yield Check(
                "executor.rights", Verdict.OK, f"this account may submit to {settings.partition} ({shown})"
            )

    # -- the entry points ---------------------------------------------------------------------
    def deliver(self, commit: Commit) -> bool:
        """Enact ``commit``; True once Slurm took every action (a commit enacted before changes
        nothing). A commit older than one already enacted (handed over again after an outage)
        releases its batch jobs and leaves the replicas to the newer one."""
        follow = self._newest is None or commit.hour >= self._newest
        self.enact(commit, self.read(None, utc_now()), follow=follow)
        self._newest = commit.hour if follow else self._newest
        self._delivered = {commit.hour: commit} if follow else self._delivered
        return True

    def amend(self, amendment: Amendment) -> bool:
        """Enact the hour's allocation with ``amendment``'s additions: more replicas for an app,
        a batch job released within the hour; True once Slurm took every action. Nothing
        already running is touched, and an amendment enacted before changes nothing. With no
        delivered commit of that hour to add to (a restarted daemon), only its batch jobs are
        released; the replicas follow at the next poll, which reads the hour's whole allocation."""
        base = self._delivered.get(amendment.hour)
        held = merged_assignments(base, [amendment])
        assignments = tuple(Assignment(job, gpus) for job, gpus in sorted(held.items()))
        merged = Commit(amendment.hour, amendment.run_id, assignments)
        if base is None:
            self.enact(merged, self.read(None, utc_now()), follow=False)
            return True
        return self.deliver(merged)

    def stop(self, job: str, at: datetime) -> None:
        """A running job was cancelled: ``scancel`` its Slurm job (gone already: nothing to do)."""
        batch, _ = _ours(self.read(None, utc_now()).jobs)
        found = batch.get(job)
        if found is not None:
            self.client.cancel(found.id)
            log.info("job %s (Slurm %d) cancelled at %s", job, found.id, at.isoformat())

    def hold(self, job_id: str, section: BatchSection) -> int:
        """A submitted job with a ``slurm:`` section, into Slurm held (``sbatch --hold``)."""
        return self.client.submit(held_request(section, job_id, self.settings.partition))

    def withdraw(self, cluster_id: int) -> None:
        self.client.cancel(cluster_id)

    def reconcile(self, store: Store, now: datetime) -> Observed:
        """Slurm's truth into the store before a plan (see the module's docstring); returns the
        jobs Slurm has ended, which :func:`gpuplan.app.cycle.reconcile.reconcile` finishes, and
        the held jobs to adopt, which :func:`gpuplan.app.jobs.adopt.adopt` submits."""
        view = self.read(store, now)
        self._log_reading(view)
        self._store_reading(store, view, now)
        cluster = view.cluster(self.base_cluster)
        cluster = replace(cluster, down=cluster.down + self.drift(store, view))
        if store.cluster() != cluster:
            store.save_cluster(cluster)
        finished = self.collect(store, view, now)
        self.cancel_orphans(store, view)
        self.requeue_failed_starts(store, view)
        adoptable = self.adoptable(store, view)
        self._enact_current(store, view, now)
        return Observed(finished, adoptable)

    def poll(self, store: Store, now: datetime) -> list[Finished]:
        """Completions (finished by :func:`gpuplan.app.cycle.reconcile.poll`), and the current
        hour's commit enacted again."""
        view = self.read(store, now)
        finished = self.collect(store, view, now)
        self.requeue_failed_starts(store, view)
        self._enact_current(store, view, now)
        return finished

    def _enact_current(self, store: Store, view: ClusterView, now: datetime) -> None:
        """The current hour's commit again, but for the jobs that went back to the queue."""
        current = hour_allocation(store, floor_hour(now))
        if current is not None:
            self.enact(current, view, requeued={job.id for job in store.jobs([JobState.QUEUED])})

    # -- reading ------------------------------------------------------------------------------
    def _log_reading(self, view: ClusterView) -> None:
        """The partition's GPU map, logged at the first reading and whenever it changes; a GPU
        count other than the config's ``cluster.gpus`` is warned of (Slurm's count is planned on)."""
        if view.gpu_map == self._map_seen:
            return
        self._map_seen = view.gpu_map
        cluster_log.info(
            "Slurm partition %s: %d GPUs (%s), GPU id = node's first + IDX: %s",
            self.settings.partition,
            view.gpu_map.gpus,
            view.model,
            view.gpu_map.describe(),
        )
        if view.gpu_map.gpus != self.base_cluster.gpus:
            cluster_log.warning(
                "cluster.gpus is %d in the config, but Slurm partition %s has %d GPUs: "
                "planning on Slurm's %d",
                self.base_cluster.gpus,
                self.settings.partition,
                view.gpu_map.gpus,
                view.gpu_map.gpus,
            )

    def _store_reading(self, store: Store, view: ClusterView, now: datetime) -> None:
        """The partition's GPU map into the store for ``gpuplan status``, when it differs from
        the one stored (``read_at``: when this map was first read). Pools whose nodes have
        different GPU counts have no such map (the log line above describes them)."""
        if not view.gpu_map.gpus_per_node:
            return
        stored = store.gpu_map()
        reading = (self.settings.partition, view.gpu_map.nodes, view.gpu_map.gpus_per_node)
        if stored is None or (stored.partition, stored.nodes, stored.gpus_per_node) != reading:
            store.save_gpu_map(GpuMapReading(*reading, read_at=now))

    def read(self, store: Store | None, now: datetime) -> ClusterView:
        ours = set() if store is None else {i for j in store.jobs() if (i := slurm_job_id(j)) is not None}
        return read_cluster(self.client, self.settings, now, ours=ours)

    # -- enacting a commit --------------------------------------------------------------------
    def enact(
        self, commit: Commit, view: ClusterView, *, requeued: Collection[str] = (), follow: bool = True
    ) -> Enacted:
        """Make Slurm run ``commit``; ``requeued``: its jobs that went back to the queue since;
        ``follow=False``: release its batch jobs but leave the replicas as they are."""
        batch, replicas = _ours(view.jobs)
        apps = set(self.apps)
        released = []
        for assignment in commit.assignments:
            if assignment.job in apps or assignment.job in requeued:
                continue
            job = batch.get(assignment.job)
            planned = tuple(sorted(assignment.gpus))
            if job is None:
                continue  # not a Slurm job (submitted without a slurm: section), or long gone
            if job.held:
                self.client.place(job.id, view.gpu_map.placement(planned))
                self.client.release(job.id)
                released.append(assignment.job)
        started, old = self._follow(commit, view, replicas) if follow else ([], [])
        done = Enacted(tuple(released), tuple(started), tuple(old))
        if released or started or old:
            log.info(
                "slurm commit %s: released %s, replicas started %s, cancelled %s",
                commit.hour.isoformat(),
                list(done.released),
                [f"{a}@{g}" for a, g in done.started],
                [f"{a}@{g}" for a, g in done.cancelled],
            )
        return done

    def _follow(
        self, commit: Commit, view: ClusterView, replicas: dict[tuple[str, int], int]
    ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        """One replica job per committed GPU of each app: new ones first, then the old cancelled."""
        apps = set(self.apps)
        wanted = {(a.job, gpu) for a in commit.assignments if a.job in apps for gpu in a.gpus}
        started = []
        for app, gpu in sorted(wanted - set(replicas)):
            command = self.replica_commands.get(app)
            if command is None:
                continue
            placement = view.gpu_map.placement([gpu])
            replicas[app, gpu] = self.client.submit(
                replica_request(app, gpu, command, self.settings.partition, placement)
            )
            started.append((app, gpu))
        old = sorted(set(replicas) - wanted)
        if started and old:
            # New before old, as the swap cap assumes; a new replica on a GPU that an old one
            # holds can only start once that one goes.
            freed = {gpu for _, gpu in old}
            self._wait_running([replicas[key] for key in started if key[1] not in freed])
        self.client.cancel(*(replicas[key] for key in old))
        view_running = {job.id for job in view.jobs if job.state == RUNNING}
        running = {key for key in wanted if key in replicas and replicas[key] in view_running}
        self.replicas_running = {app: sum(1 for a, _ in running if a == app) for app in sorted(apps)}
        return started, old

    def _wait_running(self, new: Sequence[int]) -> None:
        """Until the new replicas run (bounded by ``replica_start_wait_s``)."""
        deadline = time.monotonic() + self.replica_start_wait_s
        while new:
            states = {job.id: job.state for job in self.client.jobs(self.settings.partition)}
            if all(states.get(i) != PENDING for i in new):
                return
            if time.monotonic() > deadline:
                log.warning(
                    "new replicas %s did not all start within %g s", list(new), self.replica_start_wait_s
                )
                return
            time.sleep(0.1)

    # -- drift, completions, failed starts, adoption -----------------------------------------
    def drift(self, store: Store, view: ClusterView) -> tuple[DownWindowRecord, ...]:
        """gpuplan's jobs that Slurm runs on GPUs other than planned, logged as drift. The GPUs
        one really holds outside its planned block are pinned (down until its time limit's
        hour), so the next plan starts from what really runs."""
        live = {job.id: job for job in view.jobs if job.state == RUNNING}
        hour = floor_hour(view.read_at)
        pinned: list[DownWindowRecord] = []
        for job in store.jobs([JobState.RUNNING]):
            found = live.get(slurm_job_id(job) or -1)
            if found is None or job.first_gpu is None or job.gpus is None:
                continue
            planned = set(range(job.first_gpu, job.first_gpu + job.gpus))
            real = set(view.gpu_map.gpus_of(found))
            if real == planned:
                continue
            log.warning(
                "drift: job %s (Slurm %d) runs on GPUs %s, planned %s",
                job.id,
                found.id,
                sorted(real),
                sorted(planned),
            )
            until = None if found.end is None or found.time_limit_minutes is None else ceil_hour(found.end)
            pinned += [DownWindowRecord(gpu, hour, until) for gpu in sorted(real - planned)]
        return tuple(pinned)

    def collect(self, store: Store, view: ClusterView, now: datetime) -> list[Finished]:
        """The jobs Slurm has finished, observed (they enter the history through ``finish``, as
        ``gpuplan done``); a running job takes Slurm's start (``status`` shows it, not the
        release's time)."""
        self.record_starts(store, view)
        bound = {
            i: job for job in store.jobs([JobState.QUEUED, JobState.RUNNING]) if (i := slurm_job_id(job))
        }
        if not bound:
            return []
        live = {job.id: job for job in view.jobs}
        ended: dict[int, Completion | SlurmJob] = {i: j for i, j in live.items() if i in bound and j.finished}
        missing = [i for i in bound if i not in live]
        if missing:
            since = min(job.submitted_at for job in bound.values())
            ended.update({c.id: c for c in self.client.completions(since) if c.id in bound})
        finished = []
        for slurm_id, end in sorted(ended.items()):
            job = bound[slurm_id]
            outcome = OUTCOMES.get(end.state, Outcome.FAILED)
            # Slurm keeps whole seconds: an end in the second of the submission may read earlier.
            at = max(end.end or now, job.submitted_at)
            if job.state is JobState.QUEUED and outcome is Outcome.OK:
                outcome = Outcome.FAILED  # it ran outside any commit; nothing to learn from
            finished.append(Finished(job.id, at, outcome, end.start, slurm_id, end.state))
        for slurm_id in missing:
            if slurm_id not in ended:
                finished.append(self._vanished(bound[slurm_id], slurm_id, now))
        return finished

    @staticmethod
    def record_starts(store: Store, view: ClusterView) -> None:
        """Each running job's start as Slurm reports it, where it differs from the stored one."""
        live = {job.id: job for job in view.jobs if job.state == RUNNING and job.start is not None}
        for job in store.jobs([JobState.RUNNING]):
            found = live.get(slurm_job_id(job) or -1)
            if found is not None and found.start is not None and found.start != job.started_at:
                store.set_started(job.id, found.start)

    @staticmethod
    def _vanished(job: Job, slurm_id: int, now: datetime) -> Finished:
        """A job Slurm neither runs nor has a completion for (its state lost, purged by hand)
        is drift: Slurm's truth is that nothing runs, so it ends now, and the next plan
        starts without it. A running one ends as failed (it ran and did not finish), a
        queued one as cancelled (it can never be released)."""
        outcome = Outcome.FAILED if job.state is JobState.RUNNING else Outcome.CANCELLED
        log.warning(
            "drift: job %s (Slurm %d) vanished from Slurm with no completion; it ends %s at %s",
            job.id,
            slurm_id,
            outcome.value,
            now.isoformat(),
        )
        return Finished(job.id, now, outcome, cluster_id=slurm_id)

    def cancel_orphans(self, store: Store, view: ClusterView) -> list[int]:
        """Live Slurm jobs of gpuplan's that the store has ended are cancelled in Slurm too:
        a held one (cancelled while queued) would wait for a release that never comes, and a
        running one whose stop was lost (the daemon died between the cancel and ``scancel``)
        would hold its GPUs past its end."""
        done = {job.id for job in store.jobs([JobState.DONE])}
        orphans = [job.id for name, job in _ours(view.jobs)[0].items() if name in done]
        if orphans:
            log.info("cancelling Slurm jobs %s: their gpuplan jobs ended", orphans)
            self.client.cancel(*orphans)
        return orphans

    def requeue_failed_starts(self, store: Store, view: ClusterView) -> list[str]:
        """Released jobs that Slurm has not started within ``start_grace_s`` are held again and
        return to the queue: the next plan places them anew (reported in the log)."""
        running = {i: job for job in store.jobs([JobState.RUNNING]) if (i := slurm_job_id(job))}
        now = utc_now()  # Slurm's clock: the grace is real time, whatever the plan's clock
        failed = []
        for found in view.jobs:
            job = running.get(found.id)
            if job is None or found.state != PENDING or found.held or found.eligible is None:
                continue
            waited = (now - found.eligible).total_seconds()
            if waited < self.settings.start_grace_s:
                continue
            log.warning(
                "job %s (Slurm %d) did not start within %.0f s of its release (%s); back to the queue",
                job.id,
                found.id,
                waited,
                found.reason,
            )
            self.client.hold(found.id)
            store.requeue_job(job.id)
            failed.append(job.id)
        return failed

    def adoptable(self, store: Store, view: ClusterView) -> list[Adoptable]:
        """Held jobs submitted with ``--comment 'gpuplan:{...spec...}'`` that no stored job is
        bound to and whose spec was not refused before: each asks to join the queue."""
        known = {i for job in store.jobs() if (i := slurm_job_id(job)) is not None}
        found = []
        for job in view.jobs:
            spec = parse_comment(job.comment)
            if job.held and job.id not in known | self._refused and spec is not None and "kind" in spec:
                found.append(Adoptable(job.id, spec))
        return found

    def adopted(self, cluster_id: int, job_id: str) -> None:
        """The held Slurm job is gpuplan's ``job_id`` now: its comment names it (no longer a spec)."""
        self.client.update(cluster_id, Comment=comment_of({"id": job_id}))

    def refused(self, cluster_id: int) -> None:
        """The held Slurm job's spec was refused: it is not offered again."""
        self._refused.add(cluster_id)


def _ours(jobs: Sequence[SlurmJob]) -> tuple[dict[str, SlurmJob], dict[tuple[str, int], int]]:
    """gpuplan's live batch jobs by job id, and its live replicas by (app, GPU)."""
    batch: dict[str, SlurmJob] = {}
    replicas: dict[tuple[str, int], int] = {}
    for job in jobs:
        tag = parse_comment(job.comment)
        if tag is None or job.finished:
            continue
        if "app" in tag and "gpu" in tag:
            replicas[str(tag["app"]), int(tag["gpu"])] = job.id
        elif "id" in tag and "kind" not in tag:
            batch[str(tag["id"])] = job
    return batch, replicas


def utc_now() -> datetime:
    return datetime.now(UTC)
