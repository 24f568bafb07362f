"""The reports' figures (matplotlib, headless; imported only when ``--png`` is given).

Each figure has a title saying what it shows, time axes in wall-clock UTC and a legend.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator

from contract.scenario import Cell, Instance
from gpuplan.app.views.reports import (
    BookableStart,
    CoverageReport,
    IdleWindow,
    IdleWindows,
    NeedBasis,
    UtilizationReport,
)
from gpuplan.app.views.teams import TeamReport
from gpuplan.render import app_colours, draw_grid, job_colours, legend_handles
from gpuplan.table import count_of

KIND_COLOURS = {
    "training": "tab:blue",
    "batch_inference": "tab:orange",
    "quantization": "tab:purple",
    "realtime": "tab:green",
    "other": "tab:brown",
    "idle": "0.9",
    "down": "0.55",
}
OUTLINE = "crimson"
#: Shortfall shading in the coverage figure: grey, so that no app's colour means two things.
SHORT_PLANNED: dict[str, Any] = {"facecolor": "0.5", "alpha": 0.25}
SHORT_PAST: dict[str, Any] = {"facecolor": "0.85", "alpha": 0.6, "hatch": "..", "edgecolor": "0.5"}


def _wrapped(title: str, width: int = 140) -> str:
    return "\n".join(textwrap.wrap(title, width))


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _label_columns(ax: Any, times: Sequence[datetime]) -> None:
    """Wall-clock labels under grid columns (column t spans [t, t + 1), labelled at its start)."""
    every = max(1, len(times) // 12)
    ticks = list(range(0, len(times), every))
    labels = []
    previous_day = None
    for t in ticks:
        day = times[t].date()
        labels.append(times[t].strftime("%H:%M\n%b %d" if day != previous_day else "%H:%M"))
        previous_day = day
    ax.set_xticks(ticks, labels, fontsize=8)
    ax.set_xlabel("time (UTC)")


def _time_axis(ax: Any, origin: datetime, first: float, last: float) -> None:
    """An x axis over ``[first, last]`` hours since ``origin``, labelled in wall-clock UTC.

    The date is shown at the axis start and at each midnight.
    """

    def label(x: float, _position: object) -> str:
        at = origin + timedelta(hours=x)
        dated = x == first or (at.hour == 0 and at.minute == 0)
        return at.strftime("%H:%M\n%b %d" if dated else "%H:%M")

    ax.set_xlim(first, last)
    every = next((h for h in (1, 2, 3, 6, 12, 24, 48) if (last - first) / h <= 13), 168)
    ax.xaxis.set_major_locator(MultipleLocator(every, offset=first % every))
    ax.xaxis.set_major_formatter(FuncFormatter(label))
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("time (UTC)")


def _hours(times: Sequence[datetime], origin: datetime) -> list[float]:
    return [(t - origin) / timedelta(hours=1) for t in times]


def _grid_figure(instance: Instance, rows: int) -> tuple[Any, Any]:
    height = max(3.0, 0.22 * rows + 1.6)
    return plt.subplots(figsize=(13, height), constrained_layout=True)


def _pool_bands(ax: Any, instance: Instance) -> None:
    """On a cluster of several pools: a rule between two pools and each pool's name, model
    and GPUs at the left of its rows (a block never crosses a rule)."""
    if not instance.pooled:
        return
    for pool in instance.pools:
        if pool.first_gpu:
            ax.axhline(pool.first_gpu, color="black", lw=2.2, zorder=4)
        ax.annotate(
            f" pool {pool.name} ({pool.gpu_model} x{pool.gpus})",
            (0, pool.first_gpu),
            xycoords="data",
            fontsize=8,
            fontweight="bold",
            va="top",
            zorder=5,
            bbox={"facecolor": "white", "alpha": 0.8, "lw": 0, "pad": 1},
        )


def draw_idle_windows(
    instance: Instance,
    grid: Sequence[Sequence[Cell]],
    start: datetime,
    *,
    report: IdleWindows | None,
    bookable: Sequence[BookableStart],
    title: str,
    path: Path,
) -> Path:
    """The plan grid with each idle window (or bookable block) outlined; free cells in no window dotted."""
    fig, ax = _grid_figure(instance, instance.gpus)
    job_ids = list(instance.jobs_by_id)
    realtime_ids = {job.id for job in instance.realtime_jobs}
    colours = job_colours(job_ids, realtime_ids)
    draw_grid(ax, grid, instance.down_masks, colours, realtime_ids)
    step = timedelta(minutes=instance.step_minutes)

    def column(at: datetime) -> float:
        return (at - start) / step

    windows: Sequence[IdleWindow | BookableStart] = report.rows if report is not None else bookable
    listed = set()
    for w in windows:
        s, e = column(w.start), min(column(w.end), instance.horizon_steps)
        ax.add_patch(
            Rectangle((s, w.first_gpu), e - s, w.gpus, fill=False, edgecolor=OUTLINE, lw=1.8, zorder=3)
        )
        listed |= {(g, t) for g in range(w.first_gpu, w.first_gpu + w.gpus) for t in range(int(s), int(e))}
    # Free cells no listed window covers, so that nothing idle is hidden (idle windows only;
    # with a pool asked for, in that pool).
    shown = (
        instance.pools if report is None or report.pool is None else (instance.pools_by_name[report.pool],)
    )
    unlisted = [
        (t + 0.5, g + 0.5)
        for g, row in enumerate(grid)
        for t, cell in enumerate(row)
        if report is not None
        and any(p.first_gpu <= g < p.end_gpu for p in shown)
        and cell is None
        and not instance.down_masks[t] >> g & 1
        and (g, t) not in listed
    ]
    if unlisted:
        ax.scatter(*zip(*unlisted, strict=True), s=6, color="0.35", zorder=3)
    _pool_bands(ax, instance)
    _label_columns(ax, [start + t * step for t in range(instance.horizon_steps)])
    ax.set_title(_wrapped(title), fontsize=10)
    handles = legend_handles(job_ids, colours, realtime_ids)
    outline = "bookable block" if report is None else "idle window (aligned block)"
    handles.append(Patch(fill=False, edgecolor=OUTLINE, lw=1.8, label=outline))
    if unlisted:
        handles.append(Line2D([], [], marker=".", color="0.35", lw=0, label="free, in no listed window"))
    handles.append(Patch(facecolor="white", edgecolor="0.7", label="free"))
    fig.legend(handles=handles, loc="outside right upper", fontsize=7)
    return _save(fig, path)


def _steps(ax: Any, xs: Sequence[float], values: Sequence[float], width: float, **style: Any) -> None:
    """A step line over ``[xs[0], xs[-1] + width)``, each value held for its step."""
    if xs:
        ax.step([*xs, xs[-1] + width], [*values, values[-1]], where="post", **style)


def draw_coverage(
    instance: Instance,
    start: datetime,
    report: CoverageReport,
    *,
    planned: dict[str, list[int]],
    needs: dict[str, dict[float, list[int]]],
    title: str,
    path: Path,
) -> Path:
    """Per app (of ``needs``): planned GPUs against its P50 and P90 need, shortfall hours
    shaded; on a cluster of several pools each panel names the app's pool.

    ``needs[app][q]``: the need per step at quantile q. Past committed hours
    (``report.past``) are drawn left of the plan's start against their actual need.
    """
    shown = {job.id: job for job in instance.realtime_jobs if job.id in needs}
    apps = list(shown)
    panels = max(1, len(apps))
    fig, axes = plt.subplots(
        panels, 1, figsize=(13, 2.8 * panels + 0.6), squeeze=False, constrained_layout=True
    )
    step_hours = instance.step_minutes / 60
    xs = [t * step_hours for t in range(instance.horizon_steps)]
    styles = {0.5: {"color": "0.45", "ls": ":"}, 0.9: {"color": "0.1", "ls": "--"}}
    colours = app_colours(apps)
    for ax, app in zip(axes[:, 0], apps, strict=False):
        planned_gpus = planned.get(app, [0] * len(xs))
        _steps(ax, xs, planned_gpus, step_hours, color=colours[app], lw=2.2, label="planned GPUs")
        for q, need in sorted(needs.get(app, {}).items()):
            style = styles.get(q, {"color": "0.3", "ls": "-."})
            _steps(ax, xs, need, step_hours, lw=1.4, label=f"P{round(q * 100)} need", **style)
        past = [h for h in report.past if h.app == app]
        if past:
            past_xs = _hours([h.hour for h in past], start)
            committed = [h.committed_gpus for h in past]
            _steps(ax, past_xs, committed, 1.0, color="0.45", lw=2, label="committed GPUs (past)")
            actual = [h.needed_gpus for h in past]
            _steps(ax, past_xs, actual, 1.0, color="0.1", lw=1.2, label="actual need (past)")
            ax.axvline(0, color="0.3", lw=1)
            ax.annotate(" plan start", (0, 0.97), xycoords=("data", "axes fraction"), fontsize=7, va="top")
        shortfall = [r for r in report.rows if r.app == app]
        for row in shortfall:
            x = _hours([row.hour], start)[0]
            width = step_hours if row.basis is NeedBasis.FORECAST else 1.0
            shade = SHORT_PLANNED if row.basis is NeedBasis.FORECAST else SHORT_PAST
            ax.axvspan(x, x + width, lw=0, **shade)
        reasons = sorted({r.reason.value for r in shortfall})
        pool = instance.realtime_pool(shown[app]) if instance.pooled else None
        ax.set_title(
            ("" if pool is None else f"pool {pool.name} ({pool.gpu_model} x{pool.gpus}): ")
            + f"{app}: {count_of(len(shortfall), 'short hour')} at P{round(report.quantile * 100)}"
            + (f" ({', '.join(reasons)})" if reasons else ""),
            fontsize=9,
        )
        ax.set_ylabel("GPUs")
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        _time_axis(ax, start, min([0.0, *_hours([h.hour for h in past], start)]), xs[-1] + step_hours)
        handles, _ = ax.get_legend_handles_labels()
        handles.append(Patch(**SHORT_PLANNED, label="planned hour short of need"))
        if past:
            handles.append(Patch(**SHORT_PAST, label="committed hour short of actual"))
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(_wrapped(title), fontsize=10)
    return _save(fig, path)


def draw_utilization(report: UtilizationReport, cluster_gpus: int, title: str, path: Path) -> Path:
    """Stacked GPUs per committed hour by kind, then idle and down."""
    fig, ax = plt.subplots(figsize=(13, 4.2), constrained_layout=True)
    origin = report.rows[0].hour
    xs = _hours([row.hour for row in report.rows], origin)
    bottom = [0] * len(xs)
    for column, colour in KIND_COLOURS.items():
        values = [getattr(row, column) for row in report.rows]
        if not any(values):
            continue
        label = column.replace("_", " ")
        ax.bar(xs, values, width=0.95, bottom=bottom, color=colour, label=label, align="edge")
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylim(0, cluster_gpus)
    ax.set_ylabel("GPUs")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    _time_axis(ax, origin, 0.0, xs[-1] + 1)
    ax.set_title(_wrapped(title), fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def draw_commits(
    grid: Sequence[Sequence[Cell]],
    hours: Sequence[datetime],
    down_masks: Sequence[int],
    *,
    realtime: set[str],
    title: str,
    path: Path,
) -> Path:
    """Committed hours as a grid: one column per committed hour."""
    fig, ax = plt.subplots(figsize=(13, max(3.0, 0.22 * len(grid) + 1.6)), constrained_layout=True)
    job_ids = sorted({cell for row in grid for cell in row if cell is not None})
    colours = job_colours(job_ids, realtime)
    draw_grid(ax, grid, down_masks, colours, realtime)
    _label_columns(ax, hours)
    ax.set_title(_wrapped(title), fontsize=10)
    fig.legend(handles=legend_handles(job_ids, colours, realtime), loc="outside right upper", fontsize=7)
    return _save(fig, path)


def draw_teams(report: TeamReport, colours: dict[str, str], title: str, path: Path) -> Path:
    """Per GPU model, each team's GPU-hours in the window (a bar in its colour) against its
    entitlement (a black outline of its quota x the window's hours)."""
    models = list(dict.fromkeys(row.gpu_model for row in report.rows))
    teams = list(dict.fromkeys(row.team for row in report.rows))
    fig, axes = plt.subplots(
        1, len(models), figsize=(4.5 * len(models) + 2, 4.2), constrained_layout=True, squeeze=False
    )
    for ax, model in zip(axes[0], models, strict=True):
        rows = [row for row in report.rows if row.gpu_model == model]
        xs = list(range(len(rows)))
        ax.bar(xs, [row.gpu_hours for row in rows], color=[colours[row.team] for row in rows], width=0.7)
        ax.bar(
            xs,
            [row.entitled_gpu_hours for row in rows],
            width=0.8,
            fill=False,
            edgecolor="black",
            linewidth=1.2,
        )
        ax.set_xticks(xs, [row.team for row in rows], fontsize=8)
        ax.set_title(model, fontsize=9)
        ax.set_ylabel("GPU-hours")
    handles = [Patch(facecolor=colours[team], label=team) for team in teams]
    handles.append(Patch(facecolor="none", edgecolor="black", label="entitlement (quota x hours)"))
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    fig.suptitle(_wrapped(title), fontsize=10)
    return _save(fig, path)
