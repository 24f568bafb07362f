"""Scenarios of the seven benchmark shapes, drawn from a seed, with real-time demand from real traces.

Each real-time service's 24-hour demand is one real day of a bundled traffic series
(ServeGen production LLM traffic, Alibaba's diffusion-model LoRA serving, Microsoft
Philly's active nodes; see training_data/traffic/SOURCES.md), scaled so that its peak
hour needs ``peak`` GPUs. Batch jobs follow the ranges of the brief: training from a few
hours to most of a day on 1 to 8 GPUs, batch inference and quantization from 1 to 6 hours.

``python -m benchmarks.make_scenarios DIR`` writes the seven benchmark files.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from contract.scenario_io import parse_scenario
from scheduler.baselines import fifo
from scheduler.metrics import score
from scheduler.model import build_grid
from scheduler.policies import PolicyName, SolveOptions, plan

# Series with a daily cycle worth scheduling around, and where each day starts (hour 0).
TRAFFIC_SERIES = (
    "servegen_m-large_hourly.csv",
    "servegen_m-mid_hourly.csv",
    "alibaba_genai_lora_hourly.csv",
    "philly_active_nodes_hourly.csv",
)


@dataclass(frozen=True, slots=True)
class Shape:
    """What a benchmark scenario looks like; numbers drawn around these."""

    name: str
    gpus: int
    batch_jobs: int
    realtime_jobs: int
    rt_peak_share: float  # the services' summed peak, as a share of the cluster
    training_share: float  # share of batch jobs that are training (the rest: inference, quantization)
    max_training_hours: int
    load: float  # batch GPU-hours asked, as a share of the GPU-hours real-time leaves free
    uniform_priority: bool = False
    running_share: float = 0.2
    # A rolling re-plan: the horizon starts mid-day, running jobs sit where an earlier plan
    # put them, services hold scattered GPUs, one GPU goes down, and work arrives all day.
    rolling: bool = False
    series: tuple[str, ...] = TRAFFIC_SERIES  # the traces services' days are drawn from
    # The wider generator (issue 20); the defaults draw exactly as the shapes above always did.
    swap_caps: tuple[int, int] = (1, 3)  # each service's swap cap, drawn in this range
    ramp_powers: tuple[float, float] = (1.0, 1.0)  # demand = peak * (traffic / top) ** power: > 1 is steeper
    decays: tuple[float, float] = (0.95, 0.95)
    rt_penalties: tuple[float, float] = (8.0, 8.0)
    down_windows: int = 0  # up to this many GPUs go down for a while (beyond a rolling shape's one)
    # A re-plan this many hours after an earlier plan of the same scenario: what that plan
    # started in those hours runs on, its services hold their last committed GPUs.
    inherit_hours: int = 0


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("mixed-control", 8, 8, 2, 0.6, 0.4, 14, load=1.0),
        Shape("realtime-contention", 8, 4, 4, 0.9, 0.3, 10, load=0.9),
        Shape("training-heavy", 8, 15, 1, 0.35, 0.8, 20, load=1.6),
        Shape("large-mixed", 14, 13, 3, 0.5, 0.45, 18, load=1.1),
        Shape("oversubscribed", 8, 8, 1, 0.4, 0.6, 22, load=2.0),
        Shape("scale-test", 64, 26, 4, 0.35, 0.5, 16, load=0.6),
        Shape("uniform-priority", 14, 13, 3, 0.5, 0.45, 18, load=1.1, uniform_priority=True),
    )
}

# The published comparison's seven scenarios, as their FIFO baseline used them: each
# service's daily peak reserved all day, so a peaky service leaves its trough hours idle.
# Same GPU and job counts as SHAPES; services drawn from the peaky LoRA serving trace
# (peak/mean about 4) where the published FIFO sat near half the cluster, from the flatter
# traces (Philly, ServeGen; peak/mean 1.1-1.5) where it sat near 80%. Each knob was set so
# that the median FIFO utilization over 30 seeds falls within a few points of the target;
# the benchmark file is then the first seed from 2026 on whose FIFO is within 2 points.
PEAKY_SERIES = ("alibaba_genai_lora_hourly.csv",)
FLAT_SERIES = ("philly_active_nodes_hourly.csv", "servegen_m-large_hourly.csv", "servegen_m-mid_hourly.csv")
MIXED_SERIES = ("alibaba_genai_lora_hourly.csv", "servegen_m-large_hourly.csv", "servegen_m-mid_hourly.csv")
PUBLISHED_FIFO_UTILIZATION = {
    "mixed-control": 0.516,
    "realtime-contention": 0.750,
    "training-heavy": 0.536,
    "large-mixed": 0.768,
    "oversubscribed": 0.854,
    "scale-test": 0.449,
    "uniform-priority": 0.768,
}
CALIBRATION_TOLERANCE = 0.02
CALIBRATED_SHAPES: dict[str, Shape] = {
    "mixed-control": replace(SHAPES["mixed-control"], rt_peak_share=0.75, series=PEAKY_SERIES),
    "realtime-contention": replace(SHAPES["realtime-contention"], series=MIXED_SERIES),
    "training-heavy": replace(SHAPES["training-heavy"], rt_peak_share=0.6, series=PEAKY_SERIES),
    "large-mixed": replace(SHAPES["large-mixed"], series=FLAT_SERIES),
    "oversubscribed": replace(SHAPES["oversubscribed"], series=FLAT_SERIES),
    "scale-test": replace(SHAPES["scale-test"], series=PEAKY_SERIES),
    "uniform-priority": replace(SHAPES["uniform-priority"], series=FLAT_SERIES),
}

# Rolling re-plans of the shapes where a plan is hardest to get right (issue 11); sampled by
# ``gpuplan bench --sample``, not among the seven benchmark files.
ROLLING_SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("rolling-mixed", 8, 8, 2, 0.6, 0.4, 14, load=1.1, running_share=0.5, rolling=True),
        Shape("rolling-contention", 8, 5, 4, 0.9, 0.3, 10, load=1.0, running_share=0.5, rolling=True),
        Shape("rolling-training", 8, 12, 1, 0.35, 0.8, 20, load=1.6, running_share=0.5, rolling=True),
        Shape("rolling-large", 14, 13, 3, 0.5, 0.45, 18, load=1.2, running_share=0.5, rolling=True),
        Shape("rolling-64", 64, 26, 4, 0.5, 0.5, 16, load=1.2, running_share=0.4, rolling=True),
    )
}


# The wider, harder generator of issue 20: real-time contention with swap caps 1-4 and steep
# ramps, running jobs and services at step 0, down windows, decay 0.85-0.99, real-time
# penalty 5-10, and re-plans that inherit an earlier plan's committed hours. Its tuning split
# is :data:`TUNING_SEEDS`; the held-out split is frozen in benchmarks/heldout/.


def _wide(shape: Shape) -> Shape:
    return replace(
        shape,
        swap_caps=(1, 4),
        ramp_powers=(1.0, 2.5),
        decays=(0.85, 0.99),
        rt_penalties=(5.0, 10.0),
        down_windows=2,
    )


WIDE_SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        _wide(Shape("wide-contention", 8, 4, 4, 0.95, 0.3, 10, load=1.0, running_share=0.4)),
        _wide(Shape("wide-training", 8, 14, 1, 0.4, 0.85, 20, load=1.7, running_share=0.3)),
        _wide(Shape("wide-oversubscribed", 8, 9, 2, 0.45, 0.6, 22, load=2.2, running_share=0.3)),
        _wide(Shape("wide-large", 14, 13, 3, 0.55, 0.45, 18, load=1.2, running_share=0.3)),
        _wide(Shape("wide-64", 64, 30, 5, 0.5, 0.5, 16, load=1.3, running_share=0.3)),
        _wide(
            Shape("inherited-contention", 8, 5, 4, 0.9, 0.3, 10, load=1.1, running_share=0.3, inherit_hours=2)
        ),
        _wide(
            Shape("inherited-mixed", 14, 12, 3, 0.6, 0.45, 16, load=1.3, running_share=0.3, inherit_hours=3)
        ),
    )
}
# Seeds the tuning of the fast mode reads; the held-out files use seeds outside this range.
TUNING_SEEDS = range(1, 10_000)
HELDOUT_FIRST_SEED = 90_001


@cache
def _series(name: str) -> tuple[float, ...]:
    path = resources.files("training_data") / "traffic" / name
    with resources.as_file(path) as file, file.open() as handle:
        return tuple(float(row["requests"]) for row in csv.DictReader(handle))


def real_day_demand(
    rng: random.Random,
    peak: int,
    horizon: int = 24,
    start_hour: int = 0,
    series_names: tuple[str, ...] = TRAFFIC_SERIES,
) -> list[int]:
    """GPUs per hour for one real day of traffic from ``start_hour`` on, the busiest hour
    needing ``peak`` GPUs."""
    series = _series(rng.choice(series_names))
    days = [series[d * 24 + start_hour : d * 24 + start_hour + horizon] for d in range(len(series) // 24)]
    days = [day for day in days if max(day) > 0 and len(day) == horizon]
    day = rng.choice(days)
    top = max(day)
    return [max(1, math.ceil(peak * x / top - 1e-9)) for x in day]


def _batch_job(rng: random.Random, index: int, shape: Shape, max_block: int) -> dict[str, Any]:
    roll = rng.random()
    if roll < shape.training_share:
        kind, priority = "training", rng.randint(40, 90)
        gpus = rng.choice([g for g in (1, 2, 2, 4, 4, 8) if g <= max_block])
        duration = round(math.exp(rng.uniform(math.log(3), math.log(shape.max_training_hours))))
    elif roll < shape.training_share + (1 - shape.training_share) * 0.6:
        kind, priority = "batch_inference", rng.randint(20, 60)
        gpus = rng.choice([g for g in (1, 2, 4) if g <= max_block])
        duration = rng.randint(1, 6)
    else:
        kind, priority = "quantization", rng.randint(30, 70)
        gpus = rng.choice([g for g in (1, 1, 2) if g <= max_block])
        duration = rng.randint(1, 6)
    job: dict[str, Any] = {
        "id": f"{kind[:5]}-{index:02d}",
        "kind": kind,
        "priority": priority,
        "gpus": gpus,
        "duration": duration,
    }
    if rng.random() < 0.4:
        job["release"] = rng.randint(1, 18 if shape.rolling else 12)
    return job


def _scale_training_to_load(batch: list[dict[str, Any]], target_gpu_hours: float, max_hours: int) -> None:
    """Stretch or shrink training durations (within 2 h .. ``max_hours``) toward the target load."""
    fixed = sum(j["gpus"] * j["duration"] for j in batch if j["kind"] != "training")
    training = sum(j["gpus"] * j["duration"] for j in batch if j["kind"] == "training")
    if not training:
        return
    factor = max(target_gpu_hours - fixed, 0) / training
    for job in batch:
        if job["kind"] == "training":
            job["duration"] = min(max_hours, max(2, round(job["duration"] * factor)))


def generate(shape: Shape, seed: int) -> dict[str, Any]:
    """One scenario document of ``shape``; the same seed gives the same document."""
    if shape.inherit_hours:
        return _inherited(shape, seed)
    return _generate(shape, seed, horizon=24)


def _generate(shape: Shape, seed: int, horizon: int) -> dict[str, Any]:
    rng = random.Random(f"{shape.name}:{seed}")
    # The wider generator's draws come from their own stream, so the first shapes' documents
    # (and the calibrated seven) stay as they were.
    wide = random.Random(f"{shape.name}:{seed}:wide")
    peak_total = max(shape.realtime_jobs, round(shape.rt_peak_share * shape.gpus))
    peaks = [1] * shape.realtime_jobs
    for _ in range(peak_total - shape.realtime_jobs):
        peaks[rng.randrange(shape.realtime_jobs)] += 1
    jobs: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    top = shape.gpus  # real-time running sets stack down from the highest GPU id
    start_hour = rng.randint(8, 16) if shape.rolling else 0
    for k, peak in enumerate(peaks):
        demand = real_day_demand(rng, peak, horizon, start_hour, shape.series)
        if shape.ramp_powers != (1.0, 1.0):
            power = wide.uniform(*shape.ramp_powers)
            demand = [max(1, math.ceil(peak * (d / peak) ** power - 1e-9)) for d in demand]
        jobs.append(
            {
                "id": f"rt-{k}",
                "kind": "realtime",
                "priority": rng.randint(60, 100),
                "swap_cap": rng.randint(*shape.swap_caps),
                "demand": demand,
            }
        )
        running.append({"id": f"rt-{k}", "gpus": list(range(top - demand[0], top))})
        top -= demand[0]
    max_block = 1 << int(math.log2(max(1, shape.gpus // 2)))
    taken = set(range(top, shape.gpus))
    if shape.rolling:
        _scatter_realtime(rng, running, shape.gpus)
        taken = {g for r in running for g in r["gpus"]}
    batch = [_batch_job(rng, i, shape, max_block) for i in range(shape.batch_jobs)]
    rt_gpu_hours = sum(sum(job["demand"]) for job in jobs)
    _scale_training_to_load(
        batch, shape.load * (shape.gpus * horizon - rt_gpu_hours), shape.max_training_hours
    )
    for job in batch:
        jobs.append(job)
        if "release" not in job and job["duration"] > 1 and rng.random() < shape.running_share:
            blocks = [
                a
                for a in range(0, shape.gpus - job["gpus"] + 1, job["gpus"])
                if not taken & set(range(a, a + job["gpus"]))
            ]
            if blocks:
                first = rng.choice(blocks) if shape.rolling else blocks[0]
                taken |= set(range(first, first + job["gpus"]))
                running.append(
                    {
                        "id": job["id"],
                        "gpus": list(range(first, first + job["gpus"])),
                        "remaining": rng.randint(1, job["duration"] - 1),
                    }
                )
    if shape.uniform_priority:
        for job in jobs:
            job["priority"] = 50
    for order, job in enumerate(j for j in jobs if j["kind"] != "realtime"):
        job["order"] = order
    doc: dict[str, Any] = {
        "name": shape.name,
        "gpus": shape.gpus,
        "horizon": horizon,
        "step_minutes": 60,
        "decay": round(wide.uniform(*shape.decays), 3)
        if shape.decays[0] != shape.decays[1]
        else shape.decays[0],
        "rt_penalty": round(wide.uniform(*shape.rt_penalties), 2)
        if shape.rt_penalties[0] != shape.rt_penalties[1]
        else shape.rt_penalties[0],
        "jobs": jobs,
        "running": running,
    }
    # Any GPU no running batch job holds may go down: a service (swap cap >= 1) can always
    # leave one GPU in time.
    batch_held = {g for r in running if "remaining" in r for g in r["gpus"]}
    free = [g for g in range(shape.gpus) if g not in batch_held]
    if shape.rolling and free:
        start = rng.randint(0, horizon // 2)
        doc["down"] = [{"gpu": rng.choice(free), "start": start, "end": rng.randint(start + 2, horizon)}]
    doc["down"] = doc.get("down", []) + _down_windows(wide, shape, free, running, horizon)
    if not doc["down"]:
        del doc["down"]
    return doc


def _down_windows(
    rng: random.Random, shape: Shape, free: list[int], running: list[dict[str, Any]], horizon: int
) -> list[dict[str, Any]]:
    """Up to ``shape.down_windows`` GPUs down for a few hours each (maintenance, a failed
    card), on GPUs no running batch job holds; a service holding one at step 0 must be
    able to leave it in time, so those start late enough for its swap cap."""
    windows: list[dict[str, Any]] = []
    held_by = {g: r["id"] for r in running if "remaining" not in r for g in r["gpus"]}
    for _ in range(rng.randint(0, shape.down_windows)):
        candidates = [g for g in free if g not in {w["gpu"] for w in windows}]
        if not candidates:
            break
        gpu = rng.choice(candidates)
        start = rng.randint(0 if gpu not in held_by else 3, horizon - 2)
        windows.append({"gpu": gpu, "start": start, "end": min(horizon, start + rng.randint(2, 8))})
    return windows


def _inherited(shape: Shape, seed: int) -> dict[str, Any]:
    """A re-plan ``shape.inherit_hours`` hours after the hot path's plan of an earlier
    scenario: the jobs that plan started in those hours run on with what is left, each
    service holds the GPUs of its last committed hour, the rest is queued again (releases
    shifted), demand moves on by those hours, down windows too, and a few new jobs arrive."""

    hours = shape.inherit_hours
    horizon = 24
    whole = _generate(shape, seed, horizon=horizon + hours)
    earlier = {
        **whole,
        "horizon": horizon,
        "jobs": [
            {**j, "demand": j["demand"][:horizon]} if j["kind"] == "realtime" else j for j in whole["jobs"]
        ],
        "down": [{**w, "end": min(w["end"], horizon)} for w in whole.get("down", []) if w["start"] < horizon],
    }
    if not earlier["down"]:
        del earlier["down"]
    instance = parse_scenario(earlier, source=f"{shape.name} seed {seed} (earlier plan)")
    grid = plan(instance, PolicyName.FAST, SolveOptions(wall_clock=False)).grid
    running_before = {r["id"]: r for r in whole["running"]}
    jobs: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    for job in whole["jobs"]:
        if job["kind"] == "realtime":
            jobs.append({**job, "demand": job["demand"][hours : hours + horizon]})
            last = [g for g, row in enumerate(grid) if row[hours - 1] == job["id"]]
            running.append({"id": job["id"], "gpus": last})
            continue
        started = running_before.get(job["id"])
        if started is not None:
            left, gpus = started["remaining"] - hours, started["gpus"]
        else:
            cells = [(t, g) for g, row in enumerate(grid) for t, cell in enumerate(row) if cell == job["id"]]
            start = min((t for t, _ in cells), default=horizon)
            if start >= hours:
                queued = {**job}
                if "release" in queued:
                    queued["release"] = max(0, queued["release"] - hours)
                jobs.append(queued)
                continue
            left, gpus = start + job["duration"] - hours, sorted({g for _, g in cells})
        if left > 0:
            jobs.append(job)
            running.append({"id": job["id"], "gpus": gpus, "remaining": left})
    rng = random.Random(f"{shape.name}:{seed}:arrivals")
    max_block = 1 << int(math.log2(max(1, shape.gpus // 2)))
    for i in range(rng.randint(1, 3)):
        arrival = _batch_job(rng, shape.batch_jobs + i, shape, max_block)
        arrival["id"] = f"new-{arrival['id']}"
        jobs.append(arrival)
    for order, job in enumerate(j for j in jobs if j["kind"] != "realtime"):
        job["order"] = order
    down = [
        {"gpu": w["gpu"], "start": max(0, w["start"] - hours), "end": w["end"] - hours}
        for w in whole.get("down", [])
        if w["end"] > hours
    ]
    doc = {**whole, "horizon": horizon, "jobs": jobs, "running": running}
    doc.pop("down", None)
    if down:
        doc["down"] = down
    parse_scenario(doc, source=f"{shape.name} seed {seed}")  # legal by construction; checked
    return doc


def _scatter_realtime(rng: random.Random, running: list[dict[str, Any]], gpus: int) -> None:
    """Give each service's running set GPUs where an earlier plan may have left them: its
    highest GPUs stay, about a third move to random free GPUs lower down."""
    taken = {g for r in running for g in r["gpus"]}
    for entry in running:
        moved = [g for g in entry["gpus"] if rng.random() < 1 / 3]
        free = [g for g in range(gpus) if g not in taken]
        targets = rng.sample(free, min(len(moved), len(free)))
        kept = [g for g in entry["gpus"] if g not in moved[: len(targets)]]
        taken -= set(moved[: len(targets)])
        taken |= set(targets)
        entry["gpus"] = sorted(kept + targets)


def fifo_utilization(doc: dict[str, Any]) -> float:
    """The contract's FIFO baseline's utilization on a scenario document."""
    instance = parse_scenario(doc, source=str(doc.get("name")))
    return score(instance, build_grid(instance, fifo(instance))).utilization


def calibrated(name: str, first_seed: int = 2026, tries: int = 1000) -> tuple[dict[str, Any], int]:
    """The benchmark document of ``name`` and its seed: the first seed from ``first_seed`` on
    whose FIFO utilization is within :data:`CALIBRATION_TOLERANCE` of the published one.

    ``uniform-priority`` is the ``large-mixed`` document with every priority 50 (FIFO does
    not look at priorities, so its utilization is the same).
    """
    target = PUBLISHED_FIFO_UTILIZATION[name]
    base = "large-mixed" if CALIBRATED_SHAPES[name].uniform_priority else name
    for seed in range(first_seed, first_seed + tries):
        doc = generate(CALIBRATED_SHAPES[base], seed)
        if abs(fifo_utilization(doc) - target) <= CALIBRATION_TOLERANCE:
            if base != name:
                doc = {**doc, "name": name, "jobs": [{**j, "priority": 50} for j in doc["jobs"]]}
            return doc, seed
    raise ValueError(f"no seed in {first_seed}..{first_seed + tries - 1} calibrates {name!r}")


HELDOUT_PER_SHAPE = 4


def heldout_documents(per_shape: int = HELDOUT_PER_SHAPE) -> Iterator[tuple[str, dict[str, Any]]]:
    """The held-out split: ``per_shape`` documents of each wide shape, from seeds outside
    :data:`TUNING_SEEDS`, each with its file stem (``SHAPE-SEED``). Written once and
    committed (``python -m benchmarks.make_scenarios benchmarks/heldout --heldout``): the
    files stay as they are when the generator changes, and tuning never reads them."""
    for shape in WIDE_SHAPES.values():
        for seed in range(HELDOUT_FIRST_SEED, HELDOUT_FIRST_SEED + per_shape):
            yield f"{shape.name}-{seed}", generate(shape, seed)
