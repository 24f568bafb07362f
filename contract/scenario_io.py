"""Reading scenario files and writing plan files, with the contract's validation.

Every rule of ../shared/CONTRACT.md that a scenario can break is checked here, once,
and reported as an :class:`~contract.errors.InputError` naming the field (as a path
such as ``jobs[3].gpus``), what was expected and what came.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from contract.errors import InputError
from contract.files import read_document
from contract.files import write_json_atomic as write_json_atomic  # noqa: PLC0414  # re-exported: callers keep one name
from contract.scenario import (
    DEFAULT_POOL,
    BatchJob,
    DownWindow,
    Instance,
    JobKind,
    Pool,
    RealtimeJob,
    RunningBatch,
    RunningRealtime,
    Team,
)
from contract.teams_io import read_half_life, read_job_team, read_p90, read_teams, teams_of

TOP_KEYS = {
    "name",
    "gpus",
    "horizon",
    "step_minutes",
    "decay",
    "rt_penalty",
    "promise_penalty",
    "promise_slack",
    "promise_break",
    "jobs",
    "running",
    "down",
    "pools",
    "teams",
    "fair_share",
}
BATCH_KEYS = {
    "id",
    "kind",
    "priority",
    "gpus",
    "duration",
    "release",
    "order",
    "promise",
    "pools",
    "duration_by_pool",
    "team",
    "p90_duration",
}
REALTIME_KEYS = {"id", "kind", "priority", "demand", "swap_cap", "pool", "team", "demand_by_pool"}
POOL_KEYS = {"name", "gpu_model", "gpus"}
#: A job's ``pools`` that allows every pool of the cluster.
ANY_POOL = "any"
RUNNING_KEYS = {"id", "gpus", "remaining"}
DOWN_KEYS = {"gpu", "start", "end"}

# Documented limits (README, "Limits and formats"), checked before any work is done.
#: The largest cluster a scenario may describe; the fast mode takes about 0.4 s at 1,024.
MAX_CLUSTER_GPUS = 4096
#: Four weeks of hourly steps.
MAX_HORIZON_STEPS = 168 * 4
#: GPUs x steps: 4,096 GPUs for a week of hours, or 1,024 GPUs for four weeks. The fast
#: mode's time grows with the grid: 22 s of CPU at 4,096 x 168 with 2,048 jobs, over
#: 500 s at 4,096 x 672 (README, "Limits, formats and failures").
MAX_GRID_CELLS = 4096 * 168
#: A day per step.
MAX_STEP_MINUTES = 24 * 60
#: Jobs per scenario (batch and real-time together).
MAX_JOBS = 10_000
#: Priorities and the penalty ratio are bounded so that the full mode's integer objective
#: (priority x (1 + rt_penalty) x 1000 per GPU-step, over up to 4,096 x 672 cells) stays
#: far inside CP-SAT's 64-bit arithmetic.
MAX_PRIORITY = 1e6
MAX_RT_PENALTY = 1e3
#: Per GPU-step of delay past a promise, times priority: bounded like the penalty ratio.
MAX_PROMISE_PENALTY = 1e3


def load_scenario(path: Path) -> Instance:
    return parse_scenario(read_document(path, "scenario"), source=str(path), default_name=path.stem)


class _Reader:
    """Typed field access that raises InputError with the field's path."""

    def __init__(self, source: str | None) -> None:
        self.source = source

    def fail(self, field: str, expected: str, got: object, hint: str | None = None) -> InputError:
        return InputError(field, expected, got, source=self.source, hint=hint)

    def mapping(self, value: object, field: str, allowed: set[str], required: set[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(field or "(top level)", "an object", type(value).__name__)
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise self.fail(
                f"{field}.{unknown[0]}" if field else unknown[0],
                f"one of the keys {sorted(allowed)}",
                unknown[0],
                "Unknown key.",
            )
        missing = sorted(required - set(value))
        if missing:
            raise self.fail(f"{field}.{missing[0]}" if field else missing[0], "present", "missing")
        return value

    def integer(
        self, value: object, field: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(field, "an integer", value)
        if minimum is not None and value < minimum:
            raise self.fail(field, f"an integer >= {minimum}", value)
        if maximum is not None and value > maximum:
            raise self.fail(field, f"an integer <= {maximum}", value)
        return value

    def number(self, value: object, field: str, *, positive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(field, "a number", value)
        if not math.isfinite(value):
            raise self.fail(field, "a finite number", value)
        if positive and value <= 0:
            raise self.fail(field, "a number > 0", value)
        return float(value)

    def string(self, value: object, field: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(field, "a non-empty string", value)
        return value

    def sequence(self, value: object, field: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(field, "a list", type(value).__name__)
        return value


def parse_scenario(
    document: object, *, source: str | None = None, default_name: str = "scenario"
) -> Instance:
    """Validate a parsed scenario document and build the :class:`Instance`."""
    r = _Reader(source)
    top = r.mapping(document, "", TOP_KEYS, {"jobs"})
    name = r.string(top.get("name", default_name), "name")
    pools = _parse_pools(r, top)
    if "gpus" not in top and not pools:
        raise r.fail("gpus", "present", "missing")
    cluster_gpus = r.integer(
        top["gpus"] if "gpus" in top else sum(p.gpus for p in pools),
        "gpus",
        minimum=1,
        maximum=MAX_CLUSTER_GPUS,
    )
    if pools and cluster_gpus != sum(p.gpus for p in pools):
        raise r.fail("gpus", f"the sum of the pools' GPUs ({sum(p.gpus for p in pools)})", cluster_gpus)
    horizon = r.integer(top.get("horizon", 24), "horizon", minimum=1, maximum=MAX_HORIZON_STEPS)
    step_minutes = r.integer(top.get("step_minutes", 60), "step_minutes", minimum=1, maximum=MAX_STEP_MINUTES)
    if cluster_gpus * horizon > MAX_GRID_CELLS:
        raise r.fail(
            "horizon",
            f"at most {MAX_GRID_CELLS // cluster_gpus} steps for {cluster_gpus} GPUs "
            f"(GPUs x steps <= {MAX_GRID_CELLS:,})",
            horizon,
        )
    decay = r.number(top.get("decay", 0.95), "decay", positive=True)
    if decay > 1:
        raise r.fail("decay", "a number in (0, 1]", decay)
    rt_penalty = r.number(top.get("rt_penalty", 8.0), "rt_penalty")
    if not 0 <= rt_penalty <= MAX_RT_PENALTY:
        raise r.fail("rt_penalty", f"a number in [0, {MAX_RT_PENALTY:g}]", rt_penalty)
    promise_penalty = r.number(top.get("promise_penalty", 0.0), "promise_penalty")
    if not 0 <= promise_penalty <= MAX_PROMISE_PENALTY:
        raise r.fail("promise_penalty", f"a number in [0, {MAX_PROMISE_PENALTY:g}]", promise_penalty)
    promise_slack = r.integer(
        top.get("promise_slack", 0), "promise_slack", minimum=0, maximum=MAX_HORIZON_STEPS
    )
    promise_break = r.number(top.get("promise_break", 0.0), "promise_break")
    if not 0 <= promise_break <= MAX_HORIZON_STEPS:
        raise r.fail("promise_break", f"a number of steps in [0, {MAX_HORIZON_STEPS}]", promise_break)

    teams = read_teams(r, top, gpus_per_model(pools, cluster_gpus), horizon)
    batch_jobs: list[BatchJob] = []
    realtime_jobs: list[RealtimeJob] = []
    seen: dict[str, str] = {}
    jobs_raw = r.sequence(top["jobs"], "jobs")
    if len(jobs_raw) > MAX_JOBS:
        raise r.fail("jobs", f"a list of at most {MAX_JOBS:,} jobs", f"{len(jobs_raw):,} jobs")
    for index, raw in enumerate(jobs_raw):
        field = f"jobs[{index}]"
        if not isinstance(raw, Mapping):
            raise r.fail(field, "an object", type(raw).__name__)
        kind_value = raw.get("kind")
        kinds = [k.value for k in JobKind]
        if kind_value not in kinds:
            raise r.fail(f"{field}.kind", f"one of {kinds}", kind_value)
        kind = JobKind(str(kind_value))
        if kind.is_batch:
            job_map = r.mapping(raw, field, BATCH_KEYS, {"id", "kind", "priority", "gpus"})
        else:
            demand_key = "demand_by_pool" if "demand_by_pool" in raw else "demand"
            job_map = r.mapping(raw, field, REALTIME_KEYS, {"id", "kind", "priority", demand_key, "swap_cap"})
        job_id = r.string(job_map["id"], f"{field}.id")
        if job_id in seen:
            raise r.fail(
                f"{field}.id",
                "an id used by no other job",
                job_id,
                f"Already used by {seen[job_id]}.",
            )
        seen[job_id] = field
        priority = r.number(job_map["priority"], f"{field}.priority", positive=True)
        if priority > MAX_PRIORITY:
            raise r.fail(f"{field}.priority", f"a number in (0, {MAX_PRIORITY:g}]", priority)
        team = read_job_team(r, job_map, field, teams)
        if kind.is_batch:
            job = _batch_job(r, job_map, _Job(field, index, job_id, kind, priority), cluster_gpus, pools)
            batch_jobs.append(
                job
                if team is None and "p90_duration" not in job_map
                else replace(job, team=team, p90_steps=read_p90(r, job_map, field, job.duration_steps))
            )
        else:
            service = _realtime_job(r, job_map, _Job(field, index, job_id, kind, priority), horizon, pools)
            realtime_jobs.append(service if team is None else replace(service, team=team))

    down = _parse_down(r, top.get("down", []), cluster_gpus, horizon)
    running_batch, running_realtime = _parse_running(
        r,
        top.get("running", []),
        cluster_gpus,
        {j.id: j for j in batch_jobs},
        {j.id: j for j in realtime_jobs},
    )
    realtime_jobs = [_serving_default(job, running_realtime, pools) for job in realtime_jobs]
    instance = Instance(
        name=name,
        gpus=cluster_gpus,
        horizon_steps=horizon,
        step_minutes=step_minutes,
        decay=decay,
        rt_penalty=rt_penalty,
        promise_penalty=promise_penalty,
        promise_slack_steps=promise_slack,
        promise_break_steps=promise_break,
        batch_jobs=tuple(batch_jobs),
        realtime_jobs=tuple(realtime_jobs),
        running_batch=running_batch,
        running_realtime=running_realtime,
        down=down,
        pools=tuple(pools),
        teams=teams,
        half_life_days=read_half_life(r, top),
    )
    _check_running_in_pools(r, instance, top.get("running", []))
    _check_running_against_down(r, instance)
    return instance


@dataclass(frozen=True, slots=True)
class _Job:
    """What every job of the file has, read before its kind's own keys."""

    field: str
    index: int
    id: str
    kind: JobKind
    priority: float


def _batch_job(
    r: _Reader, job_map: Mapping[str, Any], job: _Job, cluster_gpus: int, pools: list[Pool]
) -> BatchJob:
    """A batch job's own keys: its size, where it may run and for how long, when."""
    gpus = r.integer(job_map["gpus"], f"{job.field}.gpus", minimum=1)
    if gpus & (gpus - 1):
        raise r.fail(f"{job.field}.gpus", "a power of two (1, 2, 4, 8, ...)", gpus)
    if gpus > cluster_gpus:
        raise r.fail(f"{job.field}.gpus", f"at most the cluster's {cluster_gpus} GPUs", gpus)
    duration, steps_by_pool = _job_pools(r, job_map, job.field, pools)
    if steps_by_pool is not None:
        largest = max(p.gpus for p in pools if p.name in steps_by_pool)
        if gpus > largest:
            raise r.fail(
                f"{job.field}.gpus",
                f"at most {largest} GPUs (the largest of its pools {sorted(steps_by_pool)})",
                gpus,
            )
    return BatchJob(
        id=job.id,
        kind=job.kind,
        priority=job.priority,
        gpus=gpus,
        duration_steps=duration,
        steps_by_pool=steps_by_pool,
        release_step=r.integer(job_map.get("release", 0), f"{job.field}.release", minimum=0),
        order=r.integer(job_map.get("order", job.index), f"{job.field}.order"),
        promise_step=None
        if job_map.get("promise") is None
        else r.integer(job_map["promise"], f"{job.field}.promise", minimum=-MAX_HORIZON_STEPS),
    )


def _realtime_job(
    r: _Reader, job_map: Mapping[str, Any], job: _Job, horizon: int, pools: list[Pool]
) -> RealtimeJob:
    """A real-time job's own keys: its demand per step, its pool (or its demand on each of
    several pools), its swap cap."""
    swap_cap = r.integer(
        # Changing more than every GPU twice a step is the same as no cap.
        job_map["swap_cap"],
        f"{job.field}.swap_cap",
        minimum=0,
        maximum=2 * MAX_CLUSTER_GPUS,
    )
    if "demand_by_pool" in job_map:
        by_pool = _demand_by_pool(r, job_map, job.field, horizon, pools)
        first = next(iter(by_pool))
        return RealtimeJob(job.id, job.priority, by_pool[first], swap_cap, pool=first, demand_by_pool=by_pool)
    demand = _demand(r, job_map["demand"], f"{job.field}.demand", horizon)
    pool = None
    if "pool" in job_map:
        if not pools:
            expected = "absent in a scenario without a `pools` section"
            raise r.fail(f"{job.field}.pool", expected, job_map["pool"])
        pool = r.string(job_map["pool"], f"{job.field}.pool")
        if pool not in [p.name for p in pools]:
            raise r.fail(f"{job.field}.pool", f"one of the cluster's pools {[p.name for p in pools]}", pool)
    return RealtimeJob(
        id=job.id,
        priority=job.priority,
        demand=demand,
        pool=pool,
        swap_cap=swap_cap,
    )


def _demand(r: _Reader, value: object, field: str, horizon: int) -> tuple[int, ...]:
    """A service's demand: ``horizon`` GPU counts, one per step."""
    demand_raw = r.sequence(value, field)
    if len(demand_raw) != horizon:
        raise r.fail(field, f"a list of {horizon} integers (one per step)", f"{len(demand_raw)} values")
    return tuple(
        r.integer(v, f"{field}[{t}]", minimum=0, maximum=MAX_CLUSTER_GPUS) for t, v in enumerate(demand_raw)
    )


def _demand_by_pool(
    r: _Reader, job_map: Mapping[str, Any], field: str, horizon: int, pools: list[Pool]
) -> dict[str, tuple[int, ...]]:
    """A service's ``demand_by_pool``: pool name -> its demand there, in the cluster's order;
    it then names neither ``demand`` nor ``pool``."""
    for key in ("demand", "pool"):
        if key in job_map:
            raise r.fail(f"{field}.{key}", "absent beside `demand_by_pool`", job_map[key])
    given = job_map["demand_by_pool"]
    if not pools:
        raise r.fail(f"{field}.demand_by_pool", "absent in a scenario without a `pools` section", given)
    if not isinstance(given, Mapping) or not given:
        raise r.fail(f"{field}.demand_by_pool", "an object of pool name -> demand per step", given)
    names = [p.name for p in pools]
    for name in given:
        if name not in names:
            raise r.fail(f"{field}.demand_by_pool.{name}", f"one of the cluster's pools {names}", name)
    listed = [name for name in names if name in given]  # in the cluster's order
    return {name: _demand(r, given[name], f"{field}.demand_by_pool.{name}", horizon) for name in listed}


def _serving_default(
    job: RealtimeJob, running: Mapping[str, RunningRealtime], pools: list[Pool]
) -> RealtimeJob:
    """A service of several pools serves, where a plan holds none of its GPUs, on the pool of
    its running set, else on the pool where it needs the fewest GPU-steps (the first at a tie)."""
    if job.demand_by_pool is None:
        return job
    held = running.get(job.id)
    first, choice = 0, None
    for pool in pools:
        end = first + pool.gpus
        if (
            held
            and held.gpus
            and pool.name in job.demand_by_pool
            and all(first <= g < end for g in held.gpus)
        ):
            choice = pool.name
        first = end
    if choice is None:
        totals = {name: sum(demand) for name, demand in job.demand_by_pool.items()}
        choice = min(totals, key=lambda name: (totals[name], list(totals).index(name)))
    return replace(job, pool=choice, demand=job.demand_by_pool[choice])


def parse_pools(value: object, *, source: str | None) -> list[Pool]:
    """A list of ``{name, gpu_model, gpus}`` read by the scenario's ``pools`` rules (the daemon's
    config reads its ``cluster.pools`` with them too); :class:`InputError` names ``pools[i]...``."""
    return _parse_pools(_Reader(source), {"pools": value})


def gpus_per_model(pools: list[Pool] | tuple[Pool, ...], cluster_gpus: int) -> dict[str, int]:
    """Each GPU model of the cluster and its GPUs (a cluster without pools: ``default``, all of them)."""
    if not pools:
        return {DEFAULT_POOL: cluster_gpus}
    models: dict[str, int] = {}
    for pool in pools:
        models[pool.gpu_model] = models.get(pool.gpu_model, 0) + pool.gpus
    return models


def parse_teams(value: object, *, models: Mapping[str, int], source: str | None) -> tuple[Team, ...]:
    """A list of ``{name, quota, weight, past_gpu_hours}`` read by the scenario's ``teams`` rules
    (the daemon's config reads its ``teams:`` with them); ``models``: each GPU model's GPUs."""
    return teams_of(_Reader(source), value, models, None)


def parse_half_life(value: object, *, source: str | None) -> float:
    """``fair_share`` (``{half_life_days}``) read by the scenario's rules: its half-life in days."""
    return read_half_life(_Reader(source), {"fair_share": value})


def _parse_pools(r: _Reader, top: Mapping[str, Any]) -> list[Pool]:
    """The optional ``pools`` section: names once each, at least one GPU each."""
    if "pools" not in top:
        return []
    raw = r.sequence(top["pools"], "pools")
    if not raw:
        raise r.fail("pools", "a list of at least one pool", "an empty list")
    pools: list[Pool] = []
    for index, entry in enumerate(raw):
        field = f"pools[{index}]"
        item = r.mapping(entry, field, POOL_KEYS, {"name", "gpus"})
        name = r.string(item["name"], f"{field}.name")
        if name == ANY_POOL:
            raise r.fail(f"{field}.name", f"a name other than {ANY_POOL!r} (it means every pool)", name)
        if any(p.name == name for p in pools):
            raise r.fail(f"{field}.name", "a name used by no other pool", name)
        gpus = r.integer(item["gpus"], f"{field}.gpus", minimum=1, maximum=MAX_CLUSTER_GPUS)
        model = r.string(item.get("gpu_model", name), f"{field}.gpu_model")
        pools.append(Pool(name=name, gpu_model=model, gpus=gpus))
    return pools


def _job_pools(
    r: _Reader, job: Mapping[str, Any], field: str, pools: list[Pool]
) -> tuple[int, dict[str, int] | None]:
    """A batch job's ``duration`` and its steps per allowed pool (None: every pool, ``duration``).

    ``pools`` lists where it may run (``any``, the default: every pool); ``duration_by_pool``
    gives its steps on some of them (the others take ``duration``, which may then be left out).
    """
    names = [p.name for p in pools]
    if ("pools" in job or "duration_by_pool" in job) and not pools:
        key = "pools" if "pools" in job else "duration_by_pool"
        raise r.fail(f"{field}.{key}", "absent in a scenario without a `pools` section", job[key])
    allowed = list(names)
    if job.get("pools", ANY_POOL) != ANY_POOL:
        listed = r.sequence(job["pools"], f"{field}.pools")
        if not listed:
            raise r.fail(f"{field}.pools", f"{ANY_POOL!r} or a list of at least one pool", "an empty list")
        for k, name in enumerate(listed):
            if name not in names:
                raise r.fail(f"{field}.pools[{k}]", f"one of the cluster's pools {names}", name)
        allowed = [name for name in names if name in listed]
    by_pool: dict[str, int] = {}
    if "duration_by_pool" in job:
        given = job["duration_by_pool"]
        if not isinstance(given, Mapping):
            raise r.fail(f"{field}.duration_by_pool", "an object of pool name -> steps", type(given).__name__)
        for name, steps in given.items():
            if name not in allowed:
                raise r.fail(f"{field}.duration_by_pool.{name}", f"one of the job's pools {allowed}", name)
            by_pool[name] = r.integer(steps, f"{field}.duration_by_pool.{name}", minimum=1)
    if "duration" in job:
        duration = r.integer(job["duration"], f"{field}.duration", minimum=1)
    elif pools and all(name in by_pool for name in allowed):
        duration = by_pool[allowed[0]]
    else:
        raise r.fail(
            f"{field}.duration", "present (or a `duration_by_pool` for each of its pools)", "missing"
        )
    if not pools:
        return duration, None
    return duration, {name: by_pool.get(name, duration) for name in allowed}


def _check_running_in_pools(r: _Reader, instance: Instance, raw: object) -> None:
    """Running work on a cluster of pools: a batch block inside one of its pools, aligned in
    it, with at most that pool's steps left; a service's GPUs in its pool."""
    if not instance.pooled:
        return
    fields = {entry["id"]: f"running[{index}]" for index, entry in enumerate(r.sequence(raw, "running"))}
    jobs = instance.jobs_by_id
    for running in instance.running_batch.values():
        job = jobs[running.job_id]
        assert isinstance(job, BatchJob)
        allowed = instance.allowed_pools(job)
        pool = next((p for p in allowed if p.holds(running.first_gpu, running.gpus)), None)
        field = fields[running.job_id]
        if pool is None:
            raise r.fail(
                f"{field}.gpus",
                f"an aligned block inside one of the job's pools {[p.name for p in allowed]}",
                list(range(running.first_gpu, running.first_gpu + running.gpus)),
            )
        steps = instance.run_steps(job, running.first_gpu)
        if running.remaining_steps > steps:
            raise r.fail(
                f"{field}.remaining",
                f"at most the job's duration on pool {pool.name} ({steps} steps)",
                running.remaining_steps,
            )
    for held in instance.running_realtime.values():
        rt = jobs[held.job_id]
        assert isinstance(rt, RealtimeJob)
        pool = instance.realtime_pool(rt)
        if held.mask & ~pool.mask:
            where = f"pool {pool.name}" if rt.demand_by_pool is None else f"pools {list(rt.demand_by_pool)}"
            raise r.fail(f"{fields[held.job_id]}.gpus", f"GPUs of the service's {where}", sorted(held.gpus))


def _parse_down(r: _Reader, raw: object, cluster_gpus: int, horizon: int) -> tuple[DownWindow, ...]:
    windows = []
    for index, entry in enumerate(r.sequence(raw, "down")):
        field = f"down[{index}]"
        window = r.mapping(entry, field, DOWN_KEYS, {"gpu"})
        gpu = r.integer(window["gpu"], f"{field}.gpu", minimum=0, maximum=cluster_gpus - 1)
        start = r.integer(window.get("start", 0), f"{field}.start", minimum=0, maximum=horizon - 1)
        end = r.integer(window.get("end", horizon), f"{field}.end", minimum=start + 1, maximum=horizon)
        windows.append(DownWindow(gpu=gpu, start_step=start, end_step=end))
    return tuple(windows)


def _parse_running(
    r: _Reader,
    raw: object,
    cluster_gpus: int,
    batch: Mapping[str, BatchJob],
    realtime: Mapping[str, RealtimeJob],
) -> tuple[dict[str, RunningBatch], dict[str, RunningRealtime]]:
    running_batch: dict[str, RunningBatch] = {}
    running_realtime: dict[str, RunningRealtime] = {}
    owner: dict[int, str] = {}
    for index, entry in enumerate(r.sequence(raw, "running")):
        field = f"running[{index}]"
        item = r.mapping(entry, field, RUNNING_KEYS, {"id", "gpus"})
        job_id = r.string(item["id"], f"{field}.id")
        if job_id not in batch and job_id not in realtime:
            raise r.fail(f"{field}.id", "the id of a job listed in `jobs`", job_id)
        if job_id in running_batch or job_id in running_realtime:
            raise r.fail(f"{field}.id", "a job listed once in `running`", job_id)
        gpu_list = [
            r.integer(g, f"{field}.gpus[{k}]", minimum=0, maximum=cluster_gpus - 1)
            for k, g in enumerate(r.sequence(item["gpus"], f"{field}.gpus"))
        ]
        if len(set(gpu_list)) != len(gpu_list):
            raise r.fail(f"{field}.gpus", "distinct GPU ids", gpu_list)
        for gpu in gpu_list:
            if gpu in owner:
                raise r.fail(
                    f"{field}.gpus",
                    f"GPUs not held by another running job (GPU {gpu} is {owner[gpu]}'s)",
                    gpu_list,
                )
            owner[gpu] = job_id
        if job_id in batch:
            job = batch[job_id]
            if "remaining" not in item:
                raise r.fail(f"{field}.remaining", "present for a running batch job", "missing")
            remaining = r.integer(item["remaining"], f"{field}.remaining", minimum=1)
            longest = max((job.steps_by_pool or {}).values(), default=job.duration_steps)
            if remaining > longest:
                raise r.fail(
                    f"{field}.remaining",
                    f"at most the job's duration ({longest} steps)",
                    remaining,
                    "A running job cannot have more left to run than its whole run.",
                )
            first = min(gpu_list) if gpu_list else 0
            # On a cluster of pools a block is aligned from its pool's first GPU (checked later).
            aligned = job.steps_by_pool is not None or first % job.gpus == 0
            if sorted(gpu_list) != list(range(first, first + job.gpus)) or not aligned:
                raise r.fail(
                    f"{field}.gpus",
                    f"an aligned block of {job.gpus} GPUs [a, a+{job.gpus}) with a % {job.gpus} == 0",
                    gpu_list,
                )
            running_batch[job_id] = RunningBatch(job_id, first, job.gpus, remaining)
        else:
            if "remaining" in item:
                raise r.fail(f"{field}.remaining", "absent for a real-time job", item["remaining"])
            running_realtime[job_id] = RunningRealtime(job_id, frozenset(gpu_list))
    return running_batch, running_realtime


def _check_running_against_down(r: _Reader, instance: Instance) -> None:
    """Reject running work that no legal plan could honour, so every valid scenario has one."""
    down = instance.down_masks
    for running in instance.running_batch.values():
        for t in range(min(running.remaining_steps, instance.horizon_steps)):
            if down[t] & running.mask:
                raise r.fail(
                    f"running[{running.job_id}].gpus",
                    f"GPUs that are up while the job runs (it cannot be moved); down at step {t}",
                    sorted(g for g in range(instance.gpus) if down[t] >> g & 1 and running.mask >> g & 1),
                )
    for running_rt in instance.running_realtime.values():
        cap = next(j.swap_cap for j in instance.realtime_jobs if j.id == running_rt.job_id)
        # A held GPU that goes down must be released first; at most swap_cap per step.
        first_down = sorted(
            next(t for t in range(instance.horizon_steps) if down[t] >> g & 1)
            for g in running_rt.gpus
            if any(down[t] >> g & 1 for t in range(instance.horizon_steps))
        )
        for count, step in enumerate(first_down, start=1):
            if count > cap * (step + 1):
                raise r.fail(
                    f"running[{running_rt.job_id}].gpus",
                    f"a set the job can leave before its GPUs go down (swap_cap {cap} per step)",
                    sorted(running_rt.gpus),
                    f"{count} of them are down by step {step}.",
                )


PLAN_METRIC_KEYS = (
    "utilization",
    "value",
    "penalty",
    "objective",
    "rt_coverage",
    "completed",
    "unscheduled",
    "rt_moves",
)


@dataclass(frozen=True, slots=True)
class StoredPlan:
    """What a plan file says: its grid, and the metrics it claims (``None`` when it has none)."""

    grid: list[list[str | None]]
    metrics: Mapping[str, float] | None


def read_plan(path: Path) -> StoredPlan:
    """A plan file's grid and stored metrics; legality is :func:`scheduler.check.check_plan`'s job."""
    r = _Reader(str(path))
    document = read_document(path, "plan")
    if not isinstance(document, Mapping):
        raise r.fail("(top level)", "a plan object with a `grid`", type(document).__name__)
    if "grid" not in document:
        raise r.fail("grid", "present", "missing")
    grid = []
    for g, row in enumerate(r.sequence(document["grid"], "grid")):
        cells = r.sequence(row, f"grid[{g}]")
        for t, cell in enumerate(cells):
            if cell is not None and not isinstance(cell, str):
                raise r.fail(f"grid[{g}][{t}]", "a job id (a string) or null", cell)
        grid.append(cells)
    metrics = None
    if document.get("metrics") is not None:
        stored = document["metrics"]
        if not isinstance(stored, Mapping):
            raise r.fail("metrics", "an object", type(stored).__name__)
        # Other tools may add metrics of their own; only the contract's are compared.
        metrics = {key: r.number(stored[key], f"metrics.{key}") for key in PLAN_METRIC_KEYS if key in stored}
    return StoredPlan(grid=grid, metrics=metrics)


def read_plan_grid(path: Path) -> list[list[str | None]]:
    """The ``grid`` of a plan file."""
    return read_plan(path).grid
