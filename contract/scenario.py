"""The scenario model of the allocation contract (docs/contract.md) and the one job-kind enum.

An :class:`Instance` is one scenario: the cluster, the jobs, what is running and
what is down. A policy turns it into an allocation (``scheduler/model.py``), and
``scheduler.model.build_grid`` turns that into the contract's grid (:data:`Grid`), the
form every check and metric reads.

GPU sets are Python ints used as bitmasks (bit ``g`` set = GPU ``g``): set algebra
on a whole step is then one integer operation, which is what keeps the fast mode fast.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property

Cell = str | None
Grid = tuple[tuple[Cell, ...], ...]


class JobKind(StrEnum):
    """The job kinds of the contract: three batch kinds and real-time inference.

    The one vocabulary of kinds: scenarios, the stored jobs and the forecasters' feature
    schemas all name a kind by this enum (a ``StrEnum``, so it compares and hashes as
    its value, ``"training"``).
    """

    TRAINING = "training"
    BATCH_INFERENCE = "batch_inference"
    QUANTIZATION = "quantization"
    REALTIME = "realtime"

    @property
    def is_batch(self) -> bool:
        """A rigid block held until done (every kind but real-time inference)."""
        return self is not JobKind.REALTIME

    @property
    def is_forecast(self) -> bool:
        """A kind whose hours and memory a learned forecaster estimates from job features."""
        return self in (JobKind.TRAINING, JobKind.QUANTIZATION)

    @classmethod
    def batch(cls) -> tuple[JobKind, ...]:
        """The batch kinds, in the contract's order."""
        return tuple(kind for kind in cls if kind.is_batch)

    @classmethod
    def forecast(cls) -> tuple[JobKind, ...]:
        """The kinds with a learned forecaster, in the contract's order."""
        return tuple(kind for kind in cls if kind.is_forecast)


def block_mask(first_gpu: int, gpus: int) -> int:
    """Bitmask of the GPUs ``[first_gpu, first_gpu + gpus)``."""
    return ((1 << gpus) - 1) << first_gpu


def mask_of(gpus: Sequence[int] | frozenset[int]) -> int:
    mask = 0
    for gpu in gpus:
        mask |= 1 << gpu
    return mask


def gpus_of(mask: int) -> list[int]:
    """GPU ids in a bitmask, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def iter_gpus(mask: int) -> Iterator[int]:
    """GPU ids in a bitmask, ascending, one at a time (a caller that stops early pays for no more)."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def iter_gpus_down(mask: int) -> Iterator[int]:
    """GPU ids in a bitmask, descending, one at a time."""
    while mask:
        gpu = mask.bit_length() - 1
        yield gpu
        mask ^= 1 << gpu


@dataclass(frozen=True, slots=True)
class BatchJob:
    """Training, batch inference or quantization: a rigid block held until done."""

    id: str
    kind: JobKind
    priority: float
    gpus: int
    duration_steps: int
    release_step: int = 0
    order: int = 0
    #: The start step promised at submit (may be before step 0: a promise already late);
    #: None: no promise. Weighed only when the instance's ``promise_penalty`` is above 0.
    promise_step: int | None = None
    #: Where the job may run and how many steps it takes there (pool name -> steps); None:
    #: on every pool, ``duration_steps`` on each. Not hashed (a mapping): ids identify jobs.
    steps_by_pool: Mapping[str, int] | None = field(default=None, hash=False)
    #: The team the job belongs to (one of the instance's ``teams``); None: no team.
    team: str | None = None
    #: Its steps at its P90 (on the pool of ``duration_steps``; on another pool in the same
    #: ratio to its steps there); None: ``duration_steps``. Read by the lending rule (constraint 7).
    p90_steps: int | None = None

    def end_step(self, start_step: int, horizon_steps: int) -> int:
        """Exclusive last step of a run starting at ``start_step``, cut at the horizon
        (``duration_steps`` long: on a cluster of several pools, see :meth:`Instance.run_end`)."""
        return min(start_step + self.duration_steps, horizon_steps)

    def steps_on(self, pool: str) -> int | None:
        """The job's steps on ``pool``, or None where it may not run."""
        if self.steps_by_pool is None:
            return self.duration_steps
        return self.steps_by_pool.get(pool)


