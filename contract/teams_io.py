"""Reading a scenario's teams: the ``teams`` and ``fair_share`` sections and a job's ``team``.

Every rule of docs/contract.md's "Teams" section that a scenario can break is checked here and
reported as an :class:`~contract.errors.InputError` naming the field (``teams[1].quota.h100``),
what was expected and what came. :mod:`contract.scenario_io` calls it with its reader; the
daemon's config reads its ``teams:`` with ``contract.scenario_io.parse_teams``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from contract.errors import InputError
from contract.scenario import DEFAULT_HALF_LIFE_DAYS, Team

if TYPE_CHECKING:
    from contract.scenario_io import _Reader

TEAM_KEYS = {"name", "quota", "weight", "past_gpu_hours", "forecast"}
FAIR_SHARE_KEYS = {"half_life_days"}
#: The largest weight a team may have (weights are ratios; a bound keeps the factors finite).
MAX_WEIGHT = 1e6
#: The longest half-life (days): ten years.
MAX_HALF_LIFE_DAYS = 3650.0


def read_teams(
    r: _Reader, top: Mapping[str, Any], models: Mapping[str, int], horizon: int
) -> tuple[Team, ...]:
    """The scenario's optional ``teams`` section (none: no teams)."""
    if "teams" not in top:
        if "fair_share" in top:
            raise r.fail("fair_share", "absent in a scenario without a `teams` section", top["fair_share"])
        return ()
    return teams_of(r, top["teams"], models, horizon)


def read_half_life(r: _Reader, top: Mapping[str, Any], field: str = "fair_share") -> float:
    """``fair_share.half_life_days`` (> 0; default 7)."""
    if top.get(field) is None:
        return DEFAULT_HALF_LIFE_DAYS
    section = r.mapping(top[field], field, FAIR_SHARE_KEYS, set())
    days = r.number(
        section.get("half_life_days", DEFAULT_HALF_LIFE_DAYS), f"{field}.half_life_days", positive=True
    )
    if days > MAX_HALF_LIFE_DAYS:
        raise r.fail(f"{field}.half_life_days", f"a number of days in (0, {MAX_HALF_LIFE_DAYS:g}]", days)
    return days


def read_job_team(r: _Reader, job: Mapping[str, Any], field: str, teams: Sequence[Team]) -> str | None:
    """A job's optional ``team``: one of the scenario's teams."""
    if "team" not in job:
        return None
    names = [team.name for team in teams]
    if not teams:
        raise r.fail(f"{field}.team", "absent in a scenario without a `teams` section", job["team"])
    name = r.string(job["team"], f"{field}.team")
    if name not in names:
        raise r.fail(f"{field}.team", f"one of the scenario's teams {names}", name)
    return name


def read_p90(r: _Reader, job: Mapping[str, Any], field: str, duration: int) -> int | None:
    """A batch job's optional ``p90_duration``: steps, at least its ``duration``."""
    if "p90_duration" not in job:
        return None
    return r.integer(job["p90_duration"], f"{field}.p90_duration", minimum=duration)


def teams_of(r: _Reader, value: object, models: Mapping[str, int], horizon: int | None) -> tuple[Team, ...]:
    raw = r.sequence(value, "teams")
    teams: list[Team] = []
    for index, entry in enumerate(raw):
        field = f"teams[{index}]"
        item = r.mapping(entry, field, TEAM_KEYS, {"name"})
        name = r.string(item["name"], f"{field}.name")
        if any(team.name == name for team in teams):
            raise r.fail(f"{field}.name", "a name used by no other team", name)
        weight = r.number(item.get("weight", 1.0), f"{field}.weight", positive=True)
        if weight > MAX_WEIGHT:
            raise r.fail(f"{field}.weight", f"a number in (0, {MAX_WEIGHT:g}]", weight)
        past = r.number(item.get("past_gpu_hours", 0.0), f"{field}.past_gpu_hours")
        if past < 0:
            raise r.fail(f"{field}.past_gpu_hours", "a number of GPU-hours >= 0", past)
        teams.append(
            Team(
                name=name,
                quota=_quota(r, item.get("quota", {}), f"{field}.quota", models),
                weight=weight,
                past_gpu_hours=past,
                forecast=_forecast(r, item.get("forecast", {}), f"{field}.forecast", models, horizon),
            )
        )
    return tuple(teams)


def _quota(r: _Reader, value: object, field: str, models: Mapping[str, int]) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise r.fail(field, "an object of GPU model -> GPUs", type(value).__name__)
    quota = {}
    for model, gpus in value.items():
        if model not in models:
            raise r.fail(f"{field}.{model}", f"a GPU model of the cluster {sorted(models)}", model)
        quota[model] = r.integer(gpus, f"{field}.{model}", minimum=0, maximum=models[model])
    return quota


def _forecast(
    r: _Reader, value: object, field: str, models: Mapping[str, int], horizon: int | None
) -> dict[str, tuple[int, ...]]:
    if not isinstance(value, Mapping):
        raise r.fail(field, "an object of GPU model -> GPUs expected per step", type(value).__name__)
    if value and horizon is None:
        raise InputError(
            field, "absent (a forecast is the plan's, not the config's)", dict(value), source=r.source
        )
    forecast = {}
    for model, per_step in value.items():
        if model not in models:
            raise r.fail(f"{field}.{model}", f"a GPU model of the cluster {sorted(models)}", model)
        steps = r.sequence(per_step, f"{field}.{model}")
        if len(steps) != horizon:
            raise r.fail(
                f"{field}.{model}", f"a list of {horizon} integers (one per step)", f"{len(steps)} values"
            )
        forecast[model] = tuple(
            r.integer(v, f"{field}.{model}[{t}]", minimum=0, maximum=models[model])
            for t, v in enumerate(steps)
        )
    return forecast
