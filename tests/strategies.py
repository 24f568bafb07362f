"""Hypothesis strategies: contract-valid scenario documents of every shape.

Built valid by construction (running jobs on up GPUs, non-overlapping; real-time
running sets that can leave their GPUs before they go down), so no example is
rejected and every one exercises a policy.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from contract.scenario import Instance
from contract.scenario_io import parse_scenario

KINDS = ["training", "batch_inference", "quantization"]


@st.composite
def scenarios(
    draw: st.DrawFn,
    *,
    max_gpus: int = 128,
    max_jobs: int = 24,
    horizon: int | None = None,
) -> dict[str, Any]:
    gpus = draw(
        st.one_of(st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128]), st.integers(1, max_gpus)).filter(
            lambda g: g <= max_gpus
        )
    )
    steps = horizon or draw(st.sampled_from([24, 24, 12, 6, 1]))
    down, down_cells = _down(draw, gpus, steps, draw(st.integers(0, min(4, gpus))))
    jobs: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    taken: set[int] = set()
    for i in range(draw(st.integers(0, max_jobs))):
        size = draw(st.sampled_from([s for s in (1, 2, 4, 8, 16) if s <= gpus]))
        job = _batch_job(draw, i, size, steps + 4)
        if draw(st.booleans()):
            job["release"] = draw(st.integers(0, steps))
        jobs.append(job)
        if draw(st.integers(0, 3)) == 0:
            first = draw(st.integers(0, gpus // size - 1)) * size
            remaining = draw(st.integers(1, job["duration"]))  # a running job has at most its duration left
            block = set(range(first, first + size))
            if not block & taken and not any(
                (g, t) in down_cells for g in block for t in range(min(remaining, steps))
            ):
                taken |= block
                running.append({"id": job["id"], "gpus": sorted(block), "remaining": remaining})
    for k in range(draw(st.integers(0, 3))):
        cap = draw(st.integers(0, 4))
        peak = draw(st.integers(0, gpus))
        demand = draw(st.lists(st.integers(0, peak), min_size=steps, max_size=steps))
        jobs.append(
            {
                "id": f"rt{k}",
                "kind": "realtime",
                "priority": draw(st.integers(1, 100)),
                "swap_cap": cap,
                "demand": demand,
            }
        )
        if draw(st.booleans()):
            free = [g for g in range(gpus) if g not in taken]
            chosen = draw(st.lists(st.sampled_from(free), unique=True, max_size=8)) if free else []
            chosen = _leavable(chosen, cap, down, steps)
            taken |= set(chosen)
            running.append({"id": f"rt{k}", "gpus": chosen})
    doc: dict[str, Any] = {
        "name": "generated",
        "gpus": gpus,
        "horizon": steps,
        "jobs": draw(st.permutations(jobs)),
    }
    return _with_work(doc, running, down)


def _batch_job(draw: st.DrawFn, index: int, gpus: int, longest: int) -> dict[str, Any]:
    """A drawn batch job's document: its kind, priority and a duration of 1 to ``longest`` steps."""
    return {
        "id": f"b{index}",
        "kind": draw(st.sampled_from(KINDS)),
        "priority": draw(st.integers(1, 100)),
        "gpus": gpus,
        "duration": draw(st.integers(1, longest)),
    }


def _with_work(
    doc: dict[str, Any], running: list[dict[str, Any]], down: list[dict[str, int]]
) -> dict[str, Any]:
    """``doc`` with its optional ``running`` and ``down`` sections, where there are any."""
    if running:
        doc["running"] = running
    if down:
        doc["down"] = down
    return doc


def _down(
    draw: st.DrawFn, gpus: int, steps: int, count: int
) -> tuple[list[dict[str, int]], set[tuple[int, int]]]:
    """``count`` down windows anywhere in the cluster, and the (GPU, step) cells they cover."""
    down = []
    for _ in range(count):
        start = draw(st.integers(0, steps - 1))
        down.append(
            {
                "gpu": draw(st.integers(0, gpus - 1)),
                "start": start,
                "end": draw(st.integers(start + 1, steps)),
            }
        )
    return down, {(w["gpu"], t) for w in down for t in range(w["start"], w["end"])}


def _leavable(chosen: list[int], cap: int, down: list[dict[str, int]], steps: int) -> list[int]:
    """Drop GPUs from a real-time running set until it can shed the rest before they go down."""
    first_down = {}
    for w in down:
        first_down[w["gpu"]] = min(first_down.get(w["gpu"], steps), w["start"])
    kept = [g for g in chosen if g not in first_down]
    for g in sorted((g for g in chosen if g in first_down), key=lambda g: first_down[g]):
        deadlines = sorted([first_down[x] for x in kept if x in first_down] + [first_down[g]])
        if all(n <= cap * (d + 1) for n, d in enumerate(deadlines, start=1)):
            kept.append(g)
    return kept


def instance_of(doc: dict[str, Any]) -> Instance:
    return parse_scenario(doc, source="test")