@dataclass(frozen=True, slots=True)
class RealtimeJob:
    """Real-time inference: elastic, follows ``demand`` (GPUs per step)."""

    id: str
    priority: float
    demand: tuple[int, ...]
    swap_cap: int
    kind: JobKind = JobKind.REALTIME
    #: The pool the service runs on (one pool per service); None: the cluster's first pool.
    pool: str | None = None
    #: The team the service belongs to (one of the instance's ``teams``); None: no team.
    team: str | None = None
    #: The pools the service may serve on, one per plan, and its demand on each (pool name ->
    #: GPUs per step); None: its one pool, ``pool``. With them, ``pool`` and ``demand`` are
    #: the pool it serves on where a plan holds none of its GPUs (see
    #: :meth:`Instance.serving_in`) and its demand there. Not hashed (a mapping).
    demand_by_pool: Mapping[str, tuple[int, ...]] | None = field(default=None, hash=False)

    def worth_on(self, pool: str) -> float:
        """What one of its served GPU-steps on ``pool`` is worth against one on the pool where
        it needs the fewest GPU-steps: those fewest over its GPU-steps on ``pool`` (1 on its
        one pool). Its requests are the same wherever it serves; a slower pool spreads them
        over more GPUs, as a batch job's work over more steps."""
        if self.demand_by_pool is None:
            return 1.0
        totals = {name: sum(demand) for name, demand in self.demand_by_pool.items()}
        fewest = min(totals.values())
        return fewest / totals[pool] if totals[pool] else 1.0

    def serving_on(self, pool: str) -> RealtimeJob:
        """The service planned on ``pool`` alone: its demand there, its priority times its worth
        there (so the contract's scoring of a one-pool service is this service's)."""
        if self.demand_by_pool is None:
            return self
        return replace(
            self,
            pool=pool,
            demand=self.demand_by_pool[pool],
            priority=self.priority * self.worth_on(pool),
            demand_by_pool=None,
        )


@dataclass(frozen=True, slots=True)
class RunningBatch:
    job_id: str
    first_gpu: int
    gpus: int
    remaining_steps: int

    @property
    def mask(self) -> int:
        return block_mask(self.first_gpu, self.gpus)


@dataclass(frozen=True, slots=True)
class RunningRealtime:
    job_id: str
    gpus: frozenset[int]

    @property
    def mask(self) -> int:
        return mask_of(self.gpus)


@dataclass(frozen=True, slots=True)
class DownWindow:
    gpu: int
    start_step: int
    end_step: int


#: The name of the one pool of a cluster that names none.
DEFAULT_POOL = "default"


@dataclass(frozen=True, slots=True)
class Pool:
    """GPUs of one model: ``[first_gpu, first_gpu + gpus)`` of the cluster's global GPU ids.

    Pools lie side by side in the order the cluster lists them; :class:`Instance` sets each
    ``first_gpu``. A buddy block lies inside one pool, aligned from the pool's first GPU.
    """

    name: str
    gpu_model: str
    gpus: int
    first_gpu: int = 0

    @property
    def end_gpu(self) -> int:
        return self.first_gpu + self.gpus

    @property
    def mask(self) -> int:
        return block_mask(self.first_gpu, self.gpus)

    def holds(self, first_gpu: int, gpus: int) -> bool:
        """Whether the block ``[first_gpu, first_gpu + gpus)`` lies in the pool, aligned in it."""
        return (
            self.first_gpu <= first_gpu
            and first_gpu + gpus <= self.end_gpu
            and (first_gpu - self.first_gpu) % gpus == 0
        )


def pool_at(pools: Sequence[Pool], gpu: int) -> Pool | None:
    """The pool of ``pools`` (placed: their ``first_gpu`` set) that holds GPU ``gpu``, or None."""
    return next((pool for pool in pools if pool.first_gpu <= gpu < pool.end_gpu), None)


