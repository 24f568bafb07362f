"""What the dashboard shows, as plain data: the plan grid with clock times, idle windows,
coverage per app, utilization, the queue, the last commits and the daemon's health.

One row per GPU up to :data:`MAX_GPU_ROWS`; beyond it, one row per node of
:data:`NODE_GPUS` GPUs whose cells say how many of its GPUs are busy, and with what, so
that 256 GPUs stay readable on one screen. On a cluster of several pools the grid is one
band per pool, each opened by a heading row (its name, GPU model and GPUs), its nodes counted
from the pool's first GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from contract.errors import InputError
from contract.records import JobState
from contract.scenario import DEFAULT_HALF_LIFE_DAYS, Pool, Team
from gpuplan.app.core.bridge import floor_hour, hour_allocation
from gpuplan.app.core.team_use import history_since
from gpuplan.app.views.health import Health
from gpuplan.app.views.report_queries import coverage_query, idle_query, stored_run, utilization_query
from gpuplan.app.views.reports import app_needs, commit_rows, planned_counts
from gpuplan.app.views.status import run_summary, status
from gpuplan.app.views.teams import NO_TEAM_COLOUR, team_colours
from storage.store import Store

MAX_GPU_ROWS = 64
MAX_QUEUE_ROWS = 40
NODE_GPUS = 8
LAST_COMMITS = 12
LAST_HOURS = 24
CLASS_NAMES = {"rt": "real-time", "run": "running", "plan": "planned", "idle": "idle", "down": "down"}


@dataclass(frozen=True)
class Cell:
    """One grid cell: its job (or what fills it) and its class: ``run`` (running now),
    ``plan`` (planned), ``rt`` (real-time), ``idle`` or ``down``; ``share`` for node rows."""

    text: str
    css: str
    title: str
    share: float = 1.0
    down: int = 0  # node rows: how many of its GPUs are down
    #: With teams in the config, the colour of its batch job's team (``team_colours``; work of
    #: no team: ``NO_TEAM_COLOUR``); None: no teams, or a cell of no batch job.
    colour: str | None = None


@dataclass(frozen=True)
class GridRow:
    label: str
    cells: list[Cell]
    block_start: bool  # the first row of a node: the page draws a rule above it
    pool: str | None = None  # its pool's name, on a cluster of several pools
    pool_heading: str | None = None  # the first row of a pool's band: the band's heading


def _pool_heading(pool: Pool) -> str:
    last = pool.end_gpu - 1
    return f"pool {pool.name}: {pool.gpu_model}, {pool.gpus} GPUs ({pool.first_gpu}-{last})"


def _gpu_cell(
    job: str | None,
    down: bool,
    running: set[str],
    realtime: set[str],
    when: str,
    *,
    teams: Mapping[str, tuple[str, str]] | None = None,
) -> Cell:
    if down:
        return Cell("×", "down", f"{when}: down")
    if job is None:
        return Cell("", "idle", f"{when}: idle")
    css = "rt" if job in realtime else ("run" if job in running else "plan")
    if teams is None or css == "rt":
        return Cell(job, css, f"{when}: {job} ({CLASS_NAMES[css]})")
    team, colour = teams.get(job, ("none", NO_TEAM_COLOUR))
    return Cell(job, css, f"{when}: {job} ({CLASS_NAMES[css]}, team {team})", colour=colour)


def _node_cell(column: list[Cell], when: str) -> Cell:
    down = sum(c.css == "down" for c in column)
    busy = [c for c in column if c.css not in ("idle", "down")]
    marks = f" ↓{down}" if down else ""
    if not busy:
        all_down = down == len(column)
        css = "down" if all_down else "idle"
        return Cell("×" if all_down else marks.strip(), css, f"{when}: idle, {down} down", 0.0, down)
    kinds = Counter(c.css for c in busy)
    css = kinds.most_common(1)[0][0]
    jobs = Counter(c.text for c in busy)
    colours = Counter(c.colour for c in busy if c.colour is not None)
    title = (
        f"{when}: "
        + ", ".join(f"{job} ×{n}" for job, n in jobs.most_common())
        + (f"; {down} down" if down else "")
    )
    colour = colours.most_common(1)[0][0] if colours else None  # the team holding most of it
    return Cell(
        f"{len(busy)}/{len(column)}{marks}",
        css,
        title,
        share=len(busy) / len(column),
        down=down,
        colour=colour,
    )


def grid_rows(
    grid: list[list[str | None]],
    down_masks: list[int],
    times: list[datetime],
    running: set[str],
    realtime: set[str],
    *,
    pools: Sequence[Pool] = (),
    teams: Mapping[str, tuple[str, str]] | None = None,
) -> tuple[list[GridRow], bool]:
    """Rows of the plan grid (per GPU, or per node beyond MAX_GPU_ROWS) and whether aggregated;
    on several ``pools`` (the plan's), one band of rows per pool. ``teams`` (with teams in the
    config, :func:`job_teams`): each batch cell coloured by its job's team."""
    whens = [f"{t:%a %H:%M}" for t in times]
    per_gpu = [
        [
            _gpu_cell(cell, bool(down_masks[t] >> gpu & 1), running, realtime, whens[t], teams=teams)
            for t, cell in enumerate(row)
        ]
        for gpu, row in enumerate(grid)
    ]
    bands = list(pools) if len(pools) > 1 else [Pool("", "", len(grid))]
    aggregated = len(grid) > MAX_GPU_ROWS
    rows = [row for band in bands for row in _band_rows(band, per_gpu, whens, aggregated=aggregated)]
    return rows, aggregated


