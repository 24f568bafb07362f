"""The anytime searches' allowance: estimated work first, the wall clock as a backstop.

A search step is charged its *estimated* cost (microseconds of this repository's
reference machine, from :class:`WorkCosts`), and the searches stop when the next step
would overrun the budget. The same instance and budget therefore give the same plan
on any machine that keeps up with the reference one. The wall clock only cuts in where
the machine is slower (or busier): then the budget in milliseconds still holds, and
the plan may differ from run to run.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from contract.scenario import Instance

# Share of the budget the estimates may plan to spend: the rest covers what the estimates
# leave out (building the grid, checking it) and a machine a little slower than the reference.
WORK_SHARE = 0.75
# Milliseconds the wall-clock deadline keeps back for what follows the searches (the floor
# comparison, turning a mirrored plan back, building the grid); at most half the budget.
FINISH_RESERVE_MS = 0.2
# The most the wall-clock pace may stretch what is kept back for after the searches (a machine
# this many times slower than the estimates, or busier).
MAX_PACE = 4.0
# A node of the small queues' order search against a job's share of a pack: the board's copy
# and the ranking of the children besides the placement (measured on the small queues).
PLACE_FACTOR = 1.5


@dataclass(frozen=True, slots=True)
class WorkCosts:
    """Estimated cost (reference microseconds) of the fast mode's units of work on one instance.

    Fitted on the benchmark shapes and the scaling sweep (8 to 1,024 GPUs): a greedy pack
    costs about ``5.8 + 1.6 log2(gpus / 8)`` us per queued job (wider bitmasks, more candidate
    blocks; refitted on the seven and the wide shapes, 8 to 64 GPUs, once the earliest-run
    search got cheaper); placing real-time costs about ``1.6 + 0.4 log2(gpus / 8)`` us per
    service and step (refitted on the seven, seeds 1-5 of the wide shapes and the scaling
    sweep once the services' deadline checks walked bitmasks: 0.58 of the time before, the
    median of those 42). Finding a delayed job's earlier slots costs about ``10 + 0.75 gpus``
    us, and ranking the delayed jobs by what a promotion is expected to gain about 4 us per
    queued job (measured on the wide shapes, 8 to 64 GPUs). The baselines, settling and the
    check of a promised start are charged what they were measured to cost (:attr:`floors`,
    :attr:`settle`, :attr:`check`). The baselines have cost less since the peak reservations
    stop following a service once it holds its reservation for good (a median 0.78 of their
    time before, docs/allocator.md); the charge is kept, so every work-only plan is the same as
    before, and a wall-clock budget gets the time saved.
    """

    pack: float
    realtime: float
    slots: float = 0.0
    delays: float = 0.0
    jobs: int = 0
    per_job: float = 0.0  # one job's share of a pack

    @property
    def place(self) -> float:
        """One job placed on a board copied for it (a node of the small queues' order search,
        :mod:`scheduler.fast.orders`)."""
        return PLACE_FACTOR * self.per_job

    @classmethod
    def of(cls, instance: Instance) -> WorkCosts:
        per_job = 3.9 + 1.1 * math.log2(max(instance.gpus, 8) / 8)
        per_rt_step = 1.6 + 0.4 * math.log2(max(instance.gpus, 8) / 8)
        return cls(
            pack=4.7 + per_job * len(instance.queued_jobs),
            realtime=5.0 + per_rt_step * len(instance.realtime_jobs) * instance.horizon_steps,
            slots=10.0 + 0.75 * instance.gpus,
            delays=5.0 + 4.0 * len(instance.queued_jobs),
            jobs=len(instance.queued_jobs),
            per_job=per_job,
        )

    @property
    def floors(self) -> float:
        """The three baselines (first-fit packs on peak reservations) and the job orders of
        both orientations."""
        return 2 * self.pack + 0.5 * self.realtime + 6 * self.jobs

    @property
    def settle(self) -> float:
        """Settling the chosen plan's services for the fewest moves (two tries)."""
        return 1.3 * self.realtime

    @property
    def check(self) -> float:
        """Whether a promised start is worth re-planning: the services in its way, the shortfall
        floor, the trade filter."""
        return 2 * self.slots

    @property
    def build(self) -> float:
        """Real-time around some promises, then one pack."""
        return self.realtime + self.pack

    def replan(self, services: int) -> float:
        """Real-time re-planned for ``services`` of the instance's services (the others kept),
        then one pack: :attr:`build` for one service or more (re-placing one of several costs
        about as much as all: the kept GPUs are as good as down for it, measured on the
        seven), a pack alone for none."""
        return (self.realtime if services else 5.0) + self.pack


