"""Which delayed jobs the promotions try first: the ones a promotion is expected to gain most
from, net of the planned jobs it displaces and of what the services must lose."""

from __future__ import annotations

from functools import cached_property
from itertools import accumulate, islice
from typing import NamedTuple

from contract.scenario import BatchJob, Instance, iter_gpus
from scheduler.board import Board
from scheduler.fast.batch import MAX_BLOCK_CANDIDATES
from scheduler.fast.candidate import _start_or_horizon, _value_lost
from scheduler.fast.need import _served_all, _unserved_cost
from scheduler.fast.promote import PROMISE_OFFSETS
from scheduler.metrics import realtime_objective
from scheduler.model import Allocation

# A queue of at most this many jobs ranks its promotions by their gain net of what the
# services must lose at least (docs/benchmarks.md, "The wide held-out split").
NET_GAIN_JOBS = 6


def most_delayed(instance: Instance, allocation: Allocation) -> list[BatchJob]:
    """Queued jobs that start later than the fixed load (down GPUs, running jobs) allows, the
    one whose delay costs the most value first."""
    delayed = [
        (-_value_lost(instance, job, run[0], start), job.order, job)
        for job, run, start in _delays(instance, allocation)
    ]
    return [job for *_, job in sorted(delayed, key=lambda d: (d[0], d[1]))]


def most_gain(
    instance: Instance,
    allocation: Allocation,
    loss: ServicesLoss | None = None,
    *,
    rt_objective: float | None = None,
) -> list[BatchJob]:
    """The jobs of :func:`most_delayed`, the one a promotion to its earliest start is expected
    to gain the most first: its own delay's cost saved, less the delay of the planned jobs
    whose cells it would take, each pushed to start when it ends (on the block of the earliest
    run where that is least, of the first :data:`MAX_BLOCK_CANDIDATES`).

    A job the services cannot make room for at less than that gain (what they must lose at
    least with its block taken, :class:`ServicesLoss`, beyond what they lose in
    ``allocation``, whose services' objective is ``rt_objective``) is ranked by the best of the later
    starts the promotions try (:data:`PROMISE_OFFSETS`), where it may pay, and after every
    other job where none does: its promotion would be tried and refuted first, and at 2 ms
    that spends the budget of the jobs after it. ``loss`` and ``rt_objective`` are computed
    here unless given (the fast mode builds ``loss`` once a plan)."""
    ranked = expected_gains(instance, allocation, loss, rt_objective=rt_objective)
    return [expected.job for expected in ranked]


def expected_gains(
    instance: Instance,
    allocation: Allocation,
    loss: ServicesLoss | None = None,
    *,
    rt_objective: float | None = None,
) -> list[ExpectedGain]:
    """:func:`most_gain`'s ranking with each job's expected gain, the largest first."""
    horizon = instance.horizon_steps
    worth = list(accumulate(instance.weights, initial=0.0))  # worth[t]: the weights before t
    jobs = instance.jobs_by_id

    def run_value(job: BatchJob, start: int) -> float:
        if start >= horizon:
            return 0.0
        return job.priority * job.gpus * (worth[job.end_step(start, horizon)] - worth[start])

    # Per planned job: its id, start, end, first GPU, GPUs, duration and value per weight.
    planned = []
    for job_id, placed in allocation.batch.items():
        other = jobs[job_id]
        assert isinstance(other, BatchJob)
        begin = placed.start_step
        planned.append(
            (
                job_id,
                begin,
                other.end_step(begin, horizon),
                placed.first_gpu,
                other.gpus,
                other.duration_steps,
                other.priority * other.gpus,
            )
        )
    ranked = []
    if loss is None and instance.realtime_jobs:
        loss = ServicesLoss(instance)
    lost_now: float | None = None  # what the services lose in ``allocation``, when first needed
    net = len(instance.queued_jobs) <= NET_GAIN_JOBS

    def services_lose(gpus: int, begin: int, end: int) -> float:
        """What the services must lose at least beyond what they lose now."""
        nonlocal lost_now
        assert loss is not None
        least = loss(gpus, begin, end)
        if least <= 0:
            return 0.0
        if lost_now is None:
            served = rt_objective
            if served is None:
                served = realtime_objective(instance, allocation.realtime)
            lost_now = loss.served_all - served
        return max(0.0, least - lost_now)

    for job, (earliest, end, starts), start in _delays(instance, allocation):
        size = job.gpus
        displaced: dict[int, float] = {}  # per aligned block of ``size`` GPUs
        for job_id, begin, finish, first, gpus, duration, rate in planned:
            if begin >= end or finish <= earliest or job_id == job.id:
                continue
            # Its value lost, pushed to start at ``end`` (nothing from the horizon on).
            lost = rate * (worth[finish] - worth[begin])
            if end < horizon:
                lost -= rate * (worth[min(end + duration, horizon)] - worth[end])
            for block in range(first - first % size, first + gpus, size):
                displaced[block] = displaced.get(block, 0.0) + lost
        least = (
            min(displaced.get(a, 0.0) for a in islice(iter_gpus(starts), MAX_BLOCK_CANDIDATES))
            if displaced
            else 0.0
        )
        kept = run_value(job, start) + least  # what the promotion gives up
        gain = run_value(job, earliest) - kept
        hopeless = False
        at_earliest = services_lose(size, earliest, end) if loss is not None else 0.0
        ranked_by = gain
        if loss is not None and (net or gain <= at_earliest):
            # The best of the starts the promotions try, net of what the services must lose
            # there: where they cannot make room at its earliest start for less than it gains
            # there, or on a small queue.
            later_net = 0.0
            for offset in PROMISE_OFFSETS[1:]:
                if (later := earliest + offset) >= start:
                    break
                later_gain = run_value(job, later) - kept
                later_net = max(
                    later_net, later_gain - services_lose(size, later, job.end_step(later, horizon))
                )
            if gain > at_earliest:
                ranked_by = max(gain - at_earliest, later_net)
            elif later_net > 0:
                gain = ranked_by = later_net
            else:
                gain = ranked_by = later_net - at_earliest
                hopeless = True
        ranked.append((hopeless, -ranked_by, job.order, ExpectedGain(gain, job)))
    return [expected for *_, expected in sorted(ranked, key=lambda r: r[:3])]


