"""A cluster of several pools, planned with the single-pool allocator, one pool at a time.

Pools share nothing: a batch block lies inside one pool and a service runs on its own
pool, so once each queued job is given a pool, the plan is one plan per pool. This module
splits a pooled :class:`~contract.scenario.Instance` into one single-pool instance per
pool (its GPUs counted from 0, each job with its steps on that pool), chooses each job's
pool, plans every pool with a single-pool planner (the fast mode's
:func:`scheduler.fast.allocate`, passed in) and maps the plans back to the cluster's GPU ids.
A job's priority in its pool's instance is its worth per GPU-step there (times its output
rate, :meth:`~contract.scenario.Instance.output_rate`); so is the weight of its promise.

The choice: each job, in order of priority, goes where its value (priority x decayed
output, with that pool's steps) is highest from its foreseen start there (the first step
from which an aligned block of the pool is free for it, its services' demand counted, so
GPUs free but scattered over the pool's blocks start no wide job), the wait to that start
counted :data:`WAIT_SLIP` times longer, since a foreseen wait slips as higher-priority work
arrives; then, while the budget lasts, a job left out or delayed in its pool is moved to
another of its pools, and the move is kept when the two pools' plans score higher, their
waits counted the same way.

A single-pool instance never comes here: the callers plan it as before.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from contract.scenario import BatchJob, DownWindow, Instance, JobKind, Pool, RunningRealtime, block_mask
from scheduler.board import Board
from scheduler.budget import Budget
from scheduler.metrics import score
from scheduler.model import Allocation, Placement, build_grid

log = logging.getLogger(__name__)

#: The share of the budget the first plan of every pool takes; the moves between pools get the rest.
FIRST_PLAN_SHARE = 0.5
#: At most this many moves are tried, whatever the budget (each plans two pools again).
MAX_MOVES = 64
#: How much longer than the plan foresees it the pool choice counts a queued job's wait: a
#: start planned ``w`` steps after the job's release is weighed as one ``(1 + WAIT_SLIP) x w``
#: steps after it. Each cycle the wait a plan foresaw slips as higher-priority work arrives
#: (docs/pools.md, "The foreseen wait slips"), so a start now on a slower pool that is idle
#: loses to a later start on a faster one only where the gain exceeds that risk. The plan of
#: each pool is still made and scored by the contract's objective. 0.75 since the foreseen
#: start reads the pool's free blocks (docs/pools.md: chosen on seeds 0 and 7 among 0.5, 0.75,
#: 1, 1.5 and 2; it was 1 on free GPU counts).
WAIT_SLIP = 0.75

Planner = Callable[[Instance, Budget], Allocation]
Assignment = dict[str, str]  # queued job id -> pool name


Rates = Mapping[tuple[str, str], float]  # (job id, pool name) -> its output rate there


def output_rates(instance: Instance) -> dict[tuple[str, str], float]:
    """Each batch job's output rate on each of its pools (:meth:`Instance.output_rate`), once:
    a plan asks for them every time it plans a pool again."""
    return {
        (job.id, pool.name): instance.output_rate(job, pool.first_gpu)
        for job in instance.batch_jobs
        for pool in instance.allowed_pools(job)
    }


def sub_instance(
    instance: Instance, pool: Pool, assigned: Sequence[str], rates: Rates | None = None
) -> Instance:
    """``pool`` as a cluster of its own: GPUs from 0, the queued jobs ``assigned`` to it and the
    running work and services on it, each job with its steps on ``pool`` (``rates``: the
    jobs' :func:`output_rates`, made here when not given)."""
    offset, end = pool.first_gpu, pool.end_gpu
    running = {
        job_id: replace(r, first_gpu=r.first_gpu - offset)
        for job_id, r in instance.running_batch.items()
        if offset <= r.first_gpu < end
    }
    wanted = set(assigned) | set(running)
    # A job's priority there is its worth per GPU-step on the pool: its output rate times its priority.
    jobs = tuple(
        replace(
            job,
            duration_steps=_steps(job, pool),
            steps_by_pool=None,
            priority=job.priority * _rate(instance, rates, job, pool),
        )
        for job in instance.batch_jobs
        if job.id in wanted
    )
    services = tuple(
        replace(rt, pool=None) for rt in instance.realtime_jobs if instance.realtime_pool(rt) is pool
    )
    ids = {rt.id for rt in services}
    return replace(
        instance,
        gpus=pool.gpus,
        pools=(),
        teams=(),  # a pool's plan knows no teams; the cluster's keeps constraint 7 (scheduler.teams)
        batch_jobs=jobs,
        realtime_jobs=services,
        running_batch=running,
        running_realtime={
            job_id: RunningRealtime(job_id, frozenset(g - offset for g in r.gpus))
            for job_id, r in instance.running_realtime.items()
            if job_id in ids
        },
        down=tuple(
            DownWindow(w.gpu - offset, w.start_step, w.end_step)
            for w in instance.down
            if offset <= w.gpu < end
        ),
    )


def _rate(instance: Instance, rates: Rates | None, job: BatchJob, pool: Pool) -> float:
    found = None if rates is None else rates.get((job.id, pool.name))
    return instance.output_rate(job, pool.first_gpu) if found is None else found


def _steps(job: BatchJob, pool: Pool) -> int:
    steps = job.steps_on(pool.name)
    return job.duration_steps if steps is None else steps


def merge(instance: Instance, parts: Mapping[str, Allocation]) -> Allocation:
    """One allocation of ``instance`` from each pool's (pool name -> its allocation)."""
    batch: dict[str, Placement] = {}
    realtime: dict[str, tuple[int, ...]] = {}
    for pool in instance.pools:
        part = parts[pool.name]
        for job_id, p in part.batch.items():
            batch[job_id] = Placement(start_step=p.start_step, first_gpu=p.first_gpu + pool.first_gpu)
        for job_id, held in part.realtime.items():
            realtime[job_id] = tuple(mask << pool.first_gpu for mask in held)
    return Allocation(batch=batch, realtime=realtime)


def split(instance: Instance, allocation: Allocation) -> dict[str, tuple[Instance, Allocation]]:
    """Each pool's instance and its share of ``allocation`` (pool name -> both); a queued job
    left out goes to its first allowed pool."""
    assignment = {job.id: instance.allowed_pools(job)[0].name for job in instance.queued_jobs}
    for job_id, placement in allocation.batch.items():
        assignment[job_id] = instance.pool_of_gpu(placement.first_gpu).name
    out = {}
    for pool in instance.pools:
        sub = sub_instance(instance, pool, [j for j, name in assignment.items() if name == pool.name])
        batch = {
            job_id: Placement(p.start_step, p.first_gpu - pool.first_gpu)
            for job_id, p in allocation.batch.items()
            if assignment[job_id] == pool.name
        }
        realtime = {
            rt.id: tuple(mask >> pool.first_gpu for mask in allocation.realtime[rt.id])
            for rt in sub.realtime_jobs
        }
        out[pool.name] = (sub, Allocation(batch=batch, realtime=realtime))
    return out


def per_pool(
    instance: Instance, allocation: Allocation, step: Callable[[Instance, Allocation], Allocation]
) -> Allocation:
    """``allocation`` with ``step`` (a single-pool plan's improvement) applied to every pool's part."""
    return merge(
        instance, {name: step(sub, part) for name, (sub, part) in split(instance, allocation).items()}
    )


def best_of(instance: Instance, allocations: Sequence[Allocation]) -> Allocation:
    """The allocation of the highest contract objective (the first at a tie)."""
    scored = [score(instance, build_grid(instance, a)).objective for a in allocations]
    return allocations[max(range(len(allocations)), key=lambda i: (scored[i], -i))]


def allocate(
    instance: Instance, budget: Budget, planner: Planner, objective: Callable[[Instance, Allocation], float]
) -> Allocation:
    """The pooled cluster's plan: each job's pool chosen, every pool planned by ``planner``
    (a single-pool allocator, :func:`scheduler.fast.allocate`) within a share of ``budget``,
    the pools' plans compared by ``objective`` (:func:`scheduler.fast.objective`; this module
    imports nothing of the fast mode, which the baselines it serves are part of)."""
    rates = output_rates(instance)
    assignment = first_assignment(instance, rates)
    share_ms = budget.budget_ms * FIRST_PLAN_SHARE / len(instance.pools)
    pools = {pool.name: pool for pool in instance.pools}

    def plan_pool(name: str, chosen: Assignment) -> tuple[Allocation, float]:
        sub = sub_instance(instance, pools[name], [j for j, p in chosen.items() if p == name], rates)
        run = budget.sibling(share_ms)
        allocation = planner(sub, run)
        budget.charge(run.spent)
        return allocation, objective(sub, allocation) - slip_loss(sub, allocation)

    plans = {name: plan_pool(name, assignment) for name in pools}
    tried = kept = 0
    per_move = 2 * budget.units * share_ms / budget.budget_ms  # two pools planned again
    for job, target in _moves(instance, assignment, plans):
        if tried >= MAX_MOVES or not budget.affords(per_move):
            break
        tried += 1
        source = assignment[job.id]
        trial = {**assignment, job.id: target}
        new_source, new_target = plan_pool(source, trial), plan_pool(target, trial)
        before = plans[source][1] + plans[target][1]
        if new_source[1] + new_target[1] > before + 1e-9:
            assignment = trial
            kept += 1
            plans[source], plans[target] = new_source, new_target
    log.debug("pools: %d moves tried, %d kept, %d jobs assigned", tried, kept, len(assignment))
    return merge(instance, {name: plan for name, (plan, _) in plans.items()})


def slip_loss(instance: Instance, allocation: Allocation) -> float:
    """What the queued jobs ``allocation`` starts after their release would lose were each of
    their waits :data:`WAIT_SLIP` times longer still (their value, priority x GPUs x decayed
    steps, at the slipped start against the planned one)."""
    weights = instance.weights
    loss = 0.0
    for job in instance.queued_jobs:
        placed = allocation.batch.get(job.id)
        if placed is None or placed.start_step <= job.release_step:
            continue
        start = placed.start_step
        slipped = start + math.ceil(WAIT_SLIP * (start - job.release_step))
        steps = job.duration_steps
        kept = sum(weights[start : start + steps]) - sum(weights[slipped : slipped + steps])
        loss += job.priority * job.gpus * kept
    return loss


def first_assignment(instance: Instance, rates: Rates | None = None) -> Assignment:
    """Each queued job, by priority, on the allowed pool where its value is highest from its
    foreseen start there, the wait to it counted :data:`WAIT_SLIP` times longer: the first step
    from which an aligned block of the pool is free for the job's steps there (of the running
    work, the down GPUs and the jobs given the pool so far, each on the lowest block free for
    it) while the GPUs its services' demand leaves hold the job too. A pool whose free GPUs are
    scattered over its blocks starts a wide job no sooner than its blocks allow."""
    weights, horizon = instance.weights, instance.horizon_steps
    ledgers = {pool.name: _Ledger(instance, pool) for pool in instance.pools}
    assignment: Assignment = {}
    for job in sorted(instance.queued_jobs, key=lambda j: (-j.priority, j.order)):
        best: tuple[float, int, int, str] | None = None
        for index, pool in enumerate(instance.allowed_pools(job)):
            steps = _steps(job, pool)
            start = ledgers[pool.name].earliest(job.gpus, steps, job.release_step)
            weighed = start + math.ceil(WAIT_SLIP * (start - job.release_step))
            worth = job.priority * _rate(instance, rates, job, pool) * job.gpus
            value = worth * sum(weights[weighed : min(weighed + steps, horizon)])
            if best is None or (value, -start, -index) > best[:3]:
                best = (value, -start, -index, pool.name)
        assert best is not None
        assignment[job.id] = best[3]
        ledgers[best[3]].take(job.gpus, _steps(job, instance.pools_by_name[best[3]]), -best[1])
    return assignment


class _Ledger:
    """One pool as :func:`first_assignment` foresees it: its GPUs taken per step (a board of the
    pool: the running work, the down GPUs, the jobs given it so far) and the GPUs its services'
    demand leaves free per step. A foreseen start needs both: an aligned block free on the
    board and the free count (services are counted, not placed: the plan moves them)."""

    def __init__(self, instance: Instance, pool: Pool) -> None:
        self.board = Board(sub_instance(instance, pool, ()))
        self.free = _free_counts(instance, pool)
        self.horizon = instance.horizon_steps

    def earliest(self, gpus: int, steps: int, release: int) -> int:
        """The first step from ``release`` of a run of ``steps`` (cut at the horizon) on an
        aligned block of ``gpus`` free on the board, the free count holding ``gpus`` at each of
        its steps; the horizon where there is none."""
        not_before = release
        while not_before < self.horizon:
            start, end, _ = self._run(gpus, steps, not_before)
            short = next((t for t in range(start, end) if self.free[t] < gpus), None)
            if short is None:
                return start
            not_before = short + 1
        return self.horizon

    def take(self, gpus: int, steps: int, start: int) -> None:
        """The run of a job given the pool, from ``start``: its lowest free block, and its count."""
        if start >= self.horizon:
            return
        start, end, starts = self._run(gpus, steps, start)
        if start >= self.horizon:
            return
        first_gpu = (starts & -starts).bit_length() - 1
        self.board.occupy(block_mask(first_gpu, gpus), start, end)
        for t in range(start, end):
            self.free[t] -= gpus

    def _run(self, gpus: int, steps: int, not_before: int) -> tuple[int, int, int]:
        probe = BatchJob(id="", kind=JobKind.TRAINING, priority=1.0, gpus=gpus, duration_steps=steps)
        run = self.board.earliest_run(probe, not_before)
        return (self.horizon, self.horizon, 0) if run is None else run


def _free_counts(instance: Instance, pool: Pool) -> list[int]:
    """The GPUs of ``pool`` at each step that no running job, down window or service of it holds."""
    mask = pool.mask
    busy = zip(instance.down_masks, instance.running_masks, strict=True)
    counts = [pool.gpus - ((d | r) & mask).bit_count() for d, r in busy]
    for rt in instance.realtime_jobs:
        if instance.realtime_pool(rt) is pool:
            counts = [c - d for c, d in zip(counts, rt.demand, strict=True)]
    return counts


def _moves(
    instance: Instance, assignment: Assignment, plans: Mapping[str, tuple[Allocation, float]]
) -> list[tuple[BatchJob, str]]:
    """Moves worth trying, most first, each job to the other of its pools where it runs
    fastest: jobs left out (the most valuable first), then jobs started late in their pool
    (by value x delay), then jobs on a pool where others start late (by the pool's delays:
    moving one makes room for them)."""
    placed: dict[str, int] = {}
    for allocation, _ in plans.values():
        placed.update((job_id, p.start_step) for job_id, p in allocation.batch.items())
    horizon = instance.horizon_steps
    delay = {job.id: placed.get(job.id, horizon) - job.release_step for job in instance.queued_jobs}
    pressure = dict.fromkeys(plans, 0.0)
    for job in instance.queued_jobs:
        pressure[assignment[job.id]] += job.priority * job.gpus * max(0, delay[job.id])
    ranked = []
    for job in instance.queued_jobs:
        others = [p for p in instance.allowed_pools(job) if p.name != assignment[job.id]]
        own = job.priority * job.gpus * max(0, delay[job.id])
        if not others or not (own or pressure[assignment[job.id]]):
            continue
        target = min(others, key=lambda p: (_steps(job, p), p.first_gpu))
        rank = (job.id in placed, not own, -(own or pressure[assignment[job.id]]), job.order)
        ranked.append((rank, job, target.name))
    ranked.sort(key=lambda entry: entry[0])
    return [(job, target) for _, job, target in ranked]
