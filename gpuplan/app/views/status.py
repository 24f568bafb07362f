"""What runs now, what waits and when it is planned; and exporting a stored run offline."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from contract.errors import InputError
from contract.records import GpuMapReading, Job, JobEstimate, JobState, PlanRun, RunMode
from contract.scenario import DEFAULT_HALF_LIFE_DAYS, Pool, Team, pool_at
from contract.scenario_io import write_json_atomic
from gpuplan.app.core.bridge import (
    STEP,
    floor_hour,
    planned_place,
    planned_places,
    realtime_sets,
    time_limit,
)
from gpuplan.app.core.no_start import no_start_inputs, no_start_reason
from gpuplan.app.core.team_use import history_since
from gpuplan.app.core.tokens import NotFoundError
from gpuplan.app.views.reports import down_gpus_at
from gpuplan.app.views.teams import team_status
from storage.store import Store


def run_summary(run: PlanRun) -> dict[str, Any]:
    """A stored run as ``run.json`` and ``status`` show it (``start``: the wall-clock hour of step 0)."""
    return {
        "id": run.id,
        "start": run.start.isoformat(),
        "policy": run.policy,
        "objective": round(run.objective, 3),
        "status": run.status,
        "mode": run.mode.value,
        "committed": run.committed,
        "bound": None if run.bound is None else round(run.bound, 3),
        "latency_ms": round(run.latency_ms, 3),
        "created_at": run.created_at.isoformat(),
    }


@dataclass(frozen=True)
class Status:
    at: datetime
    running: list[dict[str, Any]]
    queue: list[dict[str, Any]]
    last_run: dict[str, Any] | None
    leader: dict[str, Any] | None = None  # the leading daemon (PostgreSQL): host, pid
    gpu_map: dict[str, Any] | None = None  # the partition's stored GPU map (:func:`gpu_map_view`)
    #: On a cluster of several pools, each pool's GPUs now (:func:`pool_rows`); None: one pool,
    #: and the document is a one-pool cluster's (no ``pools``, no row's ``pool``).
    pools: list[dict[str, Any]] | None = None
    #: With the config's teams, each team's row (:func:`gpuplan.app.views.teams.team_status`);
    #: None: no teams, and the document has no ``teams``.
    teams: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        document = {
            "at": self.at.isoformat(),
            "running": self.running,
            "queue": self.queue,
            "last_run": self.last_run,
            "leader": self.leader,
            "gpu_map": self.gpu_map,
        }
        if self.pools is not None:
            document["pools"] = self.pools
        if self.teams is not None:
            document["teams"] = self.teams
        return document

    def text_without_at(self, queue: QueueRows) -> str:
        """:meth:`as_dict` less ``at``, as compact JSON, the queue's rows from ``queue``."""
        pools = "" if self.pools is None else f',"pools":{_compact(self.pools)}'
        teams = "" if self.teams is None else f',"teams":{_compact(self.teams)}'
        return (
            f'{{"running":{_compact(self.running)},"queue":{queue.text(self.queue)},'
            f'"last_run":{_compact(self.last_run)},"leader":{_compact(self.leader)},'
            f'"gpu_map":{_compact(self.gpu_map)}{pools}{teams}}}'
        )

    def of_pool(self, pool: str | None) -> Status:
        """This status with the rows of ``pool`` only (checked by :func:`checked_pool`): the jobs
        and apps on its GPUs, the queued jobs planned there, and its own count; None: all of it."""
        if pool is None:
            return self
        return replace(
            self,
            running=[row for row in self.running if row.get("pool") == pool],
            queue=[row for row in self.queue if row.get("pool") == pool],
            pools=[row for row in self.pools or () if row["pool"] == pool],
        )

    def of_team(self, team: str | None) -> Status:
        """This status with ``team``'s jobs only (and the real-time apps left out; with teams,
        that team's row only), as :func:`status` with ``team`` builds it; ``None``: all of it."""
        if team is None:
            return self
        found = self.by_team.get(team) or replace(self, running=[], queue=[])
        if self.teams is None:
            return found
        return replace(found, teams=[row for row in self.teams if row["team"] == team])

    @cached_property
    def by_team(self) -> dict[str, Status]:
        """:meth:`of_team` of every team with a job here, from one pass over the rows (a
        served status is filtered for each team that reads it)."""
        running: dict[str, list[dict[str, Any]]] = {}
        queue: dict[str, list[dict[str, Any]]] = {}
        for rows, kept in ((self.running, running), (self.queue, queue)):
            for row in rows:
                if row["team"] is not None:
                    kept.setdefault(row["team"], []).append(row)
        return {
            team: replace(self, running=running.get(team, []), queue=queue.get(team, []))
            for team in running.keys() | queue.keys()
        }


