"""The plan cycle's improvement step: large-neighbourhood search with CP-SAT on windows.

From the fast plan, each step frees one window (a span of hours x a block of GPUs, see
:class:`scheduler.cpmodel.Window`), fixes the rest, and lets CP-SAT re-plan the window
exactly, hinted with the current plan; the result is kept only if the contract's score
improves (Shaw 1998, "Using constraint programming and local search methods to solve
vehicle routing problems"; Pisinger & Ropke 2010, "Large neighborhood search").

First, each of the costliest delays whose job is wider than the first blocks gets a window
of its own (:func:`_targeted`: its block over the whole horizon). Then window sizes are swept
in a fixed order (:func:`_stages`): 16-hour spans, then 8-hour ones, then the whole horizon,
on blocks of 4 GPUs, then larger blocks, up to the whole grid, which gets all the time left.
Within a sweep, the windows where the plan is worst come first (the most idle GPU-steps,
weighted by the decay, while a queued job waits), so that a large cluster's few windows per
second go where they can gain. A sweep that improved something is repeated at its size. A
window's result is kept when it scores more, or the same with fewer real-time moves.
The search ends at the budget, when the whole grid is solved to optimality, or when it
improves nothing. Each window's CP-SAT call runs on one worker with a deterministic-time
limit, so the same plan and budget repeat the same steps wherever the wall clock does
not cut in. A work-only budget (:meth:`~scheduler.budget.Budget.of_work`) has no wall
clock at all: its share of work is spent in CP-SAT's deterministic seconds, the whole
grid's last window included, so the search repeats on any machine, however busy.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from contract.scenario import BatchJob, Instance, iter_gpus
from scheduler.board import Board, free_block_starts
from scheduler.budget import Budget
from scheduler.cpmodel import BuildTimeoutError, Window, build_model, hint, read_allocation
from scheduler.fast import EPSILON, best_of, most_delayed, objective
from scheduler.model import Allocation, batch_masks

log = logging.getLogger(__name__)

# Below this much wall time left, a CP-SAT step is not started (building and solving even a
# small window costs a few milliseconds; the plan must be back within the budget).
MIN_STEP_S = 0.02
# CP-SAT's deterministic time per window (about a second of work on one core per unit).
STEP_DETERMINISTIC_TIME = 0.1
# Wall-time share of what is left that one window may take.
STEP_WALL_SHARE = 0.5
# Windows: batch starts in spans of these many hours (overlapping by half), then the whole
# horizon, on GPU blocks of this many GPUs (the whole cluster when smaller), then larger.
# Blocks of 4 first (was 16): on the 40 tuning scenarios of the wide generator, the plan
# cycle's mean ratio to the best known rose from 0.988 to 0.996 (worst 0.909 -> 0.921);
# a small window is solved within its deterministic time where a whole 8-GPU one is not.
# Measured on 33 sampled scenarios (seeds 1-3 of the twelve sample shapes) against the 30 s
# full mode: 16-hour spans beat 8 and 12 as the first (mean 0.9998 vs 0.997, worst 0.946 vs
# 0.920); then 8-hour spans move where 16 were too hard (calibrated training-heavy: 0.958
# -> 0.990 of the 60 s full mode).
SPAN_STEPS = (16, 8)
FIRST_WINDOW_GPUS = 4
# The costliest delays, of which those wider than the first sweeps' blocks get a window of
# their own before the sweeps (plan cycle, widened tuning set: 3 scenarios better and 1 worse,
# the worst 0.932 -> 0.961; for every one of the three, 6 and 12).
TARGETED_JOBS = 3
# Delayed jobs from outside a window that it may move in (the costliest delays first).
PULLED_JOBS = 8
# ... on windows of at most this share of the cluster (1/8): on small clusters a window holds
# most of the delayed jobs already, and pulling more in made windows too hard to solve within
# their deterministic time (tuning split, seeds 1-4: mean 0.9996 -> 0.9991 when pulled everywhere).
PULL_FROM_SHARE = 8
# Seconds kept back at the end for building the grid and checking the plan.
FINISH_RESERVE_S = 0.03
# Budgets from this many milliseconds on run the search (CP-SAT's import and a first window
# cost tens of milliseconds); the heuristic searches before it get this share of the budget.
MIN_BUDGET_MS = 200.0
HEURISTIC_SHARE = 0.1
# CP-SAT settings for window solves: no probing and no symmetry detection in presolve. A
# window needs a good plan fast, not a proof, and with them CP-SAT often spent a window's
# whole deterministic time in presolve and returned nothing (measured on the same 33).
WINDOW_PARAMETERS: dict[str, object] = {"cp_model_probing_level": 0, "symmetry_level": 0}


@dataclass(frozen=True, slots=True)
class LnsReport:
    """What the search did: windows solved, improvements kept, and whether it proved the plan optimal."""

    windows: int
    improvements: int
    proven_optimal: bool


def warm_up() -> None:
    """Load CP-SAT now (about a second), so that a later plan cycle spends its budget on planning."""
    from ortools.sat.python import cp_model  # noqa: F401  (imported for its side effect)


def improve(
    instance: Instance, allocation: Allocation, budget: Budget, seed: int = 0
) -> tuple[Allocation, LnsReport]:
    """``allocation`` improved window by window until the budget runs out or nothing improves."""
    from ortools.sat.python import cp_model

    best, best_objective = allocation, objective(instance, allocation)
    whole = Window.whole(instance)
    windows = improvements = 0
    # A work-only budget is spent in CP-SAT's deterministic seconds, never in wall time.
    work_left_s = budget.units / 1e6 if budget.work_only else math.inf
    stages = _stages(instance)
    fixed = [d | r for d, r in zip(instance.down_masks, instance.running_masks, strict=True)]
    stage = -1  # the windows of the costliest delays first, then the sweeps
    while stage < len(stages):
        improved = False
        delayed = most_delayed(instance, best)
        targeted = _targeted(instance, delayed) if stage < 0 else {}
        sweep = (
            list(targeted) if stage < 0 else _worst_first(instance, best, _windows(instance, *stages[stage]))
        )
        for window in sweep:
            if improved:
                delayed = most_delayed(instance, best)
            pull = _pulled(instance, fixed, window, delayed, best)
            if window in targeted and targeted[window] not in pull:
                pull.append(targeted[window])
            left_s = min(budget.remaining_s() - FINISH_RESERVE_S, work_left_s)
            if left_s < MIN_STEP_S:
                return best, LnsReport(windows, improvements, proven_optimal=False)
            model = cp_model.CpModel()
            # The whole grid is the last resort: it gets all the time that is left.
            share = 1.0 if window == whole else STEP_WALL_SHARE
            step_deadline = math.inf if budget.work_only else time.perf_counter() + share * left_s
            try:
                v, _ = build_model(model, instance, window, best, deadline=step_deadline, pull=pull)
            except BuildTimeoutError:
                continue
            hint(model, v, instance, best)
            solver = cp_model.CpSolver()
            # CP-SAT's own Ctrl-C handler, once a solve ends, leaves SIGINT at its default: a
            # daemon's handler (finish the cycle, then exit) would be gone after the first cycle.
            solver.parameters.catch_sigint_signal = False
            solver.parameters.num_workers = 1
            solver.parameters.random_seed = seed
            if window != whole:
                solver.parameters.max_deterministic_time = min(STEP_DETERMINISTIC_TIME, work_left_s)
            elif budget.work_only:
                solver.parameters.max_deterministic_time = work_left_s
            for name, value in WINDOW_PARAMETERS.items():
                setattr(solver.parameters, name, value)
            if not budget.work_only:
                solver.parameters.max_time_in_seconds = max(0.001, step_deadline - time.perf_counter())
            status = solver.solve(model)
            work_left_s -= solver.deterministic_time
            windows += 1
            log.debug("window %s: %s", window, solver.status_name(status))
            if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                continue
            candidate = read_allocation(v, instance, solver)
            candidate_objective = objective(instance, candidate)
            if candidate_objective > best_objective + EPSILON:
                best, best_objective = candidate, candidate_objective
                improvements += 1
                improved = True
            elif candidate_objective >= best_objective - EPSILON:
                best = best_of(instance, [best, candidate])  # fewer real-time moves at equal value
            if status == cp_model.OPTIMAL and window == whole:
                return best, LnsReport(windows, improvements, proven_optimal=True)
        if not improved:
            stage += 1  # else the same size again: one improvement often opens the next
    return best, LnsReport(windows, improvements, proven_optimal=False)


def _targeted(instance: Instance, delayed: list[BatchJob]) -> dict[Window, str]:
    """A window for each job wider than the first sweeps' blocks among the
    :data:`TARGETED_JOBS` costliest delays (``delayed``, from
    :func:`~scheduler.fast.most_delayed`), with the job it is for (pulled in when it is placed
    outside it): the aligned block of the job's size where its earliest run on the fixed load
    begins, over the whole horizon (the whole grid keeps its place, last). Those sweeps cannot
    move such a job at all, and a small cluster's second can run out on them."""
    fixed = Board(instance)
    windows: dict[Window, str] = {}
    for job in delayed[:TARGETED_JOBS]:
        run = fixed.earliest_run(job, job.release_step)
        if run is None or job.gpus <= FIRST_WINDOW_GPUS:
            continue
        *_, starts = run  # aligned first GPUs of the job's size
        first = next(iter_gpus(starts))
        window = Window(first, first + job.gpus, 0, instance.horizon_steps)
        if window != Window.whole(instance):  # the whole grid keeps its place, last
            windows.setdefault(window, job.id)
    return windows


