"""The contract's formal model in CP-SAT, over the whole grid or over one window of it.

A :class:`Window` frees a block of GPUs over a span of start steps and fixes the rest of
a current plan: the queued batch jobs that start in the span on those GPUs (or are not
placed yet) may start anywhere in the span, and the real-time holdings on those GPUs
are re-planned over the whole horizon; everything else stays where the current plan
has it. The full mode's model is the window that covers
the whole grid; the plan cycle's large-neighbourhood search solves small windows.

Variables (binary unless said):

- ``place(job=j, block=a, start=s)``: free batch job ``j`` runs on GPUs ``[a, a + gpus_j)``
  from step ``s`` (only aligned blocks in the window's GPUs and starts in its span whose
  cells are free of everything fixed are created; a run may reach past the span);
- ``hold(rt=k, gpu=g, step=t)``: real-time job ``k`` holds GPU ``g`` (of the window's block) at step ``t``;
- ``change(rt=k, gpu=g, step=t)``: ``g`` entered or left ``k``'s set at ``t``;
- ``served(rt=k, step=t)``: integer, ``min(|A_k(t)|, demand_k(t))``.

Objective: the contract's ``value - penalty``, then, as a tie-break strictly below any
difference of value, the fewest real-time moves (``change`` variables set): the scaled
value is weighted by one more than the number of ``change`` variables. Serving one demanded GPU-step of ``k``
gains ``priority_k * w(t)`` and avoids ``rt_penalty * priority_k * w(t)``, so
``objective = sum(place * batch value) + sum((1 + rt_penalty) * p * w * served) + constant``
(the constant: what is fixed, and the penalty if nothing in the window were served).
CP-SAT needs integer weights: each is scaled and rounded *up*, so the solver's bound,
scaled back, is still a valid upper bound on the true objective.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from contract.scenario import BatchJob, Instance, RealtimeJob, block_mask
from scheduler.lending import ModelFrame, bucket_of, frames
from scheduler.model import Allocation, Placement, batch_masks

# Objective weights are multiplied by this before rounding up to integers.
OBJECTIVE_SCALE = 1000


class BuildTimeoutError(Exception):
    """Building the model would pass its deadline."""


@dataclass(frozen=True, slots=True)
class Window:
    """GPUs ``[first_gpu, end_gpu)``; batch starts in ``[start_step, end_step)``."""

    first_gpu: int
    end_gpu: int
    start_step: int
    end_step: int

    @classmethod
    def whole(cls, instance: Instance) -> Window:
        return cls(0, instance.gpus, 0, instance.horizon_steps)

    @property
    def gpu_mask(self) -> int:
        return block_mask(self.first_gpu, self.end_gpu - self.first_gpu)

    def frees(self, placement: Placement | None) -> bool:
        """Whether a queued job placed at ``placement`` (None: not placed) is free to move."""
        return placement is None or (
            self.start_step <= placement.start_step < self.end_step
            and self.first_gpu <= placement.first_gpu < self.end_gpu
        )


@dataclass(frozen=True, slots=True)
class _Option:
    job: BatchJob
    first_gpu: int
    start: int
    end: int


@dataclass
class Variables:
    """The model's decision variables, keyed by meaning, and what they were built around."""

    window: Window
    current: Allocation
    moving_realtime: frozenset[str]  # services whose holdings on the window's GPUs are variables
    free_jobs: frozenset[str] = frozenset()  # queued jobs the model places (the rest stay as they are)
    place: dict[tuple[str, int, int], Any] = field(default_factory=dict)  # (job, block, start)
    options: dict[tuple[str, int, int], _Option] = field(default_factory=dict)
    hold: dict[tuple[str, int, int], Any] = field(default_factory=dict)  # (rt job, gpu, step)
    change: dict[tuple[str, int, int], Any] = field(default_factory=dict)  # (rt job, gpu, step)
    served: dict[tuple[str, int], Any] = field(default_factory=dict)  # (rt job, step)
    #: The scaled value's weight in the solver's objective: above the number of ``change``
    #: variables, so one scaled unit of value outweighs every real-time move (the tie-break).
    value_weight: int = 1

    def value_bound(self, solver_bound: float) -> float:
        """An upper bound on the scaled value from the solver's bound on its objective,
        ``value_weight * value - moves``, with ``0 <= moves <= len(change)``."""
        return (solver_bound + len(self.change)) / self.value_weight

    @property
    def count(self) -> int:
        return len(self.place) + len(self.hold) + len(self.change) + len(self.served)