@dataclass(frozen=True, slots=True)
class Team:
    """A team: GPUs guaranteed per GPU model, a weight for what is beyond, its past use.

    ``quota`` maps a GPU model of the cluster's pools to the GPUs of that model the team is
    guaranteed (docs/teams.md, constraint 7 of docs/contract.md). ``past_gpu_hours`` is its
    use so far, already decayed by the scenario's half-life; ``forecast`` maps a model to the
    GPUs its arrivals are expected to need at each step (the owner's need that lent GPUs
    must leave room for). Not hashed (mappings): names identify teams.
    """

    name: str
    quota: Mapping[str, int] = field(default_factory=dict, hash=False)
    weight: float = 1.0
    past_gpu_hours: float = 0.0
    forecast: Mapping[str, tuple[int, ...]] = field(default_factory=dict, hash=False)


def fair_share_factors(teams: Sequence[Team]) -> dict[str, float]:
    """Per team, the fair-share multiplier on its batch work's worth: ``2 ** (1 - u / s)``,
    with ``s`` its weight's share of the weights and ``u`` its share of the past GPU-hours
    (Slurm's classic fair-share factor ``2 ** (-u / s)``, doubled so that a team at its
    share is weighed 1); all 1 when no team has used anything."""
    used = sum(team.past_gpu_hours for team in teams)
    weights = sum(team.weight for team in teams)
    if not used:
        return {team.name: 1.0 for team in teams}
    return {
        team.name: 2.0 ** (1.0 - (team.past_gpu_hours / used) / (team.weight / weights)) for team in teams
    }


#: The fair-share half-life when a scenario with teams names none (days).
DEFAULT_HALF_LIFE_DAYS = 7.0