def small_doc(**overrides: Any) -> dict[str, Any]:
    """The contract's example scenario, varied by keyword."""
    doc: dict[str, Any] = {
        "name": "small",
        "gpus": 8,
        "horizon": 4,
        "jobs": [
            {"id": "train", "kind": "training", "priority": 10, "gpus": 4, "duration": 2},
            {
                "id": "chat",
                "kind": "realtime",
                "priority": 5,
                "swap_cap": 1,
                "demand": [1, 2, 2, 1],
            },
        ],
    }
    doc.update(overrides)
    return doc


def solved_by_hand() -> Instance:
    """One 2-GPU job worth 10/GPU-step for 2 steps, one 1-GPU job worth 1/GPU-step for 3 steps,
    2 GPUs, 3 steps, no decay. Best: the big job at steps 0-1 (40), the small one cut to step
    2 (1): 41; the small job first would delay the big one past the horizon."""
    return instance_of(
        {
            "gpus": 2,
            "horizon": 3,
            "decay": 1.0,
            "jobs": [
                {"id": "big", "kind": "training", "priority": 10, "gpus": 2, "duration": 2},
                {"id": "small", "kind": "quantization", "priority": 1, "gpus": 1, "duration": 3},
            ],
        }
    )


@st.composite
def pooled_scenarios(
    draw: st.DrawFn,
    *,
    max_pools: int = 3,
    max_pool_gpus: int = 8,
    max_jobs: int = 8,
    several_pools: bool = False,
) -> dict[str, Any]:
    """A cluster of 2 to ``max_pools`` pools of any size; batch jobs that name some pools (or
    none: every pool) with steps per pool, services on one pool each (with ``several_pools``,
    some on one of several, with their demand on each), running work inside its pool, down
    GPUs anywhere. Valid by construction."""
    sizes = draw(st.lists(st.integers(1, max_pool_gpus), min_size=2, max_size=max_pools))
    names = [f"p{i}" for i in range(len(sizes))]
    firsts = [sum(sizes[:i]) for i in range(len(sizes))]
    gpus = sum(sizes)
    steps = draw(st.sampled_from([6, 8, 12]))
    down, down_cells = _down(draw, gpus, steps, draw(st.integers(0, 2)))
    jobs: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    taken: set[int] = set()
    for i in range(draw(st.integers(0, max_jobs))):
        allowed = draw(
            st.lists(st.sampled_from(range(len(sizes))), unique=True, min_size=1, max_size=len(sizes))
        )
        largest = max(sizes[p] for p in allowed)
        size = draw(st.sampled_from([s for s in (1, 2, 4, 8) if s <= largest]))
        job = _batch_job(draw, i, size, steps + 2)
        if draw(st.booleans()):
            job["pools"] = [names[p] for p in sorted(allowed)]
        else:
            allowed = list(range(len(sizes)))
        per_pool = {names[p]: draw(st.integers(1, steps + 2)) for p in allowed if draw(st.booleans())}
        if per_pool:
            job["duration_by_pool"] = per_pool
        if draw(st.booleans()):
            job["release"] = draw(st.integers(0, steps))
        jobs.append(job)
        fits = [p for p in allowed if sizes[p] >= size]
        if fits and draw(st.integers(0, 3)) == 0:
            p = draw(st.sampled_from(fits))
            first = firsts[p] + draw(st.integers(0, sizes[p] // size - 1)) * size
            remaining = draw(st.integers(1, per_pool.get(names[p], job["duration"])))
            block = set(range(first, first + size))
            if not block & taken and not any(
                (g, t) in down_cells for g in block for t in range(min(remaining, steps))
            ):
                taken |= block
                running.append({"id": job["id"], "gpus": sorted(block), "remaining": remaining})
    for k in range(draw(st.integers(0, 2))):
        p = draw(st.integers(0, len(sizes) - 1))
        cap = draw(st.integers(0, 2))
        demand = draw(st.lists(st.integers(0, sizes[p]), min_size=steps, max_size=steps))
        service = {
            "id": f"rt{k}",
            "kind": "realtime",
            "priority": draw(st.integers(1, 100)),
            "swap_cap": cap,
            "demand": demand,
            "pool": names[p],
        }
        if several_pools and draw(st.booleans()):  # pool p and others, each with its own demand
            others = draw(st.lists(st.sampled_from(range(len(sizes))), unique=True, max_size=len(sizes)))
            by_pool = {names[p]: service.pop("demand")}
            for q in others:
                by_pool.setdefault(
                    names[q], draw(st.lists(st.integers(0, sizes[q]), min_size=steps, max_size=steps))
                )
            service["demand_by_pool"] = by_pool
            del service["pool"]
        jobs.append(service)
        if draw(st.booleans()):
            free = [g for g in range(firsts[p], firsts[p] + sizes[p]) if g not in taken]
            chosen = draw(st.lists(st.sampled_from(free), unique=True, max_size=4)) if free else []
            chosen = _leavable(chosen, cap, down, steps)
            taken |= set(chosen)
            running.append({"id": f"rt{k}", "gpus": chosen})
    doc: dict[str, Any] = {
        "name": "pooled",
        "pools": [
            {"name": n, "gpu_model": f"model-{n}", "gpus": s} for n, s in zip(names, sizes, strict=True)
        ],
        "horizon": steps,
        "jobs": draw(st.permutations(jobs)),
    }
    return _with_work(doc, running, down)