class Budget:
    """Work units to spend (deterministic) and a wall-clock deadline (the backstop)."""

    def __init__(self, budget_ms: float, started: float | None = None) -> None:
        self.budget_ms = budget_ms
        self.started = time.perf_counter() if started is None else started
        self.deadline = self.started + max(budget_ms / 2, budget_ms - FINISH_RESERVE_MS) / 1000
        self.units = budget_ms * 1000 * WORK_SHARE
        self.spent = 0.0
        self.kept = 0.0  # units reserved for after the searches (charged, not yet run)
        self.refused = 0  # steps it did not afford: more budget could have bought them
        self.finish_s = min(budget_ms / 2, FINISH_RESERVE_MS) / 1000

    @classmethod
    def of_work(cls, budget_ms: float) -> Budget:
        """A budget of estimated work only, with no wall clock: the same plan on any machine
        (for tests and reproducible experiments; a service wants the backstop)."""
        budget = cls(budget_ms)
        budget.deadline = math.inf
        return budget

    @classmethod
    def of(cls, budget_ms: float, *, wall_clock: bool, started: float | None = None) -> Budget:
        """The one way to build a budget: with the wall-clock backstop (a deadline from
        ``started``, or now), or of estimated work only (:meth:`of_work`)."""
        return cls(budget_ms, started=started) if wall_clock else cls.of_work(budget_ms)

    @property
    def work_only(self) -> bool:
        """No wall-clock deadline: the budget counts estimated work alone."""
        return math.isinf(self.deadline)

    def sibling(self, budget_ms: float, *, started: float | None = None) -> Budget:
        """A budget of ``budget_ms`` of the same kind: work-only, or with a deadline from ``started``."""
        return Budget.of(budget_ms, wall_clock=not self.work_only, started=started)

    def charge(self, units: float) -> None:
        self.spent += units

    def reserve(self, units: float) -> None:
        """Keep back a step of ``units`` that must run after the searches: charged now, and
        the wall-clock deadline moved earlier by its estimated time (the searches end in time
        for it)."""
        self.charge(units)
        self.kept += units
        self.deadline -= units / 1e6

    def release(self, units: float) -> None:
        """Give back a step kept back with :meth:`reserve` that will not run after all."""
        self.spent -= units
        self.kept -= units
        self.deadline += units / 1e6

    def affords(self, units: float) -> bool:
        """Whether a step estimated at ``units`` fits in what is left, and would end before
        the deadline at the pace the work so far ran (:meth:`pace`): on a machine slower than
        the estimates, the step and what is kept back for after the searches take longer too,
        and the searches end earlier by as much."""
        if self.spent + units > self.units:
            self.refused += 1
            return False
        if self.work_only:
            return True
        now = time.perf_counter()
        pace = self.pace(now)
        if now + units * pace / 1e6 < self.deadline - (pace - 1) * (self.kept / 1e6 + self.finish_s):
            return True
        self.refused += 1
        return False

    def pace(self, now: float) -> float:
        """Wall time per estimated unit of the work done so far (at least 1, at most
        :data:`MAX_PACE`): everything the estimates leave out shows here."""
        done = self.spent - self.kept
        if done <= 0:
            return 1.0
        return min(MAX_PACE, max(1.0, (now - self.started) * 1e6 / done))

    def overdue(self) -> bool:
        """Whether the wall-clock deadline has passed (never, on a work-only budget)."""
        return time.perf_counter() >= self.deadline

    def remaining_s(self) -> float:
        """Wall-clock seconds left before the deadline."""
        return max(0.0, self.deadline - time.perf_counter())

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000
