"""Value objects of the allocation contract (../shared/CONTRACT.md).

An :class:`Instance` is one scenario: the cluster, the jobs, what is running and
what is down. A policy turns it into an :class:`Allocation` (where each batch job
starts and which GPUs each real-time job holds per step); :func:`build_grid` turns
that into the contract's grid, the form every check and metric reads.

GPU sets are Python ints used as bitmasks (bit ``g`` set = GPU ``g``): set algebra
on a whole step is then one integer operation, which is what keeps the fast mode fast.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from contract.errors import InputError

Cell = str | None
Grid = tuple[tuple[Cell, ...], ...]


class JobKind(StrEnum):
    TRAINING = "training"
    BATCH_INFERENCE = "batch_inference"
    QUANTIZATION = "quantization"
    REALTIME = "realtime"


BATCH_KINDS = frozenset({JobKind.TRAINING, JobKind.BATCH_INFERENCE, JobKind.QUANTIZATION})


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

    def end_step(self, start_step: int, horizon_steps: int) -> int:
        """Exclusive last step of a run starting at ``start_step``, cut at the horizon."""
        return min(start_step + self.duration_steps, horizon_steps)


@dataclass(frozen=True, slots=True)
class RealtimeJob:
    """Real-time inference: elastic, follows ``demand`` (GPUs per step)."""

    id: str
    priority: float
    demand: tuple[int, ...]
    swap_cap: int
    kind: JobKind = JobKind.REALTIME


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


@dataclass(frozen=True)
class Instance:
    """One scenario, validated (see :mod:`scheduler.scenario_io`)."""

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


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a queued batch job runs: block ``[first_gpu, first_gpu + gpus)`` from ``start_step``."""

    start_step: int
    first_gpu: int


@dataclass(frozen=True)
class Allocation:
    """A policy's decisions; running batch jobs are implied by the instance."""

    batch: Mapping[str, Placement]
    realtime: Mapping[str, tuple[int, ...]]  # job id -> held-GPU bitmask per step


def build_grid(instance: Instance, allocation: Allocation) -> Grid:
    rows: list[list[Cell]] = [[None] * instance.horizon_steps for _ in range(instance.gpus)]
    horizon = instance.horizon_steps
    for running in instance.running_batch.values():
        for gpu in range(running.first_gpu, running.first_gpu + running.gpus):
            rows[gpu][: min(running.remaining_steps, horizon)] = [running.job_id] * min(
                running.remaining_steps, horizon
            )
    jobs = instance.jobs_by_id
    for job_id, placement in allocation.batch.items():
        job = jobs[job_id]
        assert isinstance(job, BatchJob)
        end = job.end_step(placement.start_step, horizon)
        for gpu in range(placement.first_gpu, placement.first_gpu + job.gpus):
            rows[gpu][placement.start_step : end] = [job_id] * (end - placement.start_step)
    for job_id, held in allocation.realtime.items():
        for t, mask in enumerate(held):
            for gpu in gpus_of(mask):
                rows[gpu][t] = job_id
    return tuple(tuple(row) for row in rows)


# The fast mode's two operating points (milliseconds of wall time per call): the hot path
# answers every incoming request; the plan cycle (every 30 minutes) can spend a second.
HOT_PATH_BUDGET_MS = 2.0
PLAN_CYCLE_BUDGET_MS = 1000.0
# Documented ranges of the limits (see README): finite, above zero, at most these.
MAX_BUDGET_MS = 600_000.0
MAX_TIME_LIMIT_S = 3600.0


def checked_budget_ms(value: float, field: str = "budget_ms") -> float:
    """``value`` if it is a usable fast-mode budget, else :class:`InputError` naming ``field``."""
    if not (isinstance(value, int | float) and math.isfinite(value) and 0 < value <= MAX_BUDGET_MS):
        raise InputError(field, f"a number of milliseconds > 0 and <= {MAX_BUDGET_MS:,.0f}", value)
    return float(value)


def checked_time_limit_s(value: float, field: str = "time_limit_s") -> float:
    """``value`` if it is a usable full-mode time limit, else :class:`InputError` naming ``field``."""
    if not (isinstance(value, int | float) and math.isfinite(value) and 0 < value <= MAX_TIME_LIMIT_S):
        raise InputError(field, f"a number of seconds > 0 and <= {MAX_TIME_LIMIT_S:,.0f}", value)
    return float(value)


@dataclass(frozen=True, slots=True)
class SolveOptions:
    """How long and how wide a policy may search.

    ``budget_ms`` bounds the fast mode's whole call (the hot path by default; the plan
    cycle passes :data:`PLAN_CYCLE_BUDGET_MS`); ``time_limit_s`` bounds the full mode's
    whole call (model building, hinting and solving together); ``workers`` and ``seed``
    are CP-SAT's.
    """

    time_limit_s: float = 30.0
    workers: int = 2
    seed: int = 0
    budget_ms: float = HOT_PATH_BUDGET_MS
    #: False: the fast mode's budget counts estimated work only, with no wall-clock backstop,
    #: so a plan does not depend on how busy the machine is (simulations, experiments).
    wall_clock: bool = True

    def __post_init__(self) -> None:
        checked_budget_ms(self.budget_ms)
        checked_time_limit_s(self.time_limit_s)


@dataclass(frozen=True, slots=True)
class Solution:
    """A policy's allocation with the solver's status and proven bound (``None`` when none)."""

    allocation: Allocation
    status: str = "FEASIBLE"
    bound: float | None = None
