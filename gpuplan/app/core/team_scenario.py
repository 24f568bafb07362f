"""The config's teams in a cycle's scenario (docs/teams.md): quotas, weights, each job's team and P90.

:func:`with_teams` adds to a scenario document (``bridge.scenario_document``'s) the ``teams``
and ``fair_share`` sections and, on each batch job of a team the config names, its ``team``
and its ``p90_duration``. A job whose team the config does not name plans as the work of no
team. Without teams in the config the document is returned as it came.

A team's ``past_gpu_hours`` is what its running jobs have used so far, decayed by the
half-life (a GPU-hour ``a`` hours ago counts ``2 ** (-a / half-life)``); the finished jobs'
hours are not read from the store yet.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from contract.scenario import DEFAULT_POOL
from gpuplan.app.core.bridge import Snapshot, duration_steps
from gpuplan.app.core.config import ServiceConfig

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
    used = _decayed_use(snapshot, config.half_life_days * HOURS_PER_DAY)
    teams = [
        {
            "name": team.name,
            "quota": {DEFAULT_POOL: sum(team.quota.values())} if one_model else dict(team.quota),
            "weight": team.weight,
            "past_gpu_hours": used.get(team.name, 0.0),
        }
        for team in config.teams
    ]
    return {**document, "jobs": jobs, "teams": teams, "fair_share": {"half_life_days": config.half_life_days}}


def _decayed_use(snapshot: Snapshot, half_life_hours: float) -> dict[str, float]:
    """Per team, its running jobs' GPU-hours so far, each hour decayed by its age."""
    used: dict[str, float] = {}
    for job in snapshot.running:
        if job.team is None or job.started_at is None or job.gpus is None:
            continue
        elapsed = max(0.0, (snapshot.start - job.started_at).total_seconds() / 3600)
        # The integral of gpus x 2 ** (-a / H) over the ages a of its hours, 0 to ``elapsed``.
        hours = job.gpus * half_life_hours / math.log(2) * (1 - 2 ** (-elapsed / half_life_hours))
        used[job.team] = used.get(job.team, 0.0) + hours
    return used
