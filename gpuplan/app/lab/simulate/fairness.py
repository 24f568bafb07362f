"""The teams' measures of a simulated week (docs/teams.md, "Simulation").

The run is sampled every :data:`SAMPLE_HOURS` of simulated time. At each sample a team *holds*
the GPUs of its jobs running then (per GPU model), *waits* when one of its jobs is submitted and
not started, and *waits for its quota* when one of its waiting jobs fits what it does not hold
of its quota on a model the job may run on. Per team:

- ``gpu_hours``: its batch GPU-hours run; ``share``: those over the cluster's GPU-hours;
  ``entitlement``: its quotas' sum over the cluster's GPUs;
- ``backlog_hours`` and ``backlog_share``: the hours it waited, and its share of the cluster's
  GPUs held in them; ``entitlement_met``: ``backlog_share / entitlement``;
- ``wait_p50_h``, ``wait_p90_h``: its jobs' waits (a job never started waited to the end);
- ``reclaim_wait_h_p90``: of the spells in which it waited for its quota, the 90th percentile
  of their lengths (0 with none).

``fairness`` is Jain's index ``(sum x)^2 / (n sum x^2)`` of ``x = entitlement_met`` (the issue's
share over entitlement, the share taken while the team had backlog) over the teams with an
entitlement and an hour of backlog: 1 when each got the same part of its entitlement. It is not
capped at 1: a team far above its entitlement beside one below it is unequal sharing of what is
beyond the quotas, and a cap would read it as fair. ``lent_p90_overruns`` counts the jobs that
ran past their P90 end while their team held more than its quota of the model they ran on and
another team waited for its quota there: the one case lending without preemption makes an owner
wait.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from contract.scenario import DEFAULT_POOL
from gpuplan.app.core.bridge import STEP, pool_of
from gpuplan.app.core.job_models import model_key
from gpuplan.app.lab.simulate.loop import PolicyRun
from gpuplan.app.lab.simulate.setup import FloatArray, Setup
from gpuplan.app.lab.workload import SimJob

Flags = np.ndarray[Any, np.dtype[np.bool_]]

#: The sampling interval of the teams' measures (simulated hours).
SAMPLE_HOURS = 0.25
#: A team waited for its quota, or had backlog, when it did so at this many samples or more.
BACKLOG_HOURS = 1.0


@dataclass(frozen=True)
class TeamMetrics:
    gpu_hours: float
    share: float
    entitlement: float
    backlog_hours: float
    backlog_share: float
    wait_p50_h: float
    wait_p90_h: float
    reclaim_wait_h_p90: float

    @property
    def entitlement_met(self) -> float:
        return self.backlog_share / self.entitlement if self.entitlement else 1.0

    def as_json(self) -> dict[str, Any]:
        return {
            "gpu_hours": round(self.gpu_hours, 3),
            "share": round(self.share, 6),
            "entitlement": round(self.entitlement, 6),
            "backlog_hours": round(self.backlog_hours, 3),
            "backlog_share": round(self.backlog_share, 6),
            "entitlement_met": round(self.entitlement_met, 6),
            "wait_p50_h": round(self.wait_p50_h, 4),
            "wait_p90_h": round(self.wait_p90_h, 4),
            "reclaim_wait_h_p90": round(self.reclaim_wait_h_p90, 4),
        }


@dataclass(frozen=True)
class TeamsMetrics:
    teams: Mapping[str, TeamMetrics]
    fairness: float
    lent_p90_overruns: int

    def as_json(self) -> dict[str, Any]:
        return {
            "teams": {name: m.as_json() for name, m in self.teams.items()},
            "fairness": round(self.fairness, 6),
            "lent_p90_overruns": self.lent_p90_overruns,
        }


def jain(values: list[float]) -> float:
    """Jain's fairness index of ``values`` (1 for none or all zero)."""
    total, squares = sum(values), sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else 1.0


@dataclass(frozen=True, eq=False)
class _Ran:
    job: SimJob
    model: str
    start: float  # simulated hours
    end: float  # its actual end
    p90_end: float


