"""One palette for every figure: an app keeps its colour from figure to figure, no two apps
share one, and no batch job takes an app's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import matplotlib
import pytest
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from contract.scenario_io import load_scenario
from gpuplan import report_plots
from gpuplan.render import app_colours, job_colours

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[2]


def test_an_app_keeps_its_colour_whatever_else_the_figure_shows() -> None:
    apps = ["search", "chat", "vision"]
    alone = job_colours(["chat"], apps)
    crowded = job_colours([f"job-{i}" for i in range(45)] + ["vision", "chat", "search"], apps)
    reordered = job_colours(["search", "job-1", "chat"], list(reversed(apps)))
    assert alone["chat"] == crowded["chat"] == reordered["chat"] == app_colours(apps)["chat"]
    assert len({to_rgba(crowded[app]) for app in apps}) == len(apps)
    batch = {to_rgba(crowded[f"job-{i}"]) for i in range(45)}
    assert batch.isdisjoint({to_rgba(crowded[app]) for app in apps})


@pytest.mark.parametrize("count", [1, 10, 11, 40])
def test_no_two_apps_share_a_colour(count: int) -> None:
    colours = app_colours([f"app-{i:02d}" for i in range(count)])
    assert len({to_rgba(c) for c in colours.values()}) == count


def _cell_colours(fig: Any) -> dict[tuple[int, int], tuple[float, ...]]:
    """(step, GPU) -> the face colour of the grid cell drawn there."""
    return {
        (round(p.get_x()), round(p.get_y())): tuple(p.get_facecolor())
        for ax in fig.axes
        for p in ax.patches
        if isinstance(p, Rectangle) and p.get_width() == 1 and p.get_height() == 1
    }


def test_the_idle_windows_and_commits_figures_colour_each_app_alike(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    drawn: list[Any] = []
    monkeypatch.setattr(report_plots, "_save", lambda fig, path: drawn.append(fig) or path)
    instance = load_scenario(ROOT / "benchmarks" / "2-realtime-contention.json")
    apps = sorted(job.id for job in instance.realtime_jobs)
    batch = [job.id for job in instance.batch_jobs]
    assert len(apps) >= 2 and batch
    steps = instance.horizon_steps
    # The plan: app k on GPU k, batch jobs on the other GPUs (in one order) ...
    plan = [[apps[g] if g < len(apps) else batch[g % len(batch)]] * steps for g in range(instance.gpus)]
    start = datetime(2026, 12, 1, tzinfo=UTC)
    report_plots.draw_idle_windows(
        instance, plan, start, report=None, bookable=[], title="idle", path=tmp_path / "a.png"
    )
    # ... the commits: the apps swapped and only some batch jobs, in another order.
    hours = [start + timedelta(hours=h) for h in range(3)]
    commits = [[apps[len(apps) - 1 - g] if g < len(apps) else batch[-1]] * 3 for g in range(instance.gpus)]
    report_plots.draw_commits(
        commits, hours, [0] * 3, realtime=set(apps), title="commits", path=tmp_path / "b.png"
    )
    idle, committed = (_cell_colours(fig) for fig in drawn)
    for k, app in enumerate(apps):
        assert idle[(0, k)] == committed[(0, len(apps) - 1 - k)], app
    assert len({idle[(0, k)] for k in range(len(apps))}) == len(apps)
    assert idle[(0, 0)] == to_rgba(app_colours(apps)[apps[0]])