@dataclass(frozen=True)
class Instance:
    """One scenario, validated (see :mod:`contract.scenario_io`)."""

    name: str
    gpus: int
    horizon_steps: int = 24
    step_minutes: int = 60
    decay: float = 0.95
    rt_penalty: float = 8.0
    batch_jobs: tuple[BatchJob, ...] = ()
    realtime_jobs: tuple[RealtimeJob, ...] = ()
    running_batch: Mapping[str, RunningBatch] = field(default_factory=dict)
    running_realtime: Mapping[str, RunningRealtime] = field(default_factory=dict)
    down: tuple[DownWindow, ...] = ()
    #: Per GPU-step of delay past a promised start, times the job's priority (0: promises
    #: weigh nothing, and the objective is the contract's).
    promise_penalty: float = 0.0
    #: Steps of delay a promise allows: a start within them keeps it and costs nothing
    #: (0: every step late costs).
    promise_slack_steps: int = 0
    #: What breaking a promise costs at once, in steps of delay (0: only the steps late cost).
    promise_break_steps: float = 0.0
    #: The cluster's pools, side by side from GPU 0 (their ``first_gpu`` is set here); none
    #: given: one pool of every GPU, today's cluster.
    pools: tuple[Pool, ...] = ()
    #: The teams (docs/teams.md); none: every job competes on its priority alone, as the
    #: contract says, and constraint 7 does not apply.
    teams: tuple[Team, ...] = ()
    #: The half-life (days) the teams' ``past_gpu_hours`` were decayed with.
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS

    def __post_init__(self) -> None:
        pools = self.pools or (Pool(DEFAULT_POOL, DEFAULT_POOL, self.gpus),)
        if len(pools) == 1:
            pools = (replace(pools[0], gpus=self.gpus),)  # one pool is the whole cluster
        placed, first = [], 0
        for pool in pools:
            placed.append(replace(pool, first_gpu=first))
            first += pool.gpus
        if first != self.gpus:
            raise ValueError(f"pools hold {first} GPUs, the instance {self.gpus}")
        object.__setattr__(self, "pools", tuple(placed))

    @property
    def pooled(self) -> bool:
        """Whether the cluster has more than one pool."""
        return len(self.pools) > 1

    @cached_property
    def pools_by_name(self) -> dict[str, Pool]:
        return {pool.name: pool for pool in self.pools}

    def pool_of_gpu(self, gpu: int) -> Pool:
        pool = pool_at(self.pools, gpu)
        if pool is None:
            raise IndexError(gpu)
        return pool

    def allowed_pools(self, job: BatchJob) -> tuple[Pool, ...]:
        """The pools ``job`` may run on and fits in, in the cluster's order."""
        return tuple(
            pool for pool in self.pools if job.gpus <= pool.gpus and job.steps_on(pool.name) is not None
        )

    def realtime_pool(self, job: RealtimeJob) -> Pool:
        return self.pools[0] if job.pool is None else self.pools_by_name[job.pool]

    @cached_property
    def has_app_choices(self) -> bool:
        """Whether a service may serve on one of several pools (``demand_by_pool``)."""
        return any(job.demand_by_pool is not None for job in self.realtime_jobs)

    def serving_on(self, chosen: Mapping[str, str]) -> Instance:
        """The instance with each service that may serve on several pools planned on one: its
        pool in ``chosen`` (service id -> pool name), else its ``pool``
        (:meth:`RealtimeJob.serving_on`). Every policy plans, and the checker judges, such an
        instance; with no service of several pools it is this one."""
        if not self.has_app_choices:
            return self
        services = tuple(
            job if job.demand_by_pool is None else job.serving_on(chosen.get(job.id) or job.pool or "")
            for job in self.realtime_jobs
        )
        return replace(self, realtime_jobs=services)

    def serving_in(self, grid: Sequence[Sequence[Cell]]) -> dict[str, str]:
        """The pool each service of several pools serves on in ``grid``: that of the first GPU
        it holds at its first step held (its ``pool`` where it holds none)."""
        chosen: dict[str, str] = {}
        choosing = {job.id: job for job in self.realtime_jobs if job.demand_by_pool is not None}
        if not choosing:
            return chosen
        for t in range(self.horizon_steps):
            for gpu, row in enumerate(grid):
                cell = row[t] if t < len(row) else None
                if cell in choosing and cell not in chosen:
                    chosen[cell] = self.pool_of_gpu(gpu).name
            if len(chosen) == len(choosing):
                break
        for job_id, job in choosing.items():
            chosen.setdefault(job_id, job.pool or self.pools[0].name)
        return chosen

    def as_served(self, grid: Sequence[Sequence[Cell]]) -> Instance:
        """The instance with each service of several pools on the pool it serves on in ``grid``
        (:meth:`serving_in`; its ``pool`` where that is none of its pools: an illegal grid, which
        the checker reports): what the grid is scored and judged against."""
        if not self.has_app_choices:
            return self
        jobs = self.jobs_by_id
        chosen = {
            job_id: pool
            for job_id, pool in self.serving_in(grid).items()
            if pool in (getattr(jobs[job_id], "demand_by_pool", None) or {})
        }
        return self.serving_on(chosen)

    def run_steps(self, job: BatchJob, first_gpu: int) -> int:
        """The steps of ``job``'s run on the block from ``first_gpu`` (its pool's duration)."""
        if not self.pooled:
            return job.duration_steps
        steps = job.steps_on(self.pool_of_gpu(first_gpu).name)
        return job.duration_steps if steps is None else steps

    def output_rate(self, job: BatchJob, first_gpu: int) -> float:
        """What one GPU-step of ``job`` on the pool of ``first_gpu`` is worth against one on its
        fastest pool: its steps there over its steps here (1 on a cluster of one pool). The
        job's work is the same wherever it runs; a slower pool spreads it over more steps."""
        if not self.pooled:
            return 1.0
        fastest = min(self.run_steps(job, pool.first_gpu) for pool in self.allowed_pools(job))
        return fastest / self.run_steps(job, first_gpu)

    def run_end(self, job: BatchJob, start_step: int, first_gpu: int) -> int:
        """Exclusive last step of ``job``'s run from ``start_step`` on the block from ``first_gpu``."""
        return min(start_step + self.run_steps(job, first_gpu), self.horizon_steps)

    @cached_property
    def has_promises(self) -> bool:
        return self.promise_penalty > 0 and any(job.promise_step is not None for job in self.queued_jobs)

    def promise_cost(self, job: BatchJob, start_step: int | None) -> float:
        """What starting ``job`` at ``start_step`` (None: not in the horizon) costs its promise.

        ``promise_penalty x priority`` per step of delay past the promised step and its
        slack, plus ``promise_break_steps`` such steps once the delay is past the slack (the
        promise is broken); a job left out of the horizon is charged as if it started at the
        horizon's end. Per job, not per GPU: promises are judged per job, and a wide job's
        promise is no more kept for holding more GPUs.
        """
        if job.promise_step is None or not self.promise_penalty:
            return 0.0
        begin = self.horizon_steps if start_step is None else start_step
        late = begin - job.promise_step - self.promise_slack_steps
        if late <= 0:
            return 0.0
        return (
            self.promise_penalty * job.priority * self.share_factor(job) * (late + self.promise_break_steps)
        )

    @cached_property
    def team_factors(self) -> dict[str, float]:
        """Per team, the fair-share multiplier on its batch work's worth (:func:`fair_share_factors`)."""
        return fair_share_factors(self.teams)

    def share_factor(self, job: BatchJob) -> float:
        """What the fair share multiplies ``job``'s worth by: its team's factor (1 without one,
        and in an instance without teams, such as the weighted one of ``scheduler.teams``, whose
        priorities carry the factors already and whose jobs still name their teams)."""
        return self.team_factors.get(job.team, 1.0) if job.team is not None else 1.0

    def p90_end(self, job: BatchJob, start_step: int, first_gpu: int) -> int:
        """Exclusive last step of ``job``'s run from ``start_step`` on the block from ``first_gpu``
        were it to last its P90: its P90 steps scaled to that pool's steps, cut at the horizon."""
        steps = self.run_steps(job, first_gpu)
        if job.p90_steps is not None:
            steps = -(-job.p90_steps * steps // job.duration_steps)
        return min(start_step + steps, self.horizon_steps)

    @cached_property
    def weights(self) -> tuple[float, ...]:
        """``w(t) = decay ** t``: later output is worth less."""
        return tuple(self.decay**t for t in range(self.horizon_steps))

    @cached_property
    def all_gpus_mask(self) -> int:
        return (1 << self.gpus) - 1

    @cached_property
    def down_masks(self) -> tuple[int, ...]:
        """Per step, the GPUs that are down."""
        masks = [0] * self.horizon_steps
        for window in self.down:
            for t in range(window.start_step, window.end_step):
                masks[t] |= 1 << window.gpu
        return tuple(masks)

    @cached_property
    def running_masks(self) -> tuple[int, ...]:
        """Per step, the GPUs held by running batch jobs."""
        masks = [0] * self.horizon_steps
        for running in self.running_batch.values():
            for t in range(min(running.remaining_steps, self.horizon_steps)):
                masks[t] |= running.mask
        return tuple(masks)

    @cached_property
    def realtime_demand(self) -> tuple[int, ...]:
        """Per step, the real-time services' demand summed."""
        demand = [0] * self.horizon_steps
        for job in self.realtime_jobs:
            demand = [total + want for total, want in zip(demand, job.demand, strict=True)]
        return tuple(demand)

    @cached_property
    def jobs_by_id(self) -> dict[str, BatchJob | RealtimeJob]:
        jobs: dict[str, BatchJob | RealtimeJob] = {job.id: job for job in self.batch_jobs}
        jobs.update((job.id, job) for job in self.realtime_jobs)
        return jobs

    @cached_property
    def queued_jobs(self) -> tuple[BatchJob, ...]:
        """Batch jobs not yet running: the ones a policy places."""
        return tuple(job for job in self.batch_jobs if job.id not in self.running_batch)

    @cached_property
    def usable_cells(self) -> int:
        return self.gpus * self.horizon_steps - sum(m.bit_count() for m in self.down_masks)