class QueueRows:
    """The queued jobs' status rows and their JSON texts, kept from one status to the next.

    A served status is built and encoded again after every batch of submits, and most of its
    rows are the rows before: a row changes only with its job, its planned start, or what its
    reason reads of the plan (:func:`_reason_inputs`). At 2,000 queued jobs the rows took 6.5
    ms to encode whole and 0.9 ms with the texts of the rows unchanged reused."""

    def __init__(self) -> None:
        # Keyed by identities: each entry holds the job (or row) it is keyed by, so while it is
        # here no other object can have that id().
        self._rows: dict[tuple[Any, ...], tuple[Job, dict[str, Any], str]] = {}
        self._texts: dict[int, tuple[dict[str, Any], str]] = {}  # by the row's identity

    def rows(
        self,
        jobs: Iterable[Job],
        newest: PlanRun | None,
        places: dict[str, tuple[datetime, int]],
        pools: Sequence[Pool] = (),
    ) -> list[dict[str, Any]]:
        """:func:`_queue_row` of each job, the rows of the last call reused where unchanged."""
        kept: dict[tuple[Any, ...], tuple[Job, dict[str, Any], str]] = {}
        rows: list[dict[str, Any]] = []
        texts: dict[int, tuple[dict[str, Any], str]] = {}
        for job in jobs:
            place = places.get(job.id)
            start = None if place is None else place[0]
            pool = _planned_pool(pools, place)
            key = (id(job), start, pool, _reason_inputs(newest, job, start))
            known = self._rows.get(key)
            if known is None:
                row = _queue_row(job, newest, places, pools)
                known = (job, row, _compact(row))
            kept[key] = known
            rows.append(known[1])
            texts[id(known[1])] = known[1:]
        self._rows, self._texts = kept, texts
        return rows

    def text(self, rows: Iterable[dict[str, Any]]) -> str:
        """``rows`` as a compact JSON list; rows :meth:`rows` did not give last are encoded."""
        texts = self._texts
        return "[" + ",".join(texts[id(row)][1] if id(row) in texts else _compact(row) for row in rows) + "]"


def _reason_inputs(newest: PlanRun | None, job: Job, start: datetime | None) -> object:
    """What :func:`placement_reason` reads of ``newest`` for ``job`` planned at ``start``."""
    if newest is None:
        return "no plan"
    if job.estimate is None:
        return None
    return newest.start if start is not None else no_start_inputs(newest, job.id)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def leader_of(owner: str | None) -> dict[str, Any] | None:
    """A daemon's ``host:pid`` as status shows it."""
    if owner is None:
        return None
    host, _, pid = owner.rpartition(":")
    return {"host": host, "pid": int(pid)} if pid.isdigit() else {"host": owner, "pid": None}


def gpu_map_view(reading: GpuMapReading | None) -> dict[str, Any] | None:
    """The stored GPU map as ``status`` shows it: the partition, when it was read, and each
    node with its first GPU id and its ids (node ``nodes[k]``'s GPU ``IDX`` is ``first + IDX``)."""
    if reading is None:
        return None
    per = reading.gpus_per_node
    return {
        "partition": reading.partition,
        "read_at": reading.read_at.isoformat(),
        "nodes": [
            {"node": node, "first": k * per, "gpus": list(range(k * per, (k + 1) * per))}
            for k, node in enumerate(reading.nodes)
        ],
    }


def placement_reason(
    run: PlanRun, job_id: str, estimate: JobEstimate | None, planned_start: datetime | None
) -> str:
    """Why a queued job starts when ``run`` plans it, in one short line (with no start in the
    horizon: :func:`gpuplan.app.core.no_start.no_start_reason`)."""
    if estimate is None:
        return "no forecast (the model cannot read its spec)"
    block = f"{estimate.gpus}-GPU block"
    if planned_start is None:
        return no_start_reason(run, job_id, estimate.gpus)
    if planned_start <= run.start:
        return f"starts in the first open hour on a free {block}"
    wait = (planned_start - run.start).total_seconds() / 3600
    return f"waits {wait:g} h: busier or higher-value work holds every {block} until then"