def team_metrics(setup: Setup, run: PolicyRun) -> TeamsMetrics | None:
    """The teams' measures of ``run`` (None without teams)."""
    if not setup.teams:
        return None
    samples = math.ceil(setup.hours / SAMPLE_HOURS)
    times: FloatArray = np.arange(samples, dtype=np.float64) * SAMPLE_HOURS
    models = _model_gpus(setup)
    quota = {team.name: _quota(setup, team.quota) for team in setup.teams}
    ran = {job.id: _ran(setup, run, job) for job in setup.jobs if job.id in run.started}
    held = {t: {m: np.zeros(samples) for m in models} for t in quota}
    for r in ran.values():
        if r.job.team in held:
            held[r.job.team][r.model] += run.gpus[r.job.id] * ((times >= r.start) & (times < r.end))
    waits_for_quota = {t: {m: np.zeros(samples, dtype=bool) for m in models} for t in quota}
    backlog = {t: np.zeros(samples, dtype=bool) for t in quota}
    waits: dict[str, list[float]] = {t: [] for t in quota}
    for job in setup.jobs:
        if job.team not in quota:
            continue
        start = ran[job.id].start if job.id in ran else float(setup.hours)
        waiting = (times >= job.submit_hour) & (times < start)
        waits[job.team].append(max(0.0, start - max(0.0, job.submit_hour)))
        backlog[job.team] |= waiting
        gpus = setup.estimates[job.id].gpus
        for model in _allowed(setup, job, models):
            free = quota[job.team].get(model, 0) - held[job.team][model]
            waits_for_quota[job.team][model] |= waiting & (free >= gpus)
    cluster = setup.cluster.gpus * setup.hours
    teams = {}
    for team in setup.teams:
        name = team.name
        used = sum(held[name].values(), np.zeros(samples))
        in_backlog = backlog[name]
        teams[name] = TeamMetrics(
            gpu_hours=sum(
                run.gpus[r.job.id] * (min(r.end, setup.hours) - r.start)
                for r in ran.values()
                if r.job.team == name
            ),
            share=float(used.sum() * SAMPLE_HOURS / cluster),
            entitlement=sum(quota[name].values()) / setup.cluster.gpus,
            backlog_hours=float(in_backlog.sum() * SAMPLE_HOURS),
            backlog_share=float(used[in_backlog].mean() / setup.cluster.gpus) if in_backlog.any() else 0.0,
            wait_p50_h=_percentile(waits[name], 50),
            wait_p90_h=_percentile(waits[name], 90),
            reclaim_wait_h_p90=_percentile(
                _spells(np.logical_or.reduce(list(waits_for_quota[name].values()))), 90
            ),
        )
    overruns = _lent_overruns(ran, quota, held, waits_for_quota, times)
    return TeamsMetrics(teams=teams, fairness=fairness_of(teams), lent_p90_overruns=overruns)


def fairness_of(teams: Mapping[str, TeamMetrics]) -> float:
    """Jain's index of ``entitlement_met`` over the teams with an entitlement and an hour of backlog."""
    return jain(
        [m.entitlement_met for m in teams.values() if m.entitlement and m.backlog_hours >= BACKLOG_HOURS]
    )


def _model_gpus(setup: Setup) -> dict[str, int]:
    """GPUs per GPU model (``default`` on one pool)."""
    if not setup.pooled:
        return {DEFAULT_POOL: setup.cluster.gpus}
    found: dict[str, int] = {}
    for pool in setup.pools:
        found[pool.gpu_model] = found.get(pool.gpu_model, 0) + pool.gpus
    return found


def _quota(setup: Setup, quota: Mapping[str, int]) -> dict[str, int]:
    """A team's quota per model of :func:`_model_gpus` (on one pool, its quotas' sum)."""
    return dict(quota) if setup.pooled else {DEFAULT_POOL: sum(quota.values())}


def _allowed(setup: Setup, job: SimJob, models: Mapping[str, int]) -> list[str]:
    """The models ``job`` may run on."""
    if not setup.pooled:
        return [DEFAULT_POOL]
    estimate = setup.estimates[job.id]
    return [
        pool.gpu_model
        for pool in setup.pools
        if estimate.hours_on(model_key(pool.gpu_model)) is not None and estimate.gpus <= pool.gpus
        if pool.gpu_model in models
    ]


def _ran(setup: Setup, run: PolicyRun, job: SimJob) -> _Ran:
    first = run.first_gpus.get(job.id, 0)
    start = (run.started[job.id] - setup.start) / STEP
    estimate = setup.estimates[job.id]
    model, p90 = DEFAULT_POOL, estimate.hours_p90
    if setup.pooled:
        pool = pool_of(setup.pools, first)
        if pool is not None:
            model = pool.gpu_model
            on_model = estimate.hours_on(model_key(model))
            p90 = on_model[1] if on_model is not None else p90
    return _Ran(job, model, start, start + setup.actual_hours(job, first), start + p90)


def _lent_overruns(
    ran: Mapping[str, _Ran],
    quota: Mapping[str, Mapping[str, int]],
    held: Mapping[str, Mapping[str, FloatArray]],
    waits_for_quota: Mapping[str, Mapping[str, Flags]],
    times: FloatArray,
) -> int:
    """Jobs past their P90 end while their team (or no team) held beyond its quota of their
    model and another team waited for its quota there."""
    count = 0
    for r in ran.values():
        if r.end <= r.p90_end:
            continue
        past = (times >= r.p90_end) & (times < r.end)
        team = r.job.team
        beyond = past
        if team is not None and team in held:
            beyond = past & (held[team][r.model] > quota[team].get(r.model, 0))
        if any((beyond & waits_for_quota[other][r.model]).any() for other in quota if other != team):
            count += 1
    return count


def _spells(flags: Flags) -> list[float]:
    """The lengths (hours) of the runs of True in ``flags``."""
    spells, length = [], 0
    for flag in flags:
        if flag:
            length += 1
        elif length:
            spells.append(length * SAMPLE_HOURS)
            length = 0
    if length:
        spells.append(length * SAMPLE_HOURS)
    return spells


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0
