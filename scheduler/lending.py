"""Constraint 7, lending without preemption: the counts of docs/contract.md's "Teams", per GPU
model and step, for a given set of batch starts.

On each GPU model some team holds a quota of, at each step ``t`` (docs/teams.md):

- a *bucket* is a team, or the work of no team (quota 0); its quota ``Q`` on the model;
- ``base(t)``: its running batch GPUs there and its services' demand there (fixed by the scenario);
- ``S(t)``: GPUs of the model its batch work holds, each queued job from its start to its
  P90 end (a union over GPUs: its own runs never count twice), plus its services' demand;
- ``W(t)``: GPUs of its waiting jobs: queued, released by ``t``, not started by ``t``, allowed on
  a pool of the model, each no larger than ``Q`` (work the plan could start inside the quota);
- ``N(t) = min(Q, S(t) + W(t) + forecast(t))``: the quota the owner needs back;
- ``B(t) = max(0, S(t) - max(Q, base(t)))``: what its queued work holds beyond its quota;
- ``L(t) = max(0, unowned(t) + sum(Q - N(t)) - sum(max(0, base(t) - Q)))``: what may be lent,
  ``unowned`` the model's up GPUs beyond the quotas' sum.

Constraint 7: ``sum(B(t)) <= L(t)``. With no queued work placed it holds (``B = 0``); taking a
queued job out of a plan never raises ``B``. The checker, the fast mode's repair
(:mod:`scheduler.teams`) and the full mode's model (:mod:`scheduler.cpmodel`) all read the
counts from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from contract.scenario import BatchJob, Instance
from scheduler.model import Placement

#: The bucket of work that names no team.
NO_TEAM = ""


@dataclass(frozen=True, slots=True)
class ModelFrame:
    """What constraint 7 reads of one GPU model from the scenario alone."""

    model: str
    mask: int  # the model's GPUs
    pools: frozenset[str]  # its pools' names
    quota: Mapping[str, int]  # bucket -> GPUs guaranteed (buckets with work or quota)
    running: Mapping[str, tuple[int, ...]]  # bucket -> per step, its running batch GPUs as a mask
    demand: Mapping[str, tuple[int, ...]]  # bucket -> per step, its services' demand
    forecast: Mapping[str, tuple[int, ...]]  # bucket -> per step, GPUs its arrivals need
    unowned: tuple[int, ...]  # per step, up GPUs beyond the quotas' sum
    eligible: Mapping[str, tuple[BatchJob, ...]]  # bucket -> jobs whose wait counts in W

    #: bucket -> per step, what it may hold without borrowing: its quota, or more if its fixed
    #: work (running batch GPUs, services' demand) holds more
    caps: Mapping[str, tuple[int, ...]]
    #: per step, ``unowned(t) + sum(Q)`` less the fixed work's excess over quotas: ``L(t)`` before ``sum(N)``
    lend_base: tuple[int, ...]

    def cap(self, bucket: str, t: int) -> int:
        return self.caps[bucket][t]

    def lendable_base(self, t: int) -> int:
        return self.lend_base[t]


def bucket_of(job_team: str | None) -> str:
    return NO_TEAM if job_team is None else job_team


def frames(instance: Instance) -> list[ModelFrame]:
    """One frame per GPU model some team holds a quota of (none without teams)."""
    horizon = instance.horizon_steps
    out = []
    models = dict.fromkeys(pool.gpu_model for pool in instance.pools)
    for model in models:
        if not any(team.quota.get(model, 0) for team in instance.teams):
            continue
        pools = [pool for pool in instance.pools if pool.gpu_model == model]
        mask = 0
        for pool in pools:
            mask |= pool.mask
        names = frozenset(pool.name for pool in pools)
        quota = {team.name: team.quota.get(model, 0) for team in instance.teams}
        quota[NO_TEAM] = 0
        running = {bucket: [0] * horizon for bucket in quota}
        for r in instance.running_batch.values():
            job = instance.jobs_by_id[r.job_id]
            assert isinstance(job, BatchJob)
            if r.mask & mask:
                for t in range(min(r.remaining_steps, horizon)):
                    running[bucket_of(job.team)][t] |= r.mask
        demand = {bucket: [0] * horizon for bucket in quota}
        for rt in instance.realtime_jobs:
            if instance.realtime_pool(rt).name in names:
                row = demand[bucket_of(rt.team)]
                for t, want in enumerate(rt.demand):
                    row[t] += want
        zeros = (0,) * horizon
        forecast = {team.name: team.forecast.get(model, zeros) for team in instance.teams}
        forecast[NO_TEAM] = zeros
        total = sum(quota.values())
        unowned = tuple(max(0, (mask & ~down).bit_count() - total) for down in instance.down_masks)
        eligible = {
            bucket: tuple(
                job
                for job in instance.queued_jobs
                if bucket_of(job.team) == bucket
                and 0 < job.gpus <= q
                and any(p.name in names for p in instance.allowed_pools(job))
            )
            for bucket, q in quota.items()
        }
        fixed = {b: [running[b][t].bit_count() + demand[b][t] for t in range(horizon)] for b in quota}
        caps = {b: tuple(max(q, f) for f in fixed[b]) for b, q in quota.items()}
        lend_base = tuple(
            unowned[t] + total - sum(max(0, fixed[b][t] - q) for b, q in quota.items())
            for t in range(horizon)
        )
        out.append(
            ModelFrame(
                caps=caps,
                lend_base=lend_base,
                model=model,
                mask=mask,
                pools=names,
                quota=quota,
                running={b: tuple(m) for b, m in running.items()},
                demand={b: tuple(d) for b, d in demand.items()},
                forecast=forecast,
                unowned=unowned,
                eligible=eligible,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Excess:
    """A step where queued work holds more of a model beyond its quotas than may be lent."""

    model: str
    step: int
    borrowed: int  # sum(B(t))
    lendable: int  # L(t)
    jobs: tuple[str, ...]  # the queued jobs of buckets over their cap whose P90 run covers the step


def excesses(
    instance: Instance, placements: Mapping[str, Placement], models: list[ModelFrame] | None = None
) -> list[Excess]:
    """Every breach of constraint 7 by the queued jobs' ``placements`` (job id -> placement)."""
    out = []
    jobs = instance.jobs_by_id
    for frame in frames(instance) if models is None else models:
        horizon = instance.horizon_steps
        held = {bucket: list(frame.running[bucket]) for bucket in frame.quota}
        covering: dict[str, list[list[str]]] = {b: [[] for _ in range(horizon)] for b in frame.quota}
        for job_id, placement in placements.items():
            job = jobs[job_id]
            assert isinstance(job, BatchJob)
            if not frame.mask >> placement.first_gpu & 1:
                continue
            bucket = bucket_of(job.team)
            block = ((1 << job.gpus) - 1) << placement.first_gpu
            for t in range(
                placement.start_step, instance.p90_end(job, placement.start_step, placement.first_gpu)
            ):
                held[bucket][t] |= block
                covering[bucket][t].append(job_id)
        waiting = {bucket: _waiting(frame.eligible[bucket], placements, horizon) for bucket in frame.quota}
        for t in range(horizon):
            borrowed, lendable, over = balance(frame, t, held, waiting)
            if borrowed > lendable:
                jobs_over = tuple(job_id for bucket in over for job_id in covering[bucket][t])
                out.append(Excess(frame.model, t, borrowed, lendable, jobs_over))
    return out


