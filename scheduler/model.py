"""The solver's own types: where a policy puts each job, and how long it may search.

The scenario a policy reads (:class:`~contract.scenario.Instance` and its jobs) is the
contract's (``contract/scenario.py``); this module holds what the scheduler answers with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from contract.errors import InputError
from contract.scenario import BatchJob, Cell, Grid, Instance, block_mask, gpus_of


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


def placement_masks(instance: Instance, placements: Mapping[str, Placement]) -> list[int]:
    """Per step, the GPUs that the queued jobs' ``placements`` occupy."""
    masks = [0] * instance.horizon_steps
    jobs = instance.jobs_by_id
    for job_id, placement in placements.items():
        job = jobs[job_id]
        assert isinstance(job, BatchJob)
        mask = block_mask(placement.first_gpu, job.gpus)
        for t in range(
            placement.start_step, instance.run_end(job, placement.start_step, placement.first_gpu)
        ):
            masks[t] |= mask
    return masks


def batch_masks(instance: Instance, placements: Mapping[str, Placement]) -> list[int]:
    """Per step, the GPUs down, held by running batch jobs, or by ``placements``."""
    return [
        d | r | p
        for d, r, p in zip(
            instance.down_masks, instance.running_masks, placement_masks(instance, placements), strict=True
        )
    ]


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
        end = instance.run_end(job, placement.start_step, placement.first_gpu)
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


def fast_budget_ms(value: float | None, field: str = "budget_ms") -> float:
    """The fast mode's budget asked as ``field``: ``value`` checked (:func:`checked_budget_ms`),
    or the hot path's (:data:`HOT_PATH_BUDGET_MS`) when none is given."""
    return HOT_PATH_BUDGET_MS if value is None else checked_budget_ms(value, field)


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
    #: False: budgets count work only, with no wall-clock backstop, so a plan does not depend
    #: on how busy the machine is (simulations, tests, experiments): the fast mode's budget is
    #: estimated work and CP-SAT deterministic time, the full mode's ``time_limit_s`` is CP-SAT
    #: deterministic time (repeatable with ``workers=1``).
    wall_clock: bool = True
    #: The fast mode's CP-SAT window search (budgets from ``scheduler.lns.MIN_BUDGET_MS`` on). False:
    #: the heuristic alone. Loading CP-SAT takes about a second: a caller with a tight budget calls
    #: ``scheduler.lns.warm_up()`` first, or passes False.
    cp_sat: bool = True

    def __post_init__(self) -> None:
        checked_budget_ms(self.budget_ms)
        checked_time_limit_s(self.time_limit_s)


@dataclass(frozen=True, slots=True)
class Solution:
    """A policy's allocation with the solver's status and proven bound (``None`` when none)."""

    allocation: Allocation
    status: str = "FEASIBLE"
    bound: float | None = None