def _queue_row(
    job: Job, newest: PlanRun | None, places: dict[str, tuple[datetime, int]], pools: Sequence[Pool] = ()
) -> dict[str, Any]:
    """A queued job's status row; on a cluster of several ``pools``, with the pool of its
    planned block (None: not planned)."""
    place = places.get(job.id)
    start = None if place is None else place[0]
    row = {
        "job": job.id,
        "team": job.team,
        "priority": job.priority,
        "gpus": None if job.estimate is None else job.estimate.gpus,
        "planned_start": None if start is None else start.isoformat(),
        "reason": "no plan yet" if newest is None else placement_reason(newest, job.id, job.estimate, start),
    }
    if len(pools) > 1:
        row["pool"] = _planned_pool(pools, place)
    return row


def checked_pool(pool: str | None, pools: Sequence[Pool], field_name: str = "pool") -> str | None:
    """A status's ``pool`` (``?pool=``, ``--pool``): None, or a pool of the config's several
    ``pools``; else InputError naming ``field_name`` and the known ones."""
    names = [p.name for p in pools] if len(pools) > 1 else []
    if pool is None or pool in names:
        return pool
    expected = f"one of the cluster's pools {names}" if names else "absent: the cluster is one pool"
    raise InputError(field_name, expected, pool)


def pool_name(pools: Sequence[Pool], gpu: int | None) -> str | None:
    """The name of the pool of ``pools`` (the config's ``cluster.pools``) that holds GPU
    ``gpu``; None for no GPU, or one outside every pool."""
    pool = None if gpu is None else pool_at(pools, gpu)
    return None if pool is None else pool.name


def _planned_pool(pools: Sequence[Pool], place: tuple[datetime | None, int | None] | None) -> str | None:
    """The pool of a planned block (``planned_place``'s start and first GPU), on several pools."""
    return pool_name(pools, None if place is None else place[1]) if len(pools) > 1 else None


def pool_rows(
    pools: Sequence[Pool], running: Sequence[dict[str, Any]], down: Iterable[int]
) -> list[dict[str, Any]] | None:
    """Each pool's GPUs now: its GPUs, those the running batch jobs and the real-time apps hold,
    those down (and held by nothing), and the rest, free. None on a cluster of one pool."""
    if len(pools) <= 1:
        return None
    held: dict[str, set[int]] = {"batch": set(), "realtime": set()}
    for row in running:
        held["realtime" if row["kind"] == "realtime" else "batch"].update(row["gpus"])
    busy = held["batch"] | held["realtime"]
    rows = []
    for pool in pools:
        inside = set(range(pool.first_gpu, pool.end_gpu))
        batch, realtime = len(held["batch"] & inside), len(held["realtime"] & inside)
        off = len((set(down) & inside) - busy)
        rows.append(
            {
                "pool": pool.name,
                "gpu_model": pool.gpu_model,
                "gpus": pool.gpus,
                "first_gpu": pool.first_gpu,
                "batch": batch,
                "realtime": realtime,
                "down": off,
                "free": pool.gpus - batch - realtime - off,
            }
        )
    return rows


def job_list(
    store: Store,
    *,
    states: Sequence[JobState] | None,
    team: str | None,
    limit: int,
    offset: int,
    pools: Sequence[Pool] = (),
) -> tuple[int, list[dict[str, Any]]]:
    """``GET /v1/jobs``: how many jobs match, and the page of them from ``offset`` (at most
    ``limit``), in submission order, each as :func:`job_view` shows it (one read of the plan)."""
    jobs = [job for job in store.jobs(states) if team is None or job.team == team]
    page = jobs[offset : offset + limit]
    newest = _newest_plan(store) if any(job.state is JobState.QUEUED for job in page) else None
    return len(jobs), [job_view(store, job, newest=newest, pools=pools) for job in page]