def balance(
    frame: ModelFrame, t: int, held: Mapping[str, list[int]], waiting: Mapping[str, list[int]]
) -> tuple[int, int, list[str]]:
    """At step ``t`` of ``frame``'s model: ``sum(B(t))``, ``L(t)`` and the buckets over their cap,
    given per bucket the GPUs its batch work holds (a mask per step) and its waiting GPUs."""
    borrowed, needed, over = 0, 0, []
    for bucket in frame.quota:
        excess, need = _terms(frame, bucket, t, held[bucket][t], waiting[bucket][t])
        if excess:
            borrowed += excess
            over.append(bucket)
        needed += need
    return borrowed, max(0, frame.lend_base[t] - needed), over


def _terms(frame: ModelFrame, bucket: str, t: int, held: int, waiting: int) -> tuple[int, int]:
    """One bucket's ``B(t)`` and ``N(t)``, given the GPUs its batch work holds (a mask) and waits for."""
    holds = held.bit_count() + frame.demand[bucket][t]
    return max(0, holds - frame.caps[bucket][t]), min(
        frame.quota[bucket], holds + waiting + frame.forecast[bucket][t]
    )


def _waiting(jobs: tuple[BatchJob, ...], placements: Mapping[str, Placement], horizon: int) -> list[int]:
    """Per step ``t``, the GPUs of ``jobs`` released by ``t`` and not started by ``t``."""
    change = [0] * (horizon + 1)
    for job in jobs:
        placed = placements.get(job.id)
        until = horizon if placed is None else min(placed.start_step, horizon)
        if job.release_step < until:
            change[job.release_step] += job.gpus
            change[until] -= job.gpus
    out, total = [], 0
    for t in range(horizon):
        total += change[t]
        out.append(total)
    return out