def _band_rows(band: Pool, per_gpu: list[list[Cell]], whens: list[str], *, aggregated: bool) -> list[GridRow]:
    """The rows of one pool's GPUs (a nameless band: the whole grid of a one-pool cluster),
    its first row carrying the band's heading."""
    name = band.name or None
    heading = None if name is None else _pool_heading(band)
    if not aggregated:
        return [
            GridRow(
                f"GPU {gpu}",
                per_gpu[gpu],
                (gpu - band.first_gpu) % NODE_GPUS == 0,
                name,
                heading if gpu == band.first_gpu else None,
            )
            for gpu in range(band.first_gpu, band.end_gpu)
        ]
    rows = []
    for first in range(band.first_gpu, band.end_gpu, NODE_GPUS):
        members = per_gpu[first : min(first + NODE_GPUS, band.end_gpu)]
        cells = [_node_cell([m[t] for m in members], when) for t, when in enumerate(whens)]
        label = f"node {(first - band.first_gpu) // NODE_GPUS} (GPUs {first}-{first + len(members) - 1})"
        label = label if name is None else f"{name} {label}"
        rows.append(GridRow(label, cells, True, name, heading if first == band.first_gpu else None))
    return rows


def with_current_hour(
    store: Store,
    now: datetime,
    grid: list[list[str | None]],
    down_masks: list[int],
    times: list[datetime],
) -> tuple[list[list[str | None]], list[int], list[datetime]]:
    """The grid with the hour in progress put in front when the plan starts after it (a cycle
    that committed the hour plans from the next one): its commit with the amendments so far,
    so that what runs now is in the grid, not only in the Running table."""
    hour = floor_hour(now)
    if not times or times[0] <= hour or times[0] - hour != timedelta(hours=1):
        return grid, down_masks, times
    held = hour_allocation(store, hour)
    if held is None:
        return grid, down_masks, times
    owner = {gpu: a.job for a in held.assignments for gpu in a.gpus}
    rows = [[owner.get(gpu), *row] for gpu, row in enumerate(grid)]
    return rows, [down_masks[0] if down_masks else 0, *down_masks], [hour, *times]