def _pulled(
    instance: Instance, busy: list[int], window: Window, delayed: list[BatchJob], plan: Allocation
) -> list[str]:
    """The delayed jobs (the costliest delay first, at most :data:`PULLED_JOBS`) placed outside
    ``window`` that fit its block and could start earlier in its span, on GPUs of the block
    that nothing fixed takes (``busy``: down or running, per step): the window may move them
    in, onto idle cells that no job of its own could use."""
    block = window.end_gpu - window.first_gpu
    if block * PULL_FROM_SHARE > instance.gpus:
        return []
    horizon = instance.horizon_steps
    pulled = []
    for job in delayed:
        placed = plan.batch.get(job.id)
        if placed is None or window.frees(placed) or job.gpus > block:
            continue
        for start in range(max(job.release_step, window.start_step), min(window.end_step, placed.start_step)):
            taken = 0
            for t in range(start, job.end_step(start, horizon)):
                taken |= busy[t]
            free = window.gpu_mask & ~taken
            if free and free_block_starts(free, instance.gpus, job.gpus):
                pulled.append(job.id)
                break
        if len(pulled) == PULLED_JOBS:
            break
    return pulled


def _stages(instance: Instance) -> list[tuple[int, int]]:
    """Window sizes, ``(span steps, block GPUs)``, in the order they are swept.

    On each block size: the first spans, then half as long (a window too hard to solve in
    its deterministic time often moves once it is smaller), then the whole horizon; then
    blocks twice as large, up to the whole grid.
    """
    horizon = instance.horizon_steps
    spans = []
    for steps in (*SPAN_STEPS, horizon):
        if min(steps, horizon) not in spans:
            spans.append(min(steps, horizon))
    stages = []
    block = min(FIRST_WINDOW_GPUS, instance.gpus)
    while True:
        stages += [(steps, block) for steps in spans]
        if block == instance.gpus:
            return stages
        block = min(instance.gpus, block * 2)


