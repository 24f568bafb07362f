"""What the teams' jobs used and submitted, read from the stored jobs (docs/teams.md).

A *run* is a started job's GPUs from its start to its end (a running job's: to now), on the GPU
model of the pool of its first GPU (``default`` on a cluster without pools). From the runs:

- :func:`decayed_gpu_hours`: each team's GPU-hours, each hour of age ``a`` weighed
  ``2 ** (-a / half-life)`` (the scenario's ``past_gpu_hours``, the status's share);
- :func:`gpu_hours_between`: each team's GPU-hours per model inside a window (``report teams``).

:func:`arrivals_forecast` is a team's forecast arrivals (the scenario's ``forecast``): the mean
GPU-hours its jobs submitted in the last :data:`FORECAST_DAYS` days asked for per hour, per
model, spread evenly over the horizon as whole GPUs per step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from contract.records import Job
from contract.scenario import DEFAULT_POOL, Pool
from gpuplan.app.core.bridge import pool_of
from gpuplan.app.core.job_models import job_pools, model_key

HOURS_PER_DAY = 24.0
#: The finished jobs read back for the decayed use: those submitted within this many
#: half-lives (an hour older weighs less than 2 ** -10 of a new one).
HALF_LIVES_READ = 10
#: The days of submissions a team's arrivals forecast averages.
FORECAST_DAYS = 7


@dataclass(frozen=True, slots=True)
class TeamRun:
    """A team's job holding ``gpus`` GPUs of ``model`` from ``start`` to ``end``."""

    team: str
    model: str
    start: datetime
    end: datetime
    gpus: int

    def hours_between(self, since: datetime, until: datetime) -> float:
        """The run's hours inside ``[since, until)``."""
        seconds = (min(self.end, until) - max(self.start, since)).total_seconds()
        return max(0.0, seconds / 3600)


def model_of(pools: Sequence[Pool], gpu: int) -> str | None:
    """The GPU model of the pool of ``pools`` (the config's) that holds ``gpu``; ``default``
    without pools; None for a GPU outside every pool."""
    if not pools:
        return DEFAULT_POOL
    pool = pool_of(pools, gpu)
    return None if pool is None else pool.gpu_model


def team_runs(
    jobs: Iterable[Job], pools: Sequence[Pool], now: datetime, names: Iterable[str]
) -> list[TeamRun]:
    """The runs of the started jobs of the teams ``names`` up to ``now`` (a running job's to now)."""
    known = set(names)
    runs = []
    for job in jobs:
        if job.team not in known or job.started_at is None or job.gpus is None or job.first_gpu is None:
            continue
        model = model_of(pools, job.first_gpu)
        end = now if job.ended_at is None else min(job.ended_at, now)
        if model is not None and end > job.started_at:
            runs.append(TeamRun(job.team, model, job.started_at, end, job.gpus))
    return runs


def decayed_gpu_hours(runs: Iterable[TeamRun], now: datetime, half_life_hours: float) -> dict[str, float]:
    """Per team, its runs' GPU-hours up to ``now``, an hour of age ``a`` weighed ``2 ** (-a / H)``."""
    used: dict[str, float] = {}
    for run in runs:
        newest = max(0.0, (now - run.end).total_seconds() / 3600)
        oldest = max(newest, (now - run.start).total_seconds() / 3600)
        # The integral of gpus x 2 ** (-a / H) over the ages a of its hours, newest to oldest.
        hours = (
            run.gpus
            * half_life_hours
            / math.log(2)
            * (2 ** (-newest / half_life_hours) - 2 ** (-oldest / half_life_hours))
        )
        used[run.team] = used.get(run.team, 0.0) + hours
    return used


def gpu_hours_between(
    runs: Iterable[TeamRun], since: datetime, until: datetime
) -> dict[tuple[str, str], float]:
    """Per (team, model), the runs' GPU-hours inside ``[since, until)``."""
    hours: dict[tuple[str, str], float] = {}
    for run in runs:
        inside = run.hours_between(since, until)
        if inside > 0:
            key = (run.team, run.model)
            hours[key] = hours.get(key, 0.0) + run.gpus * inside
    return hours


def submitted_gpu_hours(job: Job, pools: Sequence[Pool]) -> dict[str, float]:
    """The GPU-hours a job asked for (its GPUs x its P50 hours), per GPU model: a started job's
    on its pool's model, a waiting one's shared evenly among the models it may run on."""
    estimate = job.estimate
    if estimate is None:
        return {}
    if not pools:
        return {DEFAULT_POOL: estimate.gpus * estimate.hours_p50}
    ran_on = None if job.first_gpu is None else model_of(pools, job.first_gpu)
    if ran_on is not None:
        hours = estimate.hours_on(model_key(ran_on)) or (estimate.hours_p50, estimate.hours_p90)
        return {ran_on: estimate.gpus * hours[0]}
    allowed = job_pools(estimate, pools)
    asked: dict[str, float] = {}
    for pool, (p50, _) in allowed:
        asked[pool.gpu_model] = asked.get(pool.gpu_model, 0.0) + estimate.gpus * p50 / len(allowed)
    return asked


def arrivals_forecast(
    jobs: Iterable[Job],
    team: str,
    now: datetime,
    *,
    pools: Sequence[Pool],
    horizon: int,
    model_gpus: Mapping[str, int],
) -> dict[str, tuple[int, ...]]:
    """``team``'s forecast GPUs per step over ``horizon`` steps, per model of ``model_gpus``
    (model -> its GPUs): the GPU-hours its jobs submitted in ``[now - FORECAST_DAYS, now)``
    asked for, per hour, as a steady rate, spread as whole GPUs per step whose running sum
    follows the rate (a rate of 2.5 reads 3, 2, 3, 2, ...). Models at rate 0 are left out."""
    since = now - timedelta(days=FORECAST_DAYS)
    asked: dict[str, float] = {}
    for job in jobs:
        if job.team != team or not since <= job.submitted_at < now:
            continue
        for model, hours in submitted_gpu_hours(job, pools).items():
            # One model in the scenario (no `pools` section): every model's hours are its.
            key = model if model in model_gpus else DEFAULT_POOL
            asked[key] = asked.get(key, 0.0) + hours
    forecast = {}
    for model, hours in sorted(asked.items()):
        if model not in model_gpus:
            continue
        rate = hours / (FORECAST_DAYS * HOURS_PER_DAY)  # GPU-hours per hour: GPUs held on average
        steps = tuple(
            min(model_gpus[model], _round(rate * (t + 1)) - _round(rate * t)) for t in range(horizon)
        )
        if any(steps):
            forecast[model] = steps
    return forecast


def _round(value: float) -> int:
    """Half up (Python's ``round`` goes to even, which would bunch a rate of 0.5)."""
    return math.floor(value + 0.5)


def history_since(now: datetime, half_life_days: float) -> datetime:
    """The earliest submission whose job the teams' decayed use and forecast read."""
    return now - timedelta(days=max(HALF_LIVES_READ * half_life_days, FORECAST_DAYS))
