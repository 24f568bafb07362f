"""The hot path and the plan cycle on small queues of long jobs, against the best plan known.

    python -m benchmarks.small_queues [--split tuning|heldout|wide-heldout] [--families ...] [--time-limit 10]
    python -m benchmarks.small_queues --write-heldout benchmarks/heldout-small

Two families a cluster meets every week, and where the hot path was weakest on outside
checks, drawn wide in their parameters:

- ``long-tight``: 8 GPUs; 4-6 batch jobs (5 in half the scenarios): training on 1-8 GPUs,
  batch inference on 1-4, quantization on 1-2, durations 2-36 hours, most of them 12 hours
  or more; three real-time services on a daily wave whose peaks add up to 75-100% of the
  cluster (about 90% on the median), each with a swap cap of half its peak (rounded down or
  up, at least 1). A third of the scenarios have a batch job running at step 0, a fifth a
  GPU down for a while.
- ``mixed-half``: 8 GPUs; 7-9 batch jobs (8 in half) of the seven's ranges (training 2-20
  hours, inference and quantization 1-6); two services whose peaks add up to 40-60% of the
  cluster, swap caps of half the peak or 1-3; releases, running work and down GPUs as above.

Services follow one real day of a bundled trace (as the seven do) or a drawn daily wave
(phase, width, steepness); decay 0.85-0.99 and real-time penalty 5-10 as issue 20's ranges.

A third set, ``seven``, is the seven benchmark shapes as calibrated
(:data:`gpuplan.app.lab.synthetic.CALIBRATED_SHAPES`) at other seeds.

**The split.** Tuning reads seeds 1-999 (:data:`TUNING_SEEDS`) of every family and of the
seven's shapes. The held-out split is frozen: :data:`HELDOUT_SEEDS` of each family and
:data:`SEVEN_HELDOUT_SEEDS` of each of the seven's shapes, written once to
``benchmarks/heldout-small/`` (``--write-heldout``) and committed before any tuning; a
change to this generator does not change them, and tuning never reads them. A wider frozen
split, ``--split wide-heldout``, is drawn rather than written: :data:`WIDE_HELDOUT_SEEDS` of
each family and :data:`SEVEN_WIDE_HELDOUT_SEEDS` of each of the seven's shapes, its
documents pinned by a digest (:data:`WIDE_HELDOUT_DIGEST`) that a change to the generator
breaks (``tests/benchmarks/test_small_queues.py``).

For each scenario it runs the three baselines, the hot path at ``--hot-ms`` (2 and 1 ms of
work), the plan cycle (1,000 ms of work; CP-SAT one worker, deterministic time) and the full
mode (CP-SAT, ``--time-limit`` seconds of deterministic time, one worker): all work-only, so
the objectives repeat on any machine. The reference is the best plan any of them found. The
latency is the hot path's wall-clock median over ``--runs`` in-process runs (the default 2 ms
budget), so it moves with the machine's load.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuplan.app.lab.synthetic import CALIBRATED_SHAPES, TRAFFIC_SERIES, generate, real_day_demand
from gpuplan.table import format_table

FAMILIES = ("long-tight", "mixed-half")
TUNING_SEEDS = range(1, 1000)
# Frozen before any tuning read a case of these families (benchmarks/heldout-small/).
HELDOUT_SEEDS = range(50_001, 50_021)
SEVEN_HELDOUT_SEEDS = range(50_001, 50_003)
# Frozen before any tuning read them (issue 50, the wide split): drawn by seed, not written.
WIDE_HELDOUT_SEEDS = range(5_001, 5_301)
SEVEN_WIDE_HELDOUT_SEEDS = range(60_001, 60_006)
WIDE_HELDOUT_DIGEST = "23901b6c33f38bef2ac981b2deb066bb8b69c4c18e586283dba950541bf08e54"
HELDOUT_DIR = Path(__file__).parent / "heldout-small"
GPUS = 8
HORIZON = 24


def _wave(rng: random.Random, peak: int) -> list[int]:
    """A drawn daily wave: a trough, a peak near the afternoon, its width and steepness drawn."""
    trough = rng.uniform(0.05, 0.45)
    centre = rng.uniform(11, 19)
    width = rng.uniform(3, 7)
    power = rng.uniform(1.0, 2.5)
    curve = []
    for t in range(HORIZON):
        distance = min(abs(t - centre), HORIZON - abs(t - centre))
        level = trough + (1 - trough) * math.exp(-((distance / width) ** 2) / 2)
        curve.append(level**power)
    top = max(curve)
    return [max(1, math.ceil(peak * x / top - 1e-9)) for x in curve]


def _demand(rng: random.Random, peak: int) -> list[int]:
    if rng.random() < 0.5:
        return real_day_demand(rng, peak, HORIZON, 0, TRAFFIC_SERIES)
    return _wave(rng, peak)


def _peaks(rng: random.Random, services: int, total: int) -> list[int]:
    peaks = [1] * services
    for _ in range(total - services):
        peaks[rng.randrange(services)] += 1
    return peaks


def _long_job(rng: random.Random, index: int) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.5:
        kind, priority, gpus = "training", rng.randint(40, 90), rng.choice((1, 2, 2, 4, 4, 8))
    elif roll < 0.8:
        kind, priority, gpus = "batch_inference", rng.randint(20, 60), rng.choice((1, 2, 4))
    else:
        kind, priority, gpus = "quantization", rng.randint(30, 70), rng.choice((1, 2))
    duration = rng.randint(12, 36) if rng.random() < 0.7 else rng.randint(2, 11)
    return _job(index, kind, priority, gpus, duration)


def _job(index: int, kind: str, priority: int, gpus: int, duration: int) -> dict[str, Any]:
    """A batch job of a drawn case, in the scenario format."""
    return {
        "id": f"{kind[:5]}-{index:02d}",
        "kind": kind,
        "priority": priority,
        "gpus": gpus,
        "duration": duration,
    }


def _mixed_job(rng: random.Random, index: int) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.45:
        kind, priority, gpus = "training", rng.randint(40, 90), rng.choice((1, 2, 2, 4, 4))
        duration = round(math.exp(rng.uniform(math.log(2), math.log(20))))
    elif roll < 0.75:
        kind, priority, gpus = "batch_inference", rng.randint(20, 60), rng.choice((1, 2, 4))
        duration = rng.randint(1, 6)
    else:
        kind, priority, gpus = "quantization", rng.randint(30, 70), rng.choice((1, 1, 2))
        duration = rng.randint(1, 6)
    return _job(index, kind, priority, gpus, duration)


def scenario(family: str, seed: int) -> dict[str, Any]:
    """One scenario document of ``family`` (one of :data:`FAMILIES`); the same seed, the same one."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}; got {family!r}")
    rng = random.Random(f"small-queues:{family}:{seed}")
    long = family == "long-tight"
    share = rng.uniform(0.75, 1.0) if long else rng.uniform(0.4, 0.6)
    services = 3 if long else 2
    peaks = _peaks(rng, services, max(services, round(share * GPUS)))
    jobs: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    top = GPUS
    for k, peak in enumerate(peaks):
        demand = _demand(rng, peak)
        half = max(1, (peak + rng.randint(0, 1)) // 2)
        cap = half if long or rng.random() < 0.5 else rng.randint(1, 3)
        jobs.append(
            {
                "id": f"rt-{k}",
                "kind": "realtime",
                "priority": rng.randint(60, 100),
                "swap_cap": cap,
                "demand": demand,
            }
        )
        held = min(top, demand[0])
        running.append({"id": f"rt-{k}", "gpus": list(range(top - held, top))})
        top -= held
    n_batch = rng.choice((5, 5, 4, 6)) if long else rng.choice((8, 8, 7, 9))
    make = _long_job if long else _mixed_job
    batch = [make(rng, i) for i in range(n_batch)]
    for job in batch:
        if rng.random() < (0.25 if long else 0.4):
            job["release"] = rng.randint(1, 8 if long else 12)
    jobs.extend(batch)
    # A batch job already running at step 0, on the lowest aligned block the services leave.
    if rng.random() < 0.33:
        size = rng.choice((1, 2, 2, 4))
        blocks = list(range(0, top - size + 1, size))
        if blocks:
            first = rng.choice(blocks)
            jobs.append(
                {
                    "id": "run-00",
                    "kind": "training",
                    "priority": rng.randint(40, 90),
                    "gpus": size,
                    "duration": 36,
                }
            )
            running.append(
                {"id": "run-00", "gpus": list(range(first, first + size)), "remaining": rng.randint(2, 20)}
            )
    for order, job in enumerate(j for j in jobs if j["kind"] != "realtime"):
        job["order"] = order
    doc: dict[str, Any] = {
        "name": f"{family}-{seed}",
        "gpus": GPUS,
        "horizon": HORIZON,
        "step_minutes": 60,
        "decay": round(rng.uniform(0.85, 0.99), 3),
        "rt_penalty": round(rng.uniform(5, 10), 2),
        "jobs": jobs,
        "running": running,
    }
    if rng.random() < 0.2:
        taken = {g for r in running for g in r["gpus"]}
        free = [g for g in range(GPUS) if g not in taken]
        if free:
            start = rng.randint(2, HORIZON - 3)
            doc["down"] = [
                {"gpu": rng.choice(free), "start": start, "end": min(HORIZON, start + rng.randint(2, 8))}
            ]
    return doc


def heldout_documents() -> Iterator[tuple[str, dict[str, Any]]]:
    """The frozen held-out split, each document with its file stem."""
    for family in FAMILIES:
        for seed in HELDOUT_SEEDS:
            yield f"{family}-{seed}", scenario(family, seed)
    for name, shape in CALIBRATED_SHAPES.items():
        for seed in SEVEN_HELDOUT_SEEDS:
            doc = generate(shape, seed)
            yield f"seven-{name}-{seed}", {**doc, "name": f"seven-{name}-{seed}"}


def wide_heldout_documents(families: list[str]) -> Iterator[dict[str, Any]]:
    """The wide held-out split of ``families``: drawn by seed, the same documents every time."""
    for family in families:
        if family == "seven":
            for name, shape in CALIBRATED_SHAPES.items():
                for seed in SEVEN_WIDE_HELDOUT_SEEDS:
                    yield {**generate(shape, seed), "name": f"seven-{name}-{seed}"}
            continue
        for seed in WIDE_HELDOUT_SEEDS:
            yield scenario(family, seed)


def wide_heldout_digest() -> str:
    """The SHA-256 of every document of the wide held-out split, in order."""
    digest = hashlib.sha256()
    for doc in wide_heldout_documents([*FAMILIES, "seven"]):
        digest.update(json.dumps(doc, sort_keys=True).encode())
    return digest.hexdigest()


def tuning_documents(
    families: list[str], per_family: int, seven_per_shape: int, first_seed: int = 1
) -> Iterator[dict[str, Any]]:
    """``per_family`` seeds of each family from ``first_seed`` on (the seven's shapes: their first
    ``seven_per_shape`` tuning seeds)."""
    for family in families:
        if family == "seven":
            for name, shape in CALIBRATED_SHAPES.items():
                for seed in TUNING_SEEDS[:seven_per_shape]:
                    yield {**generate(shape, seed), "name": f"seven-{name}-{seed}"}
            continue
        for seed in range(first_seed, first_seed + per_family):
            yield scenario(family, seed)


def heldout_loaded(families: list[str]) -> Iterator[dict[str, Any]]:
    for path in sorted(HELDOUT_DIR.glob("*.json")):
        family = "seven" if path.stem.startswith("seven-") else path.stem.rpartition("-")[0]
        if family in families:
            yield json.loads(path.read_text())


def family_of(name: str) -> str:
    return "seven" if name.startswith("seven-") else name.rpartition("-")[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("tuning", "heldout", "wide-heldout"), default="tuning")
    parser.add_argument("--families", default=",".join((*FAMILIES, "seven")))
    parser.add_argument("--per-family", type=int, default=12, help="tuning: seeds per family")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=TUNING_SEEDS.start,
        help="tuning: the families' first seed (from 1,000 on: fresh draws outside the tuning seeds)",
    )
    parser.add_argument("--seven-per-shape", type=int, default=1, help="tuning: seeds per shape of the seven")
    parser.add_argument("--time-limit", type=float, default=10.0, help="the full mode's, seconds of work")
    parser.add_argument("--no-reference", action="store_true", help="skip the full mode and the plan cycle")
    parser.add_argument("--hot-ms", default="2,1", help="hot-path budgets, ms of work")
    parser.add_argument("--runs", type=int, default=20, help="timed runs of the hot path's latency median")
    parser.add_argument("--references", type=Path, help="JSON file of best objectives: read, and updated")
    parser.add_argument("--json", type=Path, help="write every scenario's objectives to this file")
    parser.add_argument(
        "--against", type=Path, help="an earlier run's --json: per budget, scenarios better and worse than it"
    )
    parser.add_argument("--write-heldout", type=Path, metavar="DIR", help="write the frozen split and stop")
    args = parser.parse_args(argv)
    drawn = range(args.first_seed, args.first_seed + args.per_family)
    heldout = set(HELDOUT_SEEDS) | set(WIDE_HELDOUT_SEEDS)
    if args.split == "tuning" and (drawn.start < 1 or set(drawn) & heldout):
        parser.error(
            f"--first-seed and --per-family must draw seeds from 1 on, outside the held-out "
            f"seeds {HELDOUT_SEEDS.start}-{HELDOUT_SEEDS.stop - 1} and "
            f"{WIDE_HELDOUT_SEEDS.start}-{WIDE_HELDOUT_SEEDS.stop - 1}; got {drawn.start}-{drawn.stop - 1}"
        )
    if args.write_heldout:
        args.write_heldout.mkdir(parents=True, exist_ok=True)
        for stem, doc in heldout_documents():
            (args.write_heldout / f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n")
        return 0
    return _measure(args)


def _measure(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from benchmarks.adversarial import _ratio
    from contract.scenario_io import parse_scenario
    from gpuplan.app.lab.bench import latency_ms
    from scheduler import lns
    from scheduler.policies import PolicyName, SolveOptions, plan

    families = args.families.split(",")
    if args.split == "heldout":
        docs = list(heldout_loaded(families))
    elif args.split == "wide-heldout":
        docs = list(wide_heldout_documents(families))
    else:
        docs = list(tuning_documents(families, args.per_family, args.seven_per_shape, args.first_seed))
    hot_ms = [float(x) for x in args.hot_ms.split(",")]
    known: dict[str, float] = (
        json.loads(args.references.read_text()) if args.references and args.references.exists() else {}
    )
    if not args.no_reference:
        lns.warm_up()
    rows: list[dict[str, Any]] = []
    for doc in tqdm(
        docs, desc="scenarios", unit="scenario", file=sys.stderr, disable=not sys.stderr.isatty()
    ):
        instance = parse_scenario(doc, source=doc["name"])
        objective: dict[str, float] = {}
        for name in (PolicyName.FIFO, PolicyName.FIFO_BACKFILL, PolicyName.PRIORITY_BACKFILL):
            objective[name.value] = plan(instance, name).metrics.objective
        for ms in hot_ms:
            objective[f"hot {ms:g}"] = plan(
                instance, PolicyName.FAST, SolveOptions(budget_ms=ms, wall_clock=False)
            ).metrics.objective
        if not args.no_reference:
            objective["cycle"] = plan(
                instance, PolicyName.FAST, SolveOptions(budget_ms=1000, wall_clock=False, workers=1)
            ).metrics.objective
            objective["full"] = plan(
                instance,
                PolicyName.FULL,
                SolveOptions(time_limit_s=args.time_limit, wall_clock=False, workers=1),
            ).metrics.objective
        best = max([*objective.values(), known.get(doc["name"], -math.inf)])
        known[doc["name"]] = best
        latency = latency_ms(instance, PolicyName.FAST, args.runs) if args.runs else math.nan
        rows.append({"name": doc["name"], "objective": objective, "best": best, "latency_ms": latency})
    if args.references:
        args.references.write_text(json.dumps(dict(sorted(known.items())), indent=1) + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    keys = [f"hot {ms:g}" for ms in hot_ms] + ([] if args.no_reference else ["cycle"])
    table = []
    groups = {f: [r for r in rows if family_of(r["name"]) == f] for f in families}
    for family, group in [*groups.items(), ("all", rows)]:
        if not group:
            continue
        line: list[object] = [family, len(group)]
        for key in keys:
            ratios = [(_ratio(r["objective"][key], r["best"]), r["name"]) for r in group]
            worst = min(ratios)
            line += [f"{statistics.mean(x for x, _ in ratios):.4f}", f"{worst[0]:.4f}", worst[1]]
        latencies = [r["latency_ms"] for r in group]
        line.append(f"{statistics.median(latencies):.2f} (max {max(latencies):.2f})")
        floors = ("fifo", "fifo-backfill", "priority-backfill")
        below = sum(
            any(r["objective"][k] < r["objective"][b] - 1e-6 for k in keys for b in floors) for r in group
        )
        line.append(below)
        table.append(line)
    header = ["set", "n"]
    for key in keys:
        header += [f"{key} mean", f"{key} worst", "worst case"]
    header += ["hot ms (median)", "below a baseline"]
    sys.stdout.write(format_table(header, table) + "\n")
    if args.against:
        sys.stdout.write(_against(json.loads(args.against.read_text()), rows, keys, known) + "\n")
    return 0


def _against(
    earlier: list[dict[str, Any]], rows: list[dict[str, Any]], keys: list[str], best: dict[str, float]
) -> str:
    """Per budget, this run against an earlier one on the scenarios both ran, both against the
    best objective either found: scenarios better and worse, and the mean, worst and count
    below 0.90 of each."""
    from benchmarks.adversarial import _ratio

    before = {row["name"]: row["objective"] for row in earlier}
    table = []
    for key in keys:
        pairs = [
            (before[name][key], r["objective"][key], max(best[name], *before[name].values()))
            for r in rows
            if (name := r["name"]) in before
        ]
        if not pairs:
            continue
        old = [_ratio(x, ref) for x, _, ref in pairs]
        new = [_ratio(y, ref) for _, y, ref in pairs]
        table.append(
            [
                key,
                len(pairs),
                sum(y > x + 1e-6 for x, y, _ in pairs),
                sum(y < x - 1e-6 for x, y, _ in pairs),
                f"{statistics.mean(old):.4f} -> {statistics.mean(new):.4f}",
                f"{min(old):.4f} -> {min(new):.4f}",
                f"{sum(x < 0.9 for x in old)} -> {sum(x < 0.9 for x in new)}",
            ]
        )
    header = ["budget", "n", "better", "worse", "mean", "worst", "below 0.90"]
    return format_table(header, table)


if __name__ == "__main__":
    raise SystemExit(main())
