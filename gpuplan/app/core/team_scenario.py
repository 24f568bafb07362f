"""The config's teams in a cycle's scenario (docs/teams.md): quotas, weights, each job's team and P90.

:func:`with_teams` adds to a scenario document (``bridge.scenario_document``'s) the ``teams``
and ``fair_share`` sections and, on each batch job of a team the config names, its ``team``
and its ``p90_duration``. A job whose team the config does not name plans as the work of no
team. Without teams in the config the document is returned as it came.

A team's ``past_gpu_hours`` is what its jobs used, running and finished (each started job's
GPUs from its start to its end, or to the plan's start), decayed by the half-life (a GPU-hour
``a`` hours ago counts ``2 ** (-a / half-life)``: :func:`gpuplan.app.core.team_use.decayed_gpu_hours`).
Its ``forecast`` is its arrivals' GPUs per step: the mean GPU-hours per hour its jobs submitted
in the last week asked for, per model, spread over the horizon
(:func:`gpuplan.app.core.team_use.arrivals_forecast`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from contract.scenario import DEFAULT_POOL
from contract.scenario_io import gpus_per_model
from gpuplan.app.core.bridge import Snapshot, duration_steps
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.core.team_use import arrivals_forecast, decayed_gpu_hours, team_runs

HOURS_PER_DAY = 24.0


def with_teams(document: Mapping[str, Any], snapshot: Snapshot, config: ServiceConfig) -> dict[str, Any]:
    """``document`` with the config's teams, its jobs' teams and P90s (unchanged without teams)."""
    if not config.teams:
        return dict(document)
    names = {team.name for team in config.teams}
    step_minutes = snapshot.cluster.step_minutes
    queued = {job.id: job for job in snapshot.queued}
    teams_of = {job.id: job.team for job in (*snapshot.running, *snapshot.queued) if job.team in names}
    jobs = []
    for given in document["jobs"]:
        entry = dict(given)
        if entry["id"] in teams_of:
            entry["team"] = teams_of[entry["id"]]
        job = queued.get(entry["id"])
        if job is not None and job.estimate is not None and "duration" in entry:
            p90 = duration_steps(job.estimate.hours_p90, step_minutes)
            entry["p90_duration"] = max(entry["duration"], p90)
        jobs.append(entry)
    # A scenario without a `pools` section has one GPU model, `default`.
    one_model = "pools" not in document
    history = (*snapshot.finished, *snapshot.running, *snapshot.queued)
    runs = team_runs(history, config.pools, snapshot.start, names)
    used = decayed_gpu_hours(runs, snapshot.start, config.half_life_days * HOURS_PER_DAY)
    model_gpus = (
        {DEFAULT_POOL: snapshot.cluster.gpus}
        if one_model
        else gpus_per_model(config.pools, snapshot.cluster.gpus)
    )
    teams: list[dict[str, Any]] = []
    for team in config.teams:
        row: dict[str, Any] = {
            "name": team.name,
            "quota": {DEFAULT_POOL: sum(team.quota.values())} if one_model else dict(team.quota),
            "weight": team.weight,
            "past_gpu_hours": used.get(team.name, 0.0),
        }
        forecast = arrivals_forecast(
            history,
            team.name,
            snapshot.start,
            pools=config.pools,
            horizon=int(document["horizon"]),
            model_gpus=model_gpus,
        )
        if config.lending_horizon_hours is not None:
            lend_steps = math.ceil(config.lending_horizon_hours * 60 / step_minutes - 1e-9)
            forecast = lend_within(forecast, row["quota"], steps=lend_steps, horizon=int(document["horizon"]))
        if forecast:
            row["forecast"] = {model: list(steps) for model, steps in forecast.items()}
        teams.append(row)
    return {**document, "jobs": jobs, "teams": teams, "fair_share": {"half_life_days": config.half_life_days}}


def lend_within(
    forecast: Mapping[str, tuple[int, ...]], quota: Mapping[str, int], *, steps: int, horizon: int
) -> dict[str, tuple[int, ...]]:
    """``forecast`` (model -> GPUs per step over ``horizon`` steps) with the team's whole
    ``quota`` of each model from step ``steps`` on: beyond the lending horizon the owner's need
    is not known, so none of its quota is lent there, and a borrower (lent GPUs count until its
    P90 end) gives them back by then even if the owner's work comes unforeseen."""
    out = dict(forecast)
    for model, gpus in quota.items():
        if gpus > 0 and steps < horizon:
            row = out.get(model, (0,) * horizon)
            out[model] = (*row[:steps], *(max(g, gpus) for g in row[steps:]))
    return out
