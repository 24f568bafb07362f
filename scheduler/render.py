"""Drawing plans: GPUs as rows, steps as columns, a colour per job (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from contract.files import atomic_write, check_writable
from scheduler.model import Instance
from scheduler.policies import Plan


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
    from matplotlib.patches import Patch, Rectangle

    job_ids = list(instance.jobs_by_id)
    realtime_ids = {job.id for job in instance.realtime_jobs}
    cmap = plt.get_cmap("tab20")
    colours = {job_id: cmap(i % 20) for i, job_id in enumerate(job_ids)}
    height = max(2.5, 0.22 * instance.gpus + 1.2)
    fig, axes = plt.subplots(
        len(plans), 1, figsize=(12, height * len(plans)), squeeze=False, constrained_layout=True
    )
    for ax, plan in zip(axes[:, 0], plans, strict=True):
        for gpu, row in enumerate(plan.grid):
            for t, cell in enumerate(row):
                if instance.down_masks[t] >> gpu & 1:
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
        m = plan.metrics
        ax.set_title(
            f"{plan.scenario} · {plan.policy}: utilization {m.utilization:.1%}, value {m.value:,.0f}, "
            f"objective {m.objective:,.0f}, rt coverage {m.rt_coverage:.1%}, "
            f"completed {m.completed}, unscheduled {m.unscheduled}",
            fontsize=9,
        )
        ax.set_xlim(0, instance.horizon_steps)
        ax.set_ylim(instance.gpus, 0)
        ax.set_xlabel(f"step ({instance.step_minutes} min)")
        ax.set_ylabel("GPU")
        if instance.gpus <= 32:
            ax.set_yticks(
                [g + 0.5 for g in range(instance.gpus)],
                [str(g) for g in range(instance.gpus)],
                fontsize=7,
            )
    handles = [
        Patch(
            facecolor=colours[j],
            hatch="///" if j in realtime_ids else None,
            label=j + (" (real-time)" if j in realtime_ids else ""),
        )
        for j in job_ids
    ] + [Patch(facecolor="0.6", label="down")]
    fig.legend(handles=handles, loc="outside right upper", fontsize=7)
    try:
        with atomic_write(path, what) as stream:
            fig.savefig(stream, format=path.suffix.lower().removeprefix(".") or "png", dpi=110)
    finally:
        plt.close(fig)
    return path