class ExpectedGain(NamedTuple):
    """A delayed job and what its promotion is expected to gain (:func:`expected_gains`)."""

    gain: float
    job: BatchJob


class ServicesLoss:
    """What the services must lose at least when a block of ``gpus`` GPUs is taken over steps
    ``[begin, end)``: per step, their summed demand beyond the GPUs that the fixed load and the
    block leave, at the cheapest service's cost (the figure :func:`_may_pay` filters trades
    by). A lookup into prefix sums, one per block size asked for, each built when first asked
    for; the mirror image's are the same."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.sums: dict[int, list[float]] = {}

    @cached_property
    def served_all(self) -> float:
        """The services' objective with all their demand served."""
        return _served_all(self.instance)

    @cached_property
    def _beyond(self) -> list[int]:
        """Per step, the demand beyond the GPUs the fixed load leaves (negative: room to spare)."""
        instance = self.instance
        return [
            want - instance.gpus + (down | running).bit_count()
            for want, down, running in zip(
                instance.realtime_demand, instance.down_masks, instance.running_masks, strict=True
            )
        ]

    def __call__(self, gpus: int, begin: int, end: int) -> float:
        if (excess := self.sums.get(gpus)) is None:
            instance = self.instance
            cheapest = _unserved_cost(instance)
            excess = self.sums[gpus] = list(
                accumulate(
                    (
                        cheapest * w * (b + gpus) if b + gpus > 0 else 0.0
                        for w, b in zip(instance.weights, self._beyond, strict=True)
                    ),
                    initial=0.0,
                )
            )
        return excess[end] - excess[begin]


def _delays(instance: Instance, allocation: Allocation) -> list[tuple[BatchJob, tuple[int, int, int], int]]:
    """Per queued job that starts later than the fixed load allows: the job, its earliest run
    on the fixed load (:meth:`Board.earliest_run`) and its start (the horizon when unplaced)."""
    fixed = Board(instance)
    delayed = []
    for job in instance.queued_jobs:
        run = fixed.earliest_run(job, job.release_step)
        if run is None:
            continue
        start = _start_or_horizon(instance, allocation, job)
        if start > run[0]:
            delayed.append((job, run, start))
    return delayed


def _by_priority(instance: Instance, allocation: Allocation) -> list[BatchJob]:
    """Queued jobs that start after their release (or not at all), highest priority first."""
    horizon = instance.horizon_steps
    return [
        job
        for job in sorted(instance.queued_jobs, key=lambda j: (-j.priority, j.order))
        if ((p := allocation.batch.get(job.id)) is None and job.release_step < horizon)
        or (p is not None and p.start_step > job.release_step)
    ]