def job_view(
    store: Store, job: Job, *, newest: PlanRun | None = None, pools: Sequence[Pool] = ()
) -> dict[str, Any]:
    """One job as ``GET /v1/jobs/{id}`` shows it: state, forecast, planned or actual start, GPUs,
    outcome (``newest``: the plan the queue follows, when the caller read it already). On a
    cluster of several ``pools`` (the config's), its ``pool``: that of its GPUs once started,
    of its planned block while queued (None where the plan does not place it)."""
    planned: datetime | None = None
    reason = None
    place: tuple[datetime | None, int | None] | None = None
    if job.state is JobState.QUEUED:
        newest = newest or _newest_plan(store)
        if newest is not None:
            place = planned_place(newest, job.id)
            planned = place[0]
            reason = placement_reason(newest, job.id, job.estimate, planned)
    estimate = job.estimate
    where: dict[str, str | None] = {}
    if len(pools) > 1:
        started = job.state is not JobState.QUEUED and job.first_gpu is not None
        where = {"pool": pool_name(pools, job.first_gpu) if started else _planned_pool(pools, place)}
    return {
        "job": job.id,
        "kind": job.kind,
        "team": job.team,
        "priority": job.priority,
        "state": job.state.value,
        "submitted_at": job.submitted_at.isoformat(),
        "forecast": None
        if estimate is None
        else {"gpus": estimate.gpus, "hours_p50": estimate.hours_p50, "hours_p90": estimate.hours_p90},
        "planned_start": None if planned is None else planned.isoformat(),
        "promised_start": None if job.promised_start is None else job.promised_start.isoformat(),
        "reason": reason,
        "started_at": None if job.started_at is None else job.started_at.isoformat(),
        "gpus": None
        if job.first_gpu is None or job.gpus is None
        else list(range(job.first_gpu, job.first_gpu + job.gpus)),
        "ended_at": None if job.ended_at is None else job.ended_at.isoformat(),
        "outcome": None if job.outcome is None else job.outcome.value,
    } | where


def _newest_plan(store: Store, last: PlanRun | None = None) -> PlanRun | None:
    """The run whose grid is the queue's current plan: the latest plan or submit run (not a
    review). ``last``: the latest run, when the caller has it already."""
    last = last or store.run()
    if last is not None and last.mode is not RunMode.REVIEW:
        return last
    return next(iter(store.runs(mode=RunMode.PLAN, limit=1)), None)


@dataclass(frozen=True)
class Beside:
    """What the status reads from the store beside the jobs and the runs: the real-time apps'
    rows (the GPUs the latest committed hour up to now's placed them), the leading daemon and
    the partition's GPU map. A batch of submits moves none of them, so the served status reads
    them once for every status built from one read of the queue
    (:attr:`gpuplan.app.jobs.changes.Mirror.root`; a new GPU map moves the store's marks)."""

    realtime: tuple[dict[str, Any], ...]
    leader: dict[str, Any] | None
    gpu_map: dict[str, Any] | None
    #: The GPUs down in the hour of now (read for a cluster of several pools only).
    down: frozenset[int] = frozenset()


def read_beside(store: Store, now: datetime, pools: Sequence[Pool] = ()) -> Beside:
    """:class:`Beside` as the store holds it, for a status at ``now`` (on several ``pools``,
    with the GPUs down in its hour)."""
    commit = store.last_commit(before=floor_hour(now) + STEP)
    realtime: tuple[dict[str, Any], ...] = ()
    if commit is not None:  # the real-time apps, as the latest committed hour placed them
        since = commit.hour.isoformat()
        realtime = tuple(
            {"job": app, "kind": "realtime", "team": None, "gpus": list(gpus), "since": since}
            | _pool_key(pools, min(gpus, default=None))
            for app, gpus in realtime_sets(commit, [app.id for app in store.apps()]).items()
        )
    cluster = store.cluster() if len(pools) > 1 else None
    down = frozenset() if cluster is None else frozenset(down_gpus_at(cluster, floor_hour(now)))
    return Beside(realtime, leader_of(store.leader()), gpu_map_view(store.gpu_map()), down)


def _pool_key(pools: Sequence[Pool], gpu: int | None) -> dict[str, Any]:
    """A running row's ``pool`` (of its first GPU), on a cluster of several pools; else none."""
    return {"pool": pool_name(pools, gpu)} if len(pools) > 1 else {}


def _limit_keys(job: Job, now: datetime) -> dict[str, Any]:
    """A running job's time limit (``bridge.time_limit``) and whether ``now`` is past it."""
    limit = time_limit(job)
    return {
        "time_limit": None if limit is None else limit.isoformat(),
        "overrun": limit is not None and now >= limit,
    }