def _worst_first(instance: Instance, plan: Allocation, windows: list[Window]) -> list[Window]:
    """``windows``, the one with the most idle GPU-steps first, each weighted by the
    objective's decay (an idle early hour is worth more), while some queued job waits or
    is left out; in sweep order when none does (nothing could fill the idle cells).
    """
    placed = plan.batch
    if all(
        job.id in placed and placed[job.id].start_step <= job.release_step for job in instance.queued_jobs
    ):
        return windows
    busy = taken_cells(instance, plan)
    weights = instance.weights

    def idle(window: Window) -> float:
        mask = window.gpu_mask
        return sum(
            weights[t] * (mask & ~busy[t]).bit_count() for t in range(window.start_step, window.end_step)
        )

    return sorted(windows, key=lambda w: -idle(w))


def taken_cells(instance: Instance, plan: Allocation) -> list[int]:
    """Per step, the GPUs down, running, or taken by ``plan``'s batch jobs and services."""
    busy = batch_masks(instance, plan.batch)
    for held in plan.realtime.values():
        for t, mask in enumerate(held):
            busy[t] |= mask
    return busy


def _windows(instance: Instance, steps: int, block: int) -> list[Window]:
    """One sweep: every ``block``-GPU block x every ``steps``-hour span (spans overlap by
    half, so that a job can move across a window's edge)."""
    horizon, gpus = instance.horizon_steps, instance.gpus
    stride = max(1, steps // 2)
    starts = list(range(0, horizon - steps + 1, stride))
    if starts[-1] + steps < horizon:
        starts.append(horizon - steps)
    blocks = [(a, min(a + block, gpus)) for a in range(0, gpus, block)]
    return [Window(g0, g1, t0, t0 + steps) for g0, g1 in blocks for t0 in starts]
