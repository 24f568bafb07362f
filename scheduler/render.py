"""Drawing plans: GPUs as rows, steps as columns, a colour per job (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

from scheduler.model import Grid, Instance
from scheduler.policies import Plan


def draw_plans(instance: Instance, plans: Sequence[Plan], path: Path) -> Path:
    """One panel per plan, stacked; real-time jobs hatched, down cells grey, metrics in titles."""
    panels = []
    for plan in plans:
        m = plan.metrics
        title = (
            f"{plan.scenario} · {plan.policy}: utilization {m.utilization:.1%}, value {m.value:,.0f}, "
            f"objective {m.objective:,.0f}, rt coverage {m.rt_coverage:.1%}, "
            f"completed {m.completed}, unscheduled {m.unscheduled}"
        )
        panels.append((title, plan.grid))
    return draw_grids(
        panels,
        path,
        job_ids=list(instance.jobs_by_id),
        realtime_ids={job.id for job in instance.realtime_jobs},
        down_masks=instance.down_masks,
        step_label=f"step ({instance.step_minutes} min)",
    )


def draw_grids(
    panels: Sequence[tuple[str, Grid]],
    path: Path,
    *,
    job_ids: Sequence[str],
    realtime_ids: Collection[str],
    down_masks: Sequence[int] = (),
    step_label: str = "step",
    legend_ids: Collection[str] | None = None,
) -> Path:
    """One titled grid per panel, stacked; ``legend_ids`` limits the legend (default: every job)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    cmap = plt.get_cmap("tab20")
    colours = {job_id: cmap(i % 20) for i, job_id in enumerate(job_ids)}
    gpus = len(panels[0][1]) if panels else 0
    steps = len(panels[0][1][0]) if gpus else 0
    height = max(2.5, 0.22 * min(gpus, 64) + 1.2)
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(12, height * len(panels)), squeeze=False, constrained_layout=True
    )
    for ax, (title, grid) in zip(axes[:, 0], panels, strict=True):
        for gpu, row in enumerate(grid):
            for t, cell in enumerate(row):
                if t < len(down_masks) and down_masks[t] >> gpu & 1:
                    ax.add_patch(Rectangle((t, gpu), 1, 1, facecolor="0.6", edgecolor="white", lw=0.3))
                elif cell is not None:
                    ax.add_patch(
                        Rectangle(
                            (t, gpu),
                            1,
                            1,
                            facecolor=colours[cell],
                            edgecolor="white",
                            hatch="///" if cell in realtime_ids else None,
                            lw=0.3,
                        )
                    )
        ax.set_title(title, fontsize=9)
        ax.set_xlim(0, steps)
        ax.set_ylim(gpus, 0)
        ax.set_xlabel(step_label)
        ax.set_ylabel("GPU")
        if gpus <= 32:
            ax.set_yticks([g + 0.5 for g in range(gpus)], [str(g) for g in range(gpus)], fontsize=7)
    shown = [j for j in job_ids if legend_ids is None or j in legend_ids]
    handles = [
        Patch(
            facecolor=colours[j],
            hatch="///" if j in realtime_ids else None,
            label=j + (" (real-time)" if j in realtime_ids else ""),
        )
        for j in shown
    ]
    if any(down_masks):
        handles.append(Patch(facecolor="0.6", label="down"))
    if handles:
        fig.legend(handles=handles, loc="outside right upper", fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