@dataclass(frozen=True, slots=True)
class _Frame:
    """What a window leaves free and what it fixes, read from the instance and the current plan."""

    free_jobs: list[BatchJob]  # queued jobs the model places
    fixed_batch: dict[str, Placement]  # queued jobs that stay where the current plan has them
    blocked: list[int]  # per step: cells no variable may take (down, running, fixed batch)
    moving: list[RealtimeJob]  # services whose holdings on the window's GPUs are variables
    occupied: list[int]  # per step: ``blocked`` and the real-time cells that stay


def build_model(
    model: Any,
    instance: Instance,
    window: Window,
    current: Allocation,
    *,
    deadline: float | None = None,
    pull: Collection[str] = (),
) -> tuple[Variables, float]:
    """Variables, one block per constraint, objective; returns the objective's constant part.

    ``pull`` names placed queued jobs outside the window that may move into it (or stay
    where they are): a delayed job can then take idle cells of the window's block.

    Raises :class:`BuildTimeoutError` as soon as ``deadline`` (a ``time.perf_counter()``
    value) passes, so that a caller with a time limit never waits for a model it cannot solve.
    """
    on_time = _deadline_check(deadline)
    frame = _frame(instance, window, current, pull)
    v = Variables(
        window=window,
        current=current,
        moving_realtime=frozenset(rt.id for rt in frame.moving),
        free_jobs=frozenset(job.id for job in frame.free_jobs),
    )
    _add_variables(model, v, instance, frame, pull=pull, on_time=on_time)
    _one_job_per_cell(model, v, on_time)  # constraint 1
    _one_run_per_job(model, v)  # constraints 2, 3, 5
    _swap_cap(model, v, instance, frame, on_time)  # constraint 4
    if instance.teams:
        _lend_within_quotas(model, v, instance, frame, on_time)  # constraint 7
    constant = _objective(model, v, instance, frame, on_time)
    return v, constant


def _frame(instance: Instance, window: Window, current: Allocation, pull: Collection[str]) -> _Frame:
    in_range = window.gpu_mask
    free_jobs = [
        job for job in instance.queued_jobs if job.id in pull or window.frees(current.batch.get(job.id))
    ]
    free_ids = {job.id for job in free_jobs}
    fixed_batch = {job_id: p for job_id, p in current.batch.items() if job_id not in free_ids}
    # Cells nothing in the window may take: down, running, fixed batch jobs, and real-time
    # holdings outside the window (inside it, every real-time cell is a variable).
    blocked = batch_masks(instance, fixed_batch)
    # Services that may move: those holding some GPU of the window's block, and those short
    # of demand somewhere (they may want to come in); the others stay as they are.
    moving = [
        rt
        for rt in instance.realtime_jobs
        if any(
            mask & in_range or mask.bit_count() < need
            for mask, need in zip(current.realtime[rt.id], rt.demand, strict=True)
        )
    ]
    moving_ids = {rt.id for rt in moving}
    # Real-time holdings on the window's GPUs are re-planned over the whole horizon: a
    # service can then leave a block for good, and batch runs reaching past the window's
    # steps find their cells freed.
    fixed_rt = [0] * instance.horizon_steps  # real-time cells that stay as they are
    for rt_id, held in current.realtime.items():
        for t, mask in enumerate(held):
            fixed_rt[t] |= mask & ~in_range if rt_id in moving_ids else mask
    occupied = [b | f for b, f in zip(blocked, fixed_rt, strict=True)]
    return _Frame(free_jobs, fixed_batch, blocked, moving, occupied)


