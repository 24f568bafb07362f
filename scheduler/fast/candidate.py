"""A fast-mode plan under construction (:class:`_Candidate`), built or re-built around promised
blocks: real-time first (:mod:`.realtime`), then batch packed in an order (:mod:`.batch`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from contract.scenario import BatchJob, Instance, RealtimeJob
from scheduler.board import BlockedSchedule, Board
from scheduler.fast.batch import batch_value, place_batch
from scheduler.fast.realtime import place_realtime
from scheduler.metrics import realtime_objective
from scheduler.model import Allocation, Placement, placement_masks

EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class _Candidate:
    objective: float
    allocation: Allocation
    order: Sequence[BatchJob]  # the batch order that produced it
    rt_objective: float  # the real-time holdings' share of the objective (a re-pack keeps it)
    rt_shortfall: int  # demanded real-time GPU-steps left unserved
    committed: Mapping[str, Placement]  # promised placements it was built around
    busy_before_batch: tuple[int, ...]  # per step: down, running, promised and real-time GPUs
    # Promises (job, start, first GPU, planned jobs held in place) tried from this plan that did
    # not improve it (True: the services could not make room, or it traded at a loss; another
    # block or a later start may do better).
    refuted: dict[tuple[str, int, int, bool], bool] = field(default_factory=dict, compare=False)


def objective(instance: Instance, allocation: Allocation) -> float:
    """The contract's objective of ``allocation`` up to a constant (running jobs' value is
    left out), without building the grid: for comparing plans of one instance."""
    return realtime_objective(instance, allocation.realtime) + batch_value(instance, allocation.batch)


def _with_batch(
    instance: Instance,
    candidate: _Candidate,
    value: float,
    placements: dict[str, Placement],
    order: Sequence[BatchJob],
) -> _Candidate:
    """``candidate`` with the batch packing ``placements`` (of batch value ``value``), if it is better."""
    if candidate.rt_objective + value <= candidate.objective + EPSILON:
        return candidate
    return replace(
        candidate,
        objective=candidate.rt_objective + value,
        allocation=Allocation(batch=placements, realtime=candidate.allocation.realtime),
        order=order,
        refuted={},
    )


Targets = Callable[[Instance, "_Candidate"], list[BatchJob]]


def _value_lost(instance: Instance, job: BatchJob, earliest: int, start: int) -> float:
    """What starting ``job`` at ``start`` instead of ``earliest`` costs (its whole run's value
    at the earlier start minus at the later one, cut at the horizon)."""
    return _run_value(instance, job, earliest) - _run_value(instance, job, start)


def _run_value(instance: Instance, job: BatchJob, start: int) -> float:
    """``job``'s run from ``start`` on, cut at the horizon (0 from the horizon on)."""
    horizon = instance.horizon_steps
    if start >= horizon:
        return 0.0
    return job.priority * job.gpus * sum(instance.weights[start : job.end_step(start, horizon)])


def _unpinned(instance: Instance, candidate: _Candidate, pins: Mapping[str, Placement]) -> _Candidate:
    """``candidate``, built with ``pins`` among its promises, with them free to move again in
    later searches (its plan keeps them where they are)."""
    pinned = placement_masks(instance, pins)
    return replace(
        candidate,
        committed={job_id: p for job_id, p in candidate.committed.items() if job_id not in pins},
        busy_before_batch=tuple(
            busy & ~mask for busy, mask in zip(candidate.busy_before_batch, pinned, strict=True)
        ),
    )


def _start_or_horizon(instance: Instance, allocation: Allocation, job: BatchJob) -> int:
    """``job``'s start in ``allocation``, or the horizon when it is not placed."""
    current = allocation.batch.get(job.id)
    return instance.horizon_steps if current is None else current.start_step


def _in_the_way(
    instance: Instance, allocation: Allocation, committed: Mapping[str, Placement]
) -> tuple[RealtimeJob, ...]:
    """The services that hold GPUs of the ``committed`` blocks in ``allocation``."""
    promised = placement_masks(instance, committed)
    return tuple(
        service
        for service in instance.realtime_jobs
        if any(held & mask for held, mask in zip(allocation.realtime[service.id], promised, strict=True))
    )