def status(
    store: Store,
    now: datetime,
    *,
    team: str | None = None,
    known: tuple[Sequence[Job], PlanRun | None] | None = None,
    rows: QueueRows | None = None,
    beside: Beside | None = None,
    pools: Sequence[Pool] = (),
    teams: Sequence[Team] = (),
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
) -> Status:
    """What holds GPUs now (running batch jobs, and the real-time apps as the latest committed
    hour placed them), the queue by planned start from the latest plan with each job's reason,
    the last run, the leading daemon (on PostgreSQL, where a standby may wait) and the
    partition's stored GPU map. ``team``
    keeps that team's jobs only (and leaves the apps out). ``known``: the queued and running
    jobs and the latest run, when the caller holds them (:class:`gpuplan.app.jobs.changes.Mirror`);
    ``rows``: the queue's rows of the status built before, reused where unchanged;
    ``beside``: what the status reads beside the jobs and the runs, when the caller holds it.
    ``pools``: the config's ``cluster.pools``; on several, each pool's GPUs now and each row's
    pool (a running job's, of its GPUs; a queued job's, of its planned block). ``teams``: the
    config's, each with its row (:func:`gpuplan.app.views.teams.team_status`, its use decayed
    by ``half_life_days``)."""
    if known is None:
        known = (store.jobs([JobState.QUEUED, JobState.RUNNING]), store.run())
    jobs, last = known
    newest = _newest_plan(store, last)
    running = [
        {
            "job": job.id,
            "kind": job.kind.value,
            "team": job.team,
            "gpus": list(range(job.first_gpu, job.first_gpu + job.gpus)),
            "since": job.started_at.isoformat(),
            **_limit_keys(job, now),
            **_pool_key(pools, job.first_gpu),
        }
        for job in jobs
        if job.state is JobState.RUNNING
        and job.first_gpu is not None
        and job.gpus is not None
        and job.started_at is not None
    ]
    around = read_beside(store, now, pools) if beside is None else beside
    running += around.realtime  # shared between statuses, as the kept queue rows are: never mutated
    places = {} if newest is None else planned_places(newest)
    queued = [job for job in jobs if job.state is JobState.QUEUED]
    if rows is None:
        queue = [_queue_row(job, newest, places, pools) for job in queued]
    else:
        queue = rows.rows(queued, newest, places, pools)
    # Planned starts first, earliest first (ISO times in one zone sort as text); unplanned last.
    queue.sort(key=lambda row: (row["planned_start"] is None, row["planned_start"] or ""))
    summary = None if last is None else run_summary(last)
    return Status(
        now,
        running,
        queue,
        summary,
        around.leader,
        around.gpu_map,
        pool_rows(pools, running, around.down),
        _team_rows(store, now, jobs, pools=pools, teams=teams, half_life_days=half_life_days),
    ).of_team(team)


def _team_rows(
    store: Store,
    now: datetime,
    jobs: Sequence[Job],
    *,
    pools: Sequence[Pool],
    teams: Sequence[Team],
    half_life_days: float,
) -> list[dict[str, Any]] | None:
    """The teams' rows of the status, from the queued and running ``jobs`` and the finished ones
    whose use still counts; None without teams (or a cluster)."""
    cluster = store.cluster() if teams else None
    if cluster is None:
        return None
    finished = store.jobs([JobState.DONE], submitted_since=history_since(now, half_life_days))
    return team_status(
        teams, half_life_days, pools=pools, cluster_gpus=cluster.gpus, jobs=[*jobs, *finished], now=now
    )


def find_run(store: Store, which: str) -> PlanRun:
    """``latest`` or a run id; InputError when there is none."""
    if which == "latest":
        run = store.run()
        if run is None:
            raise NotFoundError("run_id", "a stored run (the database has none yet)", which)
        return run
    if not which.isdigit():
        raise InputError("run_id", "a run id (a whole number) or `latest`", which)
    run = store.run(int(which))
    if run is None:
        raise NotFoundError("run_id", "the id of a stored run", which)
    return run


def run_export(run: PlanRun) -> dict[str, dict[str, Any]]:
    """A stored run as ``scenario``, ``plan`` (CONTRACT.md formats) and ``run`` documents."""
    plan = {
        "scenario": run.scenario.get("name"),
        "policy": run.policy,
        "grid": run.grid,
        "metrics": run.metrics,
        "solve_ms": round(run.latency_ms, 3),
        "status": run.status,
        "bound": run.bound,
    }
    return {"scenario": run.scenario, "plan": plan, "run": run_summary(run)}


def export_run(run: PlanRun, out_dir: Path) -> list[Path]:
    """Write ``scenario.json``, ``plan.json`` (CONTRACT.md formats) and ``run.json`` into ``out_dir``."""

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, payload in run_export(run).items():
        path = out_dir / f"{name}.json"
        write_json_atomic(path, payload)
        written.append(path)
    return written