def job_teams(
    store: Store, now: datetime, teams: Sequence[Team], half_life_days: float
) -> dict[str, tuple[str, str]]:
    """Each job the grid may show of a team of ``teams`` -> (its team, the team's colour): the
    queued and running jobs, and those finished that the teams' use reads."""
    colours = team_colours(teams)
    jobs = [
        *store.jobs([JobState.QUEUED, JobState.RUNNING]),
        *store.jobs([JobState.DONE], submitted_since=history_since(now, half_life_days)),
    ]
    found = {}
    for job in jobs:
        if job.team is not None and job.team in colours:
            found[job.id] = (job.team, colours[job.team])
    return found


def _safe(build: Any) -> tuple[Any, str | None]:
    """A panel's data, or the message that says why there is none yet."""
    try:
        return build(), None
    except InputError as error:
        return None, str(error)


def dashboard(
    store: Store,
    now: datetime,
    health: Health,
    pools: Sequence[Pool] = (),
    *,
    teams: Sequence[Team] = (),
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS,
) -> dict[str, Any]:
    """Everything the page shows, built from the store as the reports build it (``pools``: the
    config's, for the status; the grid and the idle windows show the plan's own pools).
    With the config's ``teams``, the status's teams, the grid's work coloured by team and the
    legend of those colours (``team_legend``; None without teams)."""
    found, problem = _safe(lambda: stored_run(store, "latest"))
    now_status = status(store, now, pools=pools, teams=teams, half_life_days=half_life_days)
    colours = team_colours(teams)
    page: dict[str, Any] = {
        "now": now,
        "health": health.as_dict(),
        "status": now_status.as_dict(),
        "max_queue_rows": MAX_QUEUE_ROWS,
        "no_run": problem,
        "team_legend": [{"team": name, "colour": colour} for name, colour in colours.items()]
        + [{"team": "no team", "colour": NO_TEAM_COLOUR}]
        if teams
        else None,
    }
    if found is not None:
        run, instance = found
        step = timedelta(minutes=instance.step_minutes)
        times = [run.start + t * step for t in range(instance.horizon_steps)]
        running = {job.id for job in store.jobs([JobState.RUNNING])}
        realtime = {job.id for job in instance.realtime_jobs}
        grid, down, grid_times = with_current_hour(store, now, run.grid, list(instance.down_masks), times)
        by_team = job_teams(store, now, teams, half_life_days) if teams else None
        rows, aggregated = grid_rows(
            grid, down, grid_times, running, realtime, pools=instance.pools, teams=by_team
        )
        page.update(
            run=run_summary(run),
            gpus=instance.gpus,
            times=times,
            grid_times=grid_times,
            current_hour=len(grid_times) > len(times),
            rows=rows,
            aggregated=aggregated,
            pooled=instance.pooled,
            down_gpus=sorted(
                {g for mask in instance.down_masks for g in range(instance.gpus) if mask >> g & 1}
            ),
        )
        idle, page["idle_problem"] = _safe(lambda: idle_query(store, "latest"))
        page["idle"] = None if idle is None or idle.windows is None else idle.windows
        coverage, page["coverage_problem"] = _safe(lambda: coverage_query(store, "latest"))
        page["coverage_rows"] = [] if coverage is None else list(coverage[1].rows)
        needs, page["needs_problem"] = _safe(lambda: app_needs(run, instance, store.apps(), 0.9))
        planned = planned_counts(instance, run.grid)
        pool_of = {job.id: instance.realtime_pool(job).name for job in instance.realtime_jobs}
        page["coverage"] = [
            {
                "app": app,
                "need": need,
                "planned": planned.get(app, [0] * len(need)),
                "pool": pool_of.get(app) if instance.pooled else None,
            }
            for app, need in (needs or {}).items()
        ]
    util, page["util_problem"] = _safe(lambda: utilization_query(store))
    page["utilization"] = [] if util is None else list(util.rows)[-LAST_HOURS:]
    page["busy_share"] = None if util is None else util.busy_share
    commits = store.commits(now - timedelta(hours=LAST_COMMITS), None)
    page["commits"] = commit_rows(commits)[-4 * LAST_COMMITS :]
    return page