def _rebuild(
    instance: Instance,
    candidate: _Candidate,
    committed: Mapping[str, Placement],
    in_the_way: Sequence[RealtimeJob],
) -> _Candidate:
    """``candidate`` around the ``committed`` blocks: the services ``in_the_way`` of them
    re-planned (:func:`place_realtime`), the others keeping their GPUs, and every other batch
    job re-packed in ``candidate``'s order. With every service in the way, this is
    :func:`_build`; with none, a re-pack."""
    if len(in_the_way) == len(instance.realtime_jobs):
        return _build(instance, committed, [candidate.order])
    board = Board(instance)
    promised = placement_masks(instance, committed)
    realtime = dict(candidate.allocation.realtime)
    replanned = {service.id for service in in_the_way}
    kept = [0] * instance.horizon_steps
    for service_id, masks in realtime.items():
        if service_id not in replanned:
            kept = [k | m for k, m in zip(kept, masks, strict=True)]
    board.busy = [b | p | k for b, p, k in zip(board.busy, promised, kept, strict=True)]
    if in_the_way:
        # The kept services' GPUs are as good as down for the re-planned ones: left in time.
        blocked = [d | p | k for d, p, k in zip(instance.down_masks, promised, kept, strict=True)]
        realtime.update(place_realtime(instance, board, BlockedSchedule(blocked), in_the_way))
    value, placements = _pack(instance, board.busy, committed, candidate.order)
    rt_objective = realtime_objective(instance, realtime)
    return _Candidate(
        objective=rt_objective + value,
        allocation=Allocation(batch=placements, realtime=realtime),
        rt_objective=rt_objective,
        order=candidate.order,
        rt_shortfall=_shortfall(instance, realtime),
        committed=committed,
        busy_before_batch=tuple(board.busy),
    )


def _build(
    instance: Instance,
    committed: Mapping[str, Placement],
    orders: Sequence[Sequence[BatchJob]],
    *,
    compact_at_start: bool = False,
) -> _Candidate:
    """Real-time around the committed blocks (with ``compact_at_start``, compaction at step 0
    too: :func:`place_realtime`), then every other batch job greedily, in the best of
    ``orders``."""
    board = Board(instance)
    promised = placement_masks(instance, committed)
    blocked = [down | mask for down, mask in zip(instance.down_masks, promised, strict=True)]
    board.busy = [busy | mask for busy, mask in zip(board.busy, promised, strict=True)]
    realtime = place_realtime(instance, board, BlockedSchedule(blocked), compact_at_start=compact_at_start)
    packed = [(*_pack(instance, board.busy, committed, order), order) for order in orders]
    value, placements, order = max(packed, key=lambda p: p[0])
    rt_objective = realtime_objective(instance, realtime)
    return _Candidate(
        objective=rt_objective + value,
        allocation=Allocation(batch=placements, realtime=realtime),
        rt_objective=rt_objective,
        order=order,
        rt_shortfall=_shortfall(instance, realtime),
        committed=committed,
        busy_before_batch=tuple(board.busy),
    )


def restarts_cost(instance: Instance, allocation: Allocation) -> float:
    """What the GPUs the services swap at step 0 (one given up, another taken in its place)
    cost as replica restarts: each one GPU-step of the service unserved, at the contract's
    price. Step 0 is committed next; a move planned later is decided again an hour on."""
    running = instance.running_realtime
    cost = 0.0
    for job in instance.realtime_jobs:
        if job.id not in running:
            continue
        before, now = running[job.id].mask, allocation.realtime[job.id][0]
        swapped = ((before ^ now).bit_count() - abs(before.bit_count() - now.bit_count())) // 2
        cost += swapped * instance.rt_penalty * job.priority * instance.weights[0]
    return cost


def _shortfall(instance: Instance, realtime: Mapping[str, Sequence[int]]) -> int:
    """Demanded real-time GPU-steps that ``realtime`` leaves unserved."""
    return sum(
        max(0, need - mask.bit_count())
        for job in instance.realtime_jobs
        for need, mask in zip(job.demand, realtime[job.id], strict=True)
    )


def _pack(
    instance: Instance, busy: Sequence[int], committed: Mapping[str, Placement], order: Sequence[BatchJob]
) -> tuple[float, dict[str, Placement]]:
    """Batch value and placements of packing ``order`` greedily on top of ``busy``."""
    trial = Board(instance)
    trial.busy = list(busy)
    placements = {**committed, **place_batch(trial, [j for j in order if j.id not in committed])}
    return batch_value(instance, placements), placements
