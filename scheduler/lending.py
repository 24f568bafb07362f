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
            borrowed, needed, over = 0, 0, []
            for bucket, quota in frame.quota.items():
                holds = held[bucket][t].bit_count() + frame.demand[bucket][t]
                excess = max(0, holds - frame.cap(bucket, t))
                if excess:
                    borrowed += excess
                    over += covering[bucket][t]
                needed += min(quota, holds + waiting[bucket][t] + frame.forecast[bucket][t])
            lendable = max(0, frame.lendable_base(t) - needed)
            if borrowed > lendable:
                out.append(Excess(frame.model, t, borrowed, lendable, tuple(over)))
    return out


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
