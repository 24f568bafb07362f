"""Drawing plans: GPUs as rows, steps as columns, a colour per job (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from contract.files import atomic_write, check_writable
from contract.scenario import Cell, Instance
from scheduler.policies import Plan

DOWN_COLOUR = "0.6"


#: The real-time apps' colours, the one palette of every figure: strong colours, each app
#: taking the one at its place among the cluster's apps sorted by name, so that an app has
#: the same colour in every figure and no two apps share one (:func:`app_colours`).
APP_COLOURS = (
    "tab:red",
    "tab:blue",
    "tab:green",
    "tab:orange",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "black",
)
#: Batch jobs: light colours (no app's), in the order given, repeating after 30.
BATCH_CMAPS = (("tab20", range(1, 20, 2)), ("Set3", range(12)), ("Pastel2", range(8)))


def app_colours(app_ids: Collection[str]) -> dict[str, Any]:
    """Each app's colour, by its place among ``app_ids`` sorted by name: :data:`APP_COLOURS`,
    or for more apps than it holds, as many hues spread evenly (still one per app)."""
    import matplotlib.pyplot as plt

    names = sorted(set(app_ids))
    if len(names) <= len(APP_COLOURS):
        return dict(zip(names, APP_COLOURS, strict=False))
    hues = plt.get_cmap("hsv")
    return {name: hues(i / len(names)) for i, name in enumerate(names)}


def job_colours(job_ids: Sequence[str], apps: Collection[str] = ()) -> dict[str, Any]:
    """The colours of a figure's jobs: the real-time ``apps`` (pass all the cluster's, so each
    keeps its colour from figure to figure) from :func:`app_colours`, the other jobs light
    colours in the order given."""
    import matplotlib.pyplot as plt

    colours = app_colours(apps)
    light = [plt.get_cmap(name)(i) for name, indices in BATCH_CMAPS for i in indices]
    batch = [job for job in dict.fromkeys(job_ids) if job not in colours]
    colours.update((job, light[i % len(light)]) for i, job in enumerate(batch))
    return colours


def draw_grid(
    ax: Any,
    grid: Sequence[Sequence[Cell]],
    down_masks: Sequence[int],
    colours: dict[str, Any],
    hatched: Collection[str] = (),
) -> None:
    """Cells of ``grid`` on ``ax`` (x: step, y: GPU 0 on top); down cells grey, ``hatched`` jobs hatched."""
    from matplotlib.patches import Rectangle

    steps = len(grid[0]) if grid else 0
    for gpu, row in enumerate(grid):
        for t, cell in enumerate(row):
            if down_masks[t] >> gpu & 1:
                ax.add_patch(Rectangle((t, gpu), 1, 1, facecolor=DOWN_COLOUR, edgecolor="white", lw=0.3))
            elif cell is not None:
                ax.add_patch(
                    Rectangle(
                        (t, gpu),
                        1,
                        1,
                        facecolor=colours.get(cell, "0.3"),
                        edgecolor="white",
                        hatch="///" if cell in hatched else None,
                        lw=0.3,
                    )
                )
    ax.set_xlim(0, steps)
    ax.set_ylim(len(grid), 0)
    ax.set_ylabel("GPU")
    if len(grid) <= 32:
        ax.set_yticks([g + 0.5 for g in range(len(grid))], [str(g) for g in range(len(grid))], fontsize=7)


def legend_handles(job_ids: Sequence[str], colours: dict[str, Any], hatched: Collection[str]) -> list[Any]:
    """Legend entries for the jobs (real-time ones hatched) and for down cells."""
    from matplotlib.patches import Patch

    return [
        Patch(
            facecolor=colours[j],
            hatch="///" if j in hatched else None,
            label=j + (" (real-time)" if j in hatched else ""),
        )
        for j in job_ids
    ] + [Patch(facecolor=DOWN_COLOUR, label="down")]


def image_suffixes() -> dict[str, str]:
    """File suffixes matplotlib can write (``.png``, ``.svg``, ``.pdf``, ...) -> format name."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return {f".{ext}": name for ext, name in FigureCanvasAgg.get_supported_filetypes().items()}


def check_image_path(path: Path, what: str) -> None:
    """Refuse, before any work, an image path that is not writable or whose suffix names no format."""
    check_writable(path, what, suffixes=image_suffixes())


def draw_plans(instance: Instance, plans: Sequence[Plan], path: Path, what: str = "--png") -> Path:
    """One panel per plan, stacked; real-time jobs hatched, down cells grey, metrics in titles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    job_ids = list(instance.jobs_by_id)
    realtime_ids = {job.id for job in instance.realtime_jobs}
    colours = job_colours(job_ids, realtime_ids)
    height = max(2.5, 0.22 * instance.gpus + 1.2)
    fig, axes = plt.subplots(
        len(plans), 1, figsize=(12, height * len(plans)), squeeze=False, constrained_layout=True
    )
    for ax, plan in zip(axes[:, 0], plans, strict=True):
        draw_grid(ax, plan.grid, instance.down_masks, colours, realtime_ids)
        m = plan.metrics
        ax.set_title(
            f"{plan.scenario} · {plan.policy}: utilization {m.utilization:.1%}, value {m.value:,.0f}, "
            f"objective {m.objective:,.0f}, rt coverage {m.rt_coverage:.1%}, "
            f"completed {m.completed}, unscheduled {m.unscheduled}",
            fontsize=9,
        )
        ax.set_xlabel(f"step ({instance.step_minutes} min)")
    fig.legend(handles=legend_handles(job_ids, colours, realtime_ids), loc="outside right upper", fontsize=7)
    try:
        with atomic_write(path, what) as stream:
            fig.savefig(stream, format=path.suffix.lower().removeprefix(".") or "png", dpi=110)
    finally:
        plt.close(fig)
    return path