class Ledger:
    """Constraint 7's counts under a plan that changes one queued job at a time (the fast mode's
    repair): a job placed or taken out recounts only its own bucket at the steps it touches, and
    :meth:`breach` names the first step that breaks the rule, as :func:`excesses` lists it first.

    The counts are :func:`excesses`'s (:func:`_terms`, bucket by bucket); the checker still
    counts every plan afresh.
    """

    def __init__(
        self, instance: Instance, models: list[ModelFrame], placements: Mapping[str, Placement]
    ) -> None:
        self._instance = instance
        self._p90_steps: dict[tuple[str, int], int] = {}  # (job, first GPU) -> its P90 steps there
        self._books = [_Book(frame, instance.horizon_steps) for frame in models]
        self._eligible_in: dict[str, set[int]] = {}
        for index, frame in enumerate(models):
            for jobs in frame.eligible.values():
                for job in jobs:
                    self._eligible_in.setdefault(job.id, set()).add(index)
        self.placements: dict[str, Placement] = {}
        for job_id, placement in placements.items():
            placed = instance.jobs_by_id[job_id]
            assert isinstance(placed, BatchJob)
            self._change(placed, placement, +1, recount=False)
        for book in self._books:
            for bucket in book.frame.quota:
                book.recount(bucket, 0, instance.horizon_steps)

    def _p90_end(self, job: BatchJob, placement: Placement) -> int:
        """``instance.p90_end``, its steps kept per job and first GPU."""
        key = (job.id, placement.first_gpu)
        steps = self._p90_steps.get(key)
        if steps is None:
            steps = self._p90_steps[key] = self._instance.p90_end(job, 0, placement.first_gpu)
        return min(placement.start_step + steps, self._instance.horizon_steps)

    def place(self, job: BatchJob, placement: Placement) -> None:
        self._change(job, placement, +1)

    def take_out(self, job: BatchJob) -> Placement:
        placement = self.placements[job.id]
        self._change(job, placement, -1)
        return placement

    def try_place(self, job: BatchJob, placement: Placement) -> bool:
        """Place ``job`` if the plan then keeps constraint 7 (True); otherwise change nothing."""
        if not self.fits(job, placement):
            return False
        self.place(job, placement)
        return True

    def fits(self, job: BatchJob, placement: Placement) -> bool:
        """Whether the plan with ``job`` placed too keeps constraint 7 at every step.

        Placing a job adds to what its bucket holds only on its own model from its start to its
        P90 end; everywhere else it only takes its GPUs out of the waiting ones, which never
        breaks the rule: only those steps, and the steps that break it now, are counted.
        """
        bucket, start = bucket_of(job.team), placement.start_step
        eligible = self._eligible_in.get(job.id, set())
        for index, book in enumerate(self._books):
            here = book.frame.mask >> placement.first_gpu & 1
            if any(t < start for t in book.bad) or (book.bad and not here and index not in eligible):
                return False  # breaches the job cannot mend
            if not here and index not in eligible:
                continue
            waits = book.waiting[bucket]
            fewer = job.gpus if index in eligible else 0
            end = self._p90_end(job, placement) if here else start
            if here:
                block, held = ((1 << job.gpus) - 1) << placement.first_gpu, book.held[bucket]
                if any(book.breaks(bucket, t, held[t] | block, waits[t] - fewer) for t in range(start, end)):
                    return False
            if any(
                book.breaks(bucket, t, book.held[bucket][t], waits[t] - fewer) for t in book.bad if t >= end
            ):
                return False
        return True

    @property
    def legal(self) -> bool:
        return not any(book.bad for book in self._books)

    def breach(self) -> Excess | None:
        """The first breach (by model, then step), or None."""
        for book in self._books:
            if book.bad:
                t = min(book.bad)
                over = [b for b in book.frame.quota if book.excess[b][t]]
                jobs = tuple(job_id for bucket in over for job_id in book.covering[bucket][t])
                lendable = max(0, book.frame.lend_base[t] - book.needed[t])
                return Excess(book.frame.model, t, book.borrowed[t], lendable, jobs)
        return None

    def _change(self, job: BatchJob, placement: Placement, sign: int, *, recount: bool = True) -> None:
        """Add (``sign`` 1) or remove (-1) ``placement`` from the counts."""
        if sign > 0:
            self.placements[job.id] = placement
        else:
            del self.placements[job.id]
        start, bucket = placement.start_step, bucket_of(job.team)
        horizon = self._instance.horizon_steps
        eligible = self._eligible_in.get(job.id, set())
        for index, book in enumerate(self._books):
            here = book.frame.mask >> placement.first_gpu & 1
            end = self._p90_end(job, placement) if here else start
            if here:
                held, covering = book.held[bucket], book.covering[bucket]
                block = ((1 << job.gpus) - 1) << placement.first_gpu
                for t in range(start, end):
                    if sign > 0:
                        covering[t][job.id] = block
                        held[t] |= block
                    else:
                        del covering[t][job.id]
                        mask = book.frame.running[bucket][t]
                        for other in covering[t].values():
                            mask |= other
                        held[t] = mask
            if index in eligible:
                waiting = book.waiting[bucket]
                for t in range(start, horizon):
                    waiting[t] -= sign * job.gpus
                end = horizon
            if recount:
                book.recount(bucket, start, end)


