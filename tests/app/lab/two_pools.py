"""A small two-pool cluster for the simulation's tests: its config, a workload file, the setup."""

from __future__ import annotations

from pathlib import Path

from forecasting.realtime_training import BUNDLED_TRAFFIC_DIR
from gpuplan.app.core.config import load_config
from gpuplan.app.lab.simulate import Setup, prepare

#: 8 H100 beside 8 A100, one service (`chat`) on the A100s.
CLUSTER = (
    "cluster:\n  pools:\n    - {name: h100, gpu_model: h100, gpus: 8}\n"
    "    - {name: a100, gpu_model: a100, gpus: 8}\n"
    "apps:\n  - {id: chat, priority: 90, swap_cap: 1, peak_gpus: 3, pool: a100,\n"
    f"     traffic: {BUNDLED_TRAFFIC_DIR / 'alibaba_genai_lora_hourly.csv'}}}\n"
)


def write_config(folder: Path, name: str, extra: str = "") -> Path:
    """The two-pool config, with ``extra`` (more top-level keys) after it, written as ``name``."""
    path = folder / name
    path.write_text(CLUSTER + extra, encoding="utf-8")
    return path


def write_workload(folder: Path, header: str, *rows: str) -> Path:
    """A workload CSV of ``header`` and ``rows`` in ``folder``."""
    path = folder / "jobs.csv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def one_day(folder: Path, config: Path, workload: Path) -> Setup:
    """A day's simulation of ``workload`` on the cluster of ``config``."""
    return prepare(
        days=1,
        gpus=0,
        work_dir=folder,
        workload_path=workload,
        config=load_config(config),
        config_source=str(config),
    )