def _add_variables(
    model: Any,
    v: Variables,
    instance: Instance,
    frame: _Frame,
    *,
    pull: Collection[str],
    on_time: Callable[[], None],
) -> None:
    """``place`` for each free job's aligned blocks and starts free of everything fixed;
    ``hold`` and ``served`` for each moving service over the whole horizon."""
    horizon, window = instance.horizon_steps, v.window
    w0, w1, g0, g1 = window.start_step, window.end_step, window.first_gpu, window.end_gpu
    for job in frame.free_jobs:
        on_time()
        # The pool choice: each allowed pool's aligned blocks inside the window, with its steps.
        pools = [(pool, instance.run_steps(job, pool.first_gpu)) for pool in instance.allowed_pools(job)]
        for start in range(max(job.release_step, w0), w1):
            for pool, steps in pools:
                end = min(start + steps, horizon)
                taken = 0
                for t in range(start, end):
                    taken |= frame.occupied[t]
                # aligned blocks (from the pool's first GPU) inside the window's GPUs and the pool
                low, high = max(g0, pool.first_gpu), min(g1, pool.end_gpu)
                first = pool.first_gpu + -(-(low - pool.first_gpu) // job.gpus) * job.gpus
                for first_gpu in range(first, high - job.gpus + 1, job.gpus):
                    if not taken & block_mask(first_gpu, job.gpus):
                        _add_option(model, v, job, (first_gpu, start), end)
        placed = v.current.batch.get(job.id)
        if job.id in pull and placed is not None:
            # A pulled job may also stay where it is (its own cells, free of everything fixed).
            start = placed.start_step
            _add_option(
                model, v, job, (placed.first_gpu, start), instance.run_end(job, start, placed.first_gpu)
            )
    for rt in frame.moving:
        on_time()
        pool = instance.realtime_pool(rt)  # a service holds GPUs of its own pool only
        for t in range(horizon):
            for g in range(max(g0, pool.first_gpu), min(g1, pool.end_gpu)):
                if not frame.blocked[t] >> g & 1:
                    v.hold[rt.id, g, t] = model.new_bool_var(f"hold(rt={rt.id}, gpu={g}, step={t})")
            v.served[rt.id, t] = model.new_int_var(0, rt.demand[t], f"served(rt={rt.id}, step={t})")


def _one_job_per_cell(model: Any, v: Variables, on_time: Callable[[], None]) -> None:
    """Constraint 1: one job per GPU per step, none on a down GPU (down cells, running jobs'
    cells and fixed cells have no variables at all)."""
    covering: dict[tuple[int, int], list[Any]] = {}
    for key, option in v.options.items():
        on_time()
        for g in range(option.first_gpu, option.first_gpu + option.job.gpus):
            for t in range(option.start, option.end):
                covering.setdefault((g, t), []).append(v.place[key])
    on_time()
    for (_, g, t), var in v.hold.items():
        covering.setdefault((g, t), []).append(var)
    for cell_vars in covering.values():
        if len(cell_vars) > 1:
            on_time()
            model.add_at_most_one(cell_vars)


def _one_run_per_job(model: Any, v: Variables) -> None:
    """Constraints 2, 3, 5: a batch job runs at most once, on one aligned block, without a
    break from its start (one ``place`` variable stands for the whole run)."""
    by_job: dict[str, list[Any]] = {}
    for (job_id, _, _), var in v.place.items():
        by_job.setdefault(job_id, []).append(var)
    for job_vars in by_job.values():
        model.add_at_most_one(job_vars)


def _swap_cap(
    model: Any, v: Variables, instance: Instance, frame: _Frame, on_time: Callable[[], None]
) -> None:
    """Constraint 4: the real-time swap cap; served GPU-steps are held ones, up to demand."""
    horizon, in_range = instance.horizon_steps, v.window.gpu_mask
    g0, g1 = v.window.first_gpu, v.window.end_gpu
    for rt in frame.moving:
        on_time()
        running = instance.running_realtime.get(rt.id)
        # held[t + 1] is the current plan's A(t); held[0] the running set before step 0
        held = (running.mask if running else 0, *v.current.realtime[rt.id])
        for t in range(horizon):
            held_vars = [v.hold[rt.id, g, t] for g in range(g0, g1) if (rt.id, g, t) in v.hold]
            outside = (held[t + 1] & ~in_range).bit_count()
            model.add(v.served[rt.id, t] <= sum(held_vars) + outside)
        for t in range(0 if running else 1, horizon):
            on_time()
            # GPUs outside the window's block are fixed on both sides of the step.
            changes: list[Any] = [((held[t + 1] ^ held[t]) & ~in_range).bit_count()]
            for g in range(g0, g1):
                now = v.hold.get((rt.id, g, t), 0)
                before = v.hold.get((rt.id, g, t - 1), 0 if t - 1 >= 0 else held[t] >> g & 1)
                if isinstance(now, int) and isinstance(before, int):
                    changes.append(abs(now - before))
                    continue
                change = model.new_bool_var(f"change(rt={rt.id}, gpu={g}, step={t})")
                model.add(change >= now - before)
                model.add(change >= before - now)
                v.change[rt.id, g, t] = change
                changes.append(change)
            model.add(sum(changes) <= rt.swap_cap)


def _objective(
    model: Any, v: Variables, instance: Instance, frame: _Frame, on_time: Callable[[], None]
) -> float:
    """The contract's objective over the variables; returns its constant part (what stays
    fixed, and the penalty if nothing in the window were served)."""
    horizon, weights, jobs = instance.horizon_steps, instance.weights, instance.jobs_by_id
    rate = instance.output_rate  # a GPU-step's worth on its pool (1 on a cluster of one pool)
    share = instance.share_factor  # and its team's fair-share factor (1 without teams)
    terms: list[Any] = []
    coefficients: list[int] = []
    for key, option in v.options.items():
        job = option.job
        terms.append(v.place[key])
        # A promise: placing the job here saves what leaving it out costs, less its delay's cost.
        promise = instance.promise_cost(job, None) - instance.promise_cost(job, option.start)
        coefficients.append(
            scaled(
                job.priority
                * job.gpus
                * rate(job, option.first_gpu)
                * sum(weights[option.start : option.end])
                * share(job)
                + promise
            )
        )
    constant = 0.0
    for job in instance.queued_jobs:
        placed = frame.fixed_batch.get(job.id)
        constant -= instance.promise_cost(job, None if placed is None else placed.start_step)
    for running_job in instance.running_batch.values():
        steps = min(running_job.remaining_steps, horizon)
        running_batch = jobs[running_job.job_id]
        assert isinstance(running_batch, BatchJob)
        worth = running_batch.priority * rate(running_batch, running_job.first_gpu) * share(running_batch)
        constant += worth * running_job.gpus * sum(weights[:steps])
    for job_id, placement in frame.fixed_batch.items():
        fixed = jobs[job_id]
        assert isinstance(fixed, BatchJob)
        end = instance.run_end(fixed, placement.start_step, placement.first_gpu)
        worth = fixed.priority * rate(fixed, placement.first_gpu) * share(fixed)
        constant += worth * fixed.gpus * sum(weights[placement.start_step : end])
    for rt in instance.realtime_jobs:
        for t in range(horizon):
            weight = rt.priority * weights[t]
            if rt.id in v.moving_realtime:
                terms.append(v.served[rt.id, t])
                coefficients.append(scaled((1 + instance.rt_penalty) * weight))
                constant -= instance.rt_penalty * weight * rt.demand[t]
            else:
                served = min(v.current.realtime[rt.id][t].bit_count(), rt.demand[t])
                constant += weight * (served - instance.rt_penalty * (rt.demand[t] - served))
    # Tie-break: fewer real-time moves at equal value.
    v.value_weight = len(v.change) + 1
    coefficients = [c * v.value_weight for c in coefficients]
    terms += v.change.values()
    coefficients += [-1] * len(v.change)
    on_time()
    _maximize(model, terms, coefficients)
    return constant


def _lend_within_quotas(
    model: Any, v: Variables, instance: Instance, frame: _Frame, on_time: Callable[[], None]
) -> None:
    """Constraint 7 (scheduler/lending.py's counts): on each GPU model with quotas, at each step,
    what queued work holds beyond its teams' caps (each run to its P90 end) is at most what the
    quotas' owners do not need then, with the model's unowned GPUs. A team's runs are summed,
    not joined per GPU as the checker does, so the model is at least as strict as the checker."""
    horizon = instance.horizon_steps
    options: dict[str, list[tuple[_Option, Any]]] = {}
    for key, option in v.options.items():
        options.setdefault(option.job.id, []).append((option, v.place[key]))
    started = {
        job_id: _cumulative(model, f"started(job={job_id}", [(o.start, x) for o, x in chosen], horizon)
        for job_id, chosen in options.items()
    }
    for lent in frames(instance):
        on_time()
        fixed = {bucket: [0] * horizon for bucket in lent.quota}  # GPUs of fixed work's P90 runs
        for job_id, placed in frame.fixed_batch.items():
            job = instance.jobs_by_id[job_id]
            assert isinstance(job, BatchJob)
            if lent.mask >> placed.first_gpu & 1:
                for t in range(placed.start_step, instance.p90_end(job, placed.start_step, placed.first_gpu)):
                    fixed[bucket_of(job.team)][t] += job.gpus
        # bucket -> per step, (GPUs, 0/1 expression: the job's P90 run covers the step) of free jobs
        holding: dict[str, list[list[tuple[int, Any]]]] = {
            b: [[] for _ in range(horizon)] for b in lent.quota
        }
        for job_id, chosen in options.items():
            here = [(o, x) for o, x in chosen if lent.mask >> o.first_gpu & 1]
            if not here:
                continue
            job = here[0][0].job
            name = f"(job={job_id}, model={lent.model}"
            begun = _cumulative(model, f"begun{name}", [(o.start, x) for o, x in here], horizon)
            ended = [
                (instance.p90_end(job, o.start, o.first_gpu), x)
                for o, x in here
                if instance.p90_end(job, o.start, o.first_gpu) < horizon
            ]
            over = _cumulative(model, f"p90_over{name}", ended, horizon)
            for t in range(horizon):
                if not isinstance(begun[t], int):
                    holding[bucket_of(job.team)][t].append((job.gpus, begun[t] - over[t]))
        for t in range(horizon):
            on_time()
            _lend_at(model, frame, lent, t, fixed=fixed, holding=holding, started=started)


def _lend_at(
    model: Any,
    frame: _Frame,
    lent: ModelFrame,
    t: int,
    *,
    fixed: dict[str, list[int]],
    holding: dict[str, list[list[tuple[int, Any]]]],
    started: dict[str, list[Any]],
) -> None:
    """Constraint 7 at step ``t`` of one model: sum(B) <= L (scheduler/lending.py)."""
    borrowed: list[Any] = []
    needed: list[Any] = []
    for bucket, quota in lent.quota.items():
        const = lent.running[bucket][t].bit_count() + lent.demand[bucket][t] + fixed[bucket][t]
        terms = holding[bucket][t]
        most = const + sum(gpus for gpus, _ in terms)
        held = sum(gpus * covers for gpus, covers in terms)
        if terms:
            over = model.new_int_var(
                0, max(0, most - lent.cap(bucket, t)), f"borrowed(team={bucket}, step={t})"
            )
            model.add(over >= const + held - lent.cap(bucket, t))
            borrowed.append(over)
        waiting, starts = 0, list[tuple[int, Any]]()
        for job in lent.eligible[bucket]:
            if job.release_step > t:
                continue
            fixed_at = frame.fixed_batch.get(job.id)
            if fixed_at is not None:
                waiting += job.gpus * (fixed_at.start_step > t)
                continue
            waiting += job.gpus
            begun = started.get(job.id)
            if begun is not None and not isinstance(begun[t], int):
                starts.append((job.gpus, begun[t]))
        claim = const + waiting + lent.forecast[bucket][t]
        if not terms and not starts:
            needed.append(min(quota, claim))
            continue
        low, high = claim - sum(g for g, _ in starts), most + waiting + lent.forecast[bucket][t]
        total = model.new_int_var(low, high, f"claim(team={bucket}, step={t})")
        model.add(total == claim + held - sum(g * var for g, var in starts))
        need = model.new_int_var(min(0, low), quota, f"need(team={bucket}, step={t})")
        model.add_min_equality(need, [total, quota])
        needed.append(need)
    if not borrowed:
        return  # nothing free holds beyond a cap at this step: the fixed plan decides
    base = lent.lendable_base(t)
    if all(isinstance(n, int) for n in needed):
        model.add(sum(borrowed) <= max(0, base - sum(needed)))
        return
    spare = model.new_int_var(base - sum(lent.quota.values()), base, f"spare(model={lent.model}, step={t})")
    model.add(spare == base - sum(needed))
    lendable = model.new_int_var(0, max(0, base), f"lendable(model={lent.model}, step={t})")
    model.add_max_equality(lendable, [spare, 0])
    model.add(sum(borrowed) <= lendable)


def _cumulative(model: Any, name: str, events: list[tuple[int, Any]], horizon: int) -> list[Any]:
    """Per step ``t``, a 0/1 variable that is the sum of the ``events``' variables (step, var) at
    steps ``<= t`` (at most one of them is set: one run per job); 0 before the first event."""
    by_step: dict[int, list[Any]] = {}
    for step, var in events:
        by_step.setdefault(step, []).append(var)
    out: list[Any] = []
    previous: Any = 0
    for t in range(horizon):
        if t in by_step:
            now = model.new_bool_var(f"{name}, step={t})")
            model.add(now == previous + sum(by_step[t]))
            previous = now
        out.append(previous)
    return out


def build_churn_model(
    model: Any, instance: Instance, plan: Allocation, *, deadline: float | None = None
) -> Variables:
    """The services re-planned around ``plan``'s batch work (which stays where it is) for the
    fewest real-time moves, each serving at least what ``plan`` serves at every step, so
    that no plan the model admits scores below ``plan``. The tie-break of the objective, as
    a problem of its own: within the full model's time, CP-SAT spends its search on value.

    Raises :class:`BuildTimeoutError` past ``deadline``, as :func:`build_model` does.
    """
    horizon = instance.horizon_steps
    no_starts = Window(0, instance.gpus, horizon, horizon)
    v, _ = build_model(model, instance, no_starts, plan, deadline=deadline)
    demand = {rt.id: rt.demand for rt in instance.realtime_jobs}
    for (rt_id, t), served in v.served.items():
        model.add(served >= min(plan.realtime[rt_id][t].bit_count(), demand[rt_id][t]))
    model.clear_objective()
    model.minimize(sum(v.change.values()))
    return v


def _add_option(model: Any, v: Variables, job: BatchJob, block: tuple[int, int], end: int) -> None:
    """A ``place`` variable for ``job`` on ``block`` (first GPU, start step) until ``end``, once."""
    first_gpu, start = block
    key = (job.id, first_gpu, start)
    if key not in v.place:
        v.place[key] = model.new_bool_var(f"place(job={job.id}, block={first_gpu}, start={start})")
        v.options[key] = _Option(job, first_gpu, start, end)


def _maximize(model: Any, terms: list[Any], coefficients: list[int]) -> None:
    """Maximise ``sum(c * x)``, written into the model's proto in one go.

    ``CpModel.maximize`` appends the terms one by one in Python (2.5 s for 200,000 terms
    with ortools 9.15), which no time limit could interrupt. CP-SAT minimises; a
    maximisation is the negated objective with scaling factor -1, as ``maximize`` writes it.
    """
    model.clear_objective()
    objective = model.proto.objective
    objective.vars.extend(var.index for var in terms)
    objective.coeffs.extend(-c for c in coefficients)
    objective.scaling_factor = -1.0


def _deadline_check(deadline: float | None) -> Callable[[], None]:
    """A check to call often while building: raises :class:`BuildTimeoutError` past ``deadline``."""

    def on_time() -> None:
        if deadline is not None and time.perf_counter() > deadline:
            raise BuildTimeoutError

    return on_time


def scaled(weight: float) -> int:
    """Integer objective weight, rounded up so that the scaled-back bound stays an upper bound."""
    return math.ceil(weight * OBJECTIVE_SCALE - 1e-9)


def hint(
    model: Any, v: Variables, instance: Instance, plan: Allocation, deadline: float | None = None
) -> None:
    """Every variable hinted with its value in ``plan`` (a complete, feasible hint); raises
    :class:`BuildTimeoutError` past ``deadline``."""
    on_time = _deadline_check(deadline)
    for key, var in v.place.items():
        placement = plan.batch.get(key[0])
        model.add_hint(var, placement is not None and (placement.first_gpu, placement.start_step) == key[1:])
    on_time()
    for (rt_id, g, t), var in v.hold.items():
        model.add_hint(var, bool(plan.realtime[rt_id][t] >> g & 1))
    on_time()
    running = instance.running_realtime
    for (rt_id, g, t), var in v.change.items():
        before = plan.realtime[rt_id][t - 1] if t > 0 else running[rt_id].mask
        model.add_hint(var, bool((plan.realtime[rt_id][t] ^ before) >> g & 1))
    on_time()
    demand = {rt.id: rt.demand for rt in instance.realtime_jobs}
    for (rt_id, t), var in v.served.items():
        model.add_hint(var, min(plan.realtime[rt_id][t].bit_count(), demand[rt_id][t]))


def read_allocation(v: Variables, instance: Instance, solver: Any) -> Allocation:
    """The solver's plan: its choices in the window, the current plan everywhere else."""
    batch = {job_id: placement for job_id, placement in v.current.batch.items() if job_id not in v.free_jobs}
    batch.update(
        (key[0], Placement(start_step=v.options[key].start, first_gpu=v.options[key].first_gpu))
        for key, var in v.place.items()
        if solver.boolean_value(var)
    )
    window = v.window
    realtime = {}
    for rt in instance.realtime_jobs:
        masks = list(v.current.realtime[rt.id])
        if rt.id not in v.moving_realtime:
            realtime[rt.id] = tuple(masks)
            continue
        for t in range(instance.horizon_steps):
            mask = masks[t] & ~window.gpu_mask
            for g in range(window.first_gpu, window.end_gpu):
                var = v.hold.get((rt.id, g, t))
                if var is not None and solver.boolean_value(var):
                    mask |= 1 << g
            masks[t] = mask
        realtime[rt.id] = tuple(masks)
    return Allocation(batch=batch, realtime=realtime)