class _Book:
    """One model's counts under a :class:`Ledger`'s plan, per bucket and step, and their sums."""

    def __init__(self, frame: ModelFrame, horizon: int) -> None:
        self.frame = frame
        self.held = {b: list(frame.running[b]) for b in frame.quota}
        self.covering: dict[str, list[dict[str, int]]] = {
            b: [{} for _ in range(horizon)] for b in frame.quota
        }
        self.waiting = {b: _waiting(frame.eligible[b], {}, horizon) for b in frame.quota}
        self.excess = {b: [0] * horizon for b in frame.quota}
        self.need = {b: [0] * horizon for b in frame.quota}
        self.borrowed = [0] * horizon
        self.needed = [0] * horizon
        self.bad: set[int] = set()

    def recount(self, bucket: str, start: int, end: int) -> None:
        """``bucket``'s terms at steps ``start`` to ``end`` counted anew (:func:`_terms`, inlined:
        the repair's inner loop), and the steps that break the rule with them."""
        frame, held, waiting = self.frame, self.held[bucket], self.waiting[bucket]
        demand, caps, forecast = frame.demand[bucket], frame.caps[bucket], frame.forecast[bucket]
        quota, lend_base = frame.quota[bucket], frame.lend_base
        excesses, needs, borrowed, needed, bad = (
            self.excess[bucket],
            self.need[bucket],
            self.borrowed,
            self.needed,
            self.bad,
        )
        for t in range(start, end):
            holds = held[t].bit_count() + demand[t]
            excess = holds - caps[t]
            excess = max(excess, 0)
            need = holds + waiting[t] + forecast[t]
            need = min(need, quota)
            borrowed[t] += excess - excesses[t]
            needed[t] += need - needs[t]
            excesses[t], needs[t] = excess, need
            if borrowed[t] > lend_base[t] - needed[t] and borrowed[t] > 0:
                bad.add(t)
            else:
                bad.discard(t)

    def breaks(self, bucket: str, t: int, held: int, waiting: int) -> bool:
        """Whether step ``t`` breaks the rule were ``bucket`` to hold ``held`` and wait for ``waiting``."""
        excess, need = _terms(self.frame, bucket, t, held, waiting)
        borrowed = self.borrowed[t] - self.excess[bucket][t] + excess
        needed = self.needed[t] - self.need[bucket][t] + need
        return borrowed > max(0, self.frame.lend_base[t] - needed)
