"""The teams as ``status``, ``/v1/status``, the dashboard and ``report teams`` show them (docs/teams.md).

:func:`team_status` is each team's state now, from the stored jobs: per GPU model its quota,
the GPUs its running jobs hold (``in_use``), what of that is beyond its quota (``borrowed``)
and what of its quota other work holds (``lent``); its queued jobs and their GPUs; and its
share over the half-life (its decayed GPU-hours, that share of all teams', its weight's share,
and the fair-share factor the plan weighs its work by).

``lent`` is a count, not a set of GPUs (constraint 7 counts GPUs, not which ones): per model,
what all work holds beyond its quota, less the GPUs no team owns, is lent by the teams whose
quota is idle, shared among them in proportion to their idle quota (whole GPUs, the largest
remainders first).

:func:`team_report` is ``report teams``: per team and model, the GPU-hours its jobs ran in a
window against its entitlement there (its quota times the window's hours).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from contract.records import Job, JobState
from contract.scenario import DEFAULT_POOL, Pool, Team, fair_share_factors
from contract.scenario_io import gpus_per_model
from gpuplan.app.core.job_models import job_pools
from gpuplan.app.core.team_use import HOURS_PER_DAY, decayed_gpu_hours, gpu_hours_between, model_of, team_runs

#: The teams' colours, by their order in the config (the PNGs and the dashboard alike): the
#: categorical palette matplotlib calls ``tab10``; a team beyond the tenth takes them again.
TEAM_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
#: The colour of work no team of the config owns.
NO_TEAM_COLOUR = "#c7c7c7"


def team_colours(teams: Sequence[Team]) -> dict[str, str]:
    """Each team's colour: :data:`TEAM_COLOURS` in the config's order."""
    return {team.name: TEAM_COLOURS[k % len(TEAM_COLOURS)] for k, team in enumerate(teams)}


def _models(pools: Sequence[Pool], cluster_gpus: int) -> dict[str, int]:
    return gpus_per_model(tuple(pools), cluster_gpus)


def _lent(quota: Mapping[str, int], in_use: Mapping[str, int], borrowed: int, gpus: int) -> dict[str, int]:
    """Per team, the GPUs of its idle quota that ``borrowed`` (all work's GPUs beyond its quota)
    holds beyond the ``gpus`` less the quotas' sum, in proportion to the idle quota."""
    unowned = max(0, gpus - sum(quota.values()))
    idle = {name: max(0, quota[name] - in_use.get(name, 0)) for name in quota}
    total_idle = sum(idle.values())
    lent_total = min(max(0, borrowed - unowned), total_idle)
    if not lent_total:
        return dict.fromkeys(quota, 0)
    exact = {name: lent_total * idle[name] / total_idle for name in quota}
    lent = {name: math.floor(value) for name, value in exact.items()}
    left = lent_total - sum(lent.values())
    for name in sorted(quota, key=lambda n: (lent[n] - exact[n], n))[:left]:
        lent[name] += 1
    return lent


def team_status(
    teams: Sequence[Team],
    half_life_days: float,
    *,
    pools: Sequence[Pool],
    cluster_gpus: int,
    jobs: Iterable[Job],
    now: datetime,
) -> list[dict[str, Any]]:
    """Each team's row of the status (module docstring); ``jobs``: the queued, running and
    finished jobs the status reads (the finished: those of
    :func:`gpuplan.app.core.team_use.history_since`)."""
    jobs = list(jobs)
    names = [team.name for team in teams]
    models = _models(pools, cluster_gpus)
    use: dict[str, dict[str, int]] = {model: {} for model in models}  # model -> bucket -> GPUs
    for job in jobs:
        if job.state is JobState.RUNNING and job.first_gpu is not None and job.gpus is not None:
            model = model_of(pools, job.first_gpu)
            if model in use:
                bucket = job.team if job.team in names else ""  # "": the work of no team
                use[model][bucket] = use[model].get(bucket, 0) + job.gpus
    lent: dict[str, dict[str, int]] = {}
    for model, held in use.items():
        quota = {team.name: team.quota.get(model, 0) for team in teams}
        borrowed = sum(max(0, gpus - quota.get(bucket, 0)) for bucket, gpus in held.items())
        lent[model] = _lent(quota, held, borrowed, models[model])
    runs = team_runs(jobs, pools, now, names)
    used = decayed_gpu_hours(runs, now, half_life_days * HOURS_PER_DAY)
    factors = fair_share_factors(
        [Team(t.name, weight=t.weight, past_gpu_hours=used.get(t.name, 0.0)) for t in teams]
    )
    total_used = sum(used.values())
    total_weight = sum(team.weight for team in teams)
    rows: list[dict[str, Any]] = []
    for team in teams:
        queued = [j for j in jobs if j.team == team.name and j.state is JobState.QUEUED]
        in_use = {model: use[model].get(team.name, 0) for model in models}
        rows.append(
            {
                "team": team.name,
                "weight": team.weight,
                "quota": {model: team.quota.get(model, 0) for model in models},
                "in_use": in_use,
                "lent": {model: lent[model][team.name] for model in models},
                "borrowed": {model: max(0, in_use[model] - team.quota.get(model, 0)) for model in models},
                "queued": {
                    "jobs": len(queued),
                    "gpus": sum(j.estimate.gpus for j in queued if j.estimate is not None),
                },
                "share": {
                    "half_life_days": half_life_days,
                    "gpu_hours": round(used.get(team.name, 0.0), 3),
                    "used": round(used.get(team.name, 0.0) / total_used, 4) if total_used else 0.0,
                    "weight": round(team.weight / total_weight, 4),
                    "factor": round(factors[team.name], 4),
                },
            }
        )
    return rows


@dataclass(frozen=True)
class TeamHoursRow:
    """``report teams``: one team's GPU-hours on one GPU model in the window, against its
    entitlement there (its quota x the window's hours; ``of_entitlement`` None without a quota)."""

    team: str
    gpu_model: str
    quota: int
    gpu_hours: float
    entitled_gpu_hours: float
    of_entitlement: float | None
    share_of_model: float  # of the model's GPU-hours in the window


@dataclass(frozen=True)
class TeamReport:
    rows: list[TeamHoursRow]
    since: datetime
    until: datetime

    @property
    def hours(self) -> float:
        return (self.until - self.since).total_seconds() / 3600


def team_report(
    teams: Sequence[Team],
    jobs: Iterable[Job],
    *,
    pools: Sequence[Pool],
    cluster_gpus: int,
    since: datetime,
    until: datetime,
) -> TeamReport:
    """Per team (the config's order) and GPU model, its jobs' GPU-hours in ``[since, until)``."""
    models = _models(pools, cluster_gpus)
    runs = team_runs(jobs, pools, until, [team.name for team in teams])
    hours = gpu_hours_between(runs, since, until)
    window = (until - since).total_seconds() / 3600
    rows = []
    for team in teams:
        for model, gpus in models.items():
            used = hours.get((team.name, model), 0.0)
            quota = team.quota.get(model, 0)
            entitled = quota * window
            rows.append(
                TeamHoursRow(
                    team=team.name,
                    gpu_model=model,
                    quota=quota,
                    gpu_hours=round(used, 3),
                    entitled_gpu_hours=round(entitled, 3),
                    of_entitlement=round(used / entitled, 4) if entitled else None,
                    share_of_model=round(used / (gpus * window), 4),
                )
            )
    return TeamReport(rows, since, until)


def beyond_quota(
    teams: Sequence[Team], job: Job, running: Iterable[Job], *, pools: Sequence[Pool]
) -> str | None:
    """Why ``job`` may wait though GPUs are free: it is larger than what its team's running jobs
    leave of its quota on every GPU model it may run on, so it starts only on GPUs no team owns
    or on quota lent to it (constraint 7); None when it fits a quota, or has no team."""
    team = next((t for t in teams if t.name == job.team), None)
    if team is None or job.estimate is None:
        return None
    models = (
        sorted({pool.gpu_model for pool, _ in job_pools(job.estimate, pools)}) if pools else [DEFAULT_POOL]
    )
    held = dict.fromkeys(models, 0)
    for other in running:
        if other.team == team.name and other.first_gpu is not None and other.gpus is not None:
            model = model_of(pools, other.first_gpu)
            if model in held:
                held[model] += other.gpus
    left = {model: max(0, team.quota.get(model, 0) - held[model]) for model in models}
    if any(job.estimate.gpus <= gpus for gpus in left.values()):
        return None
    quotas = ", ".join(f"{model} {left[model]} of {team.quota.get(model, 0)} free" for model in models)
    return (
        f"{job.estimate.gpus} GPUs are beyond what is left of team {team.name}'s quota ({quotas}): "
        "it starts only on GPUs no team owns, or on another team's idle quota where its P90 end "
        "comes before that team needs it back"
    )
