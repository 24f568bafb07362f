"""Real-time served on bursty traffic, over several series and seeds, with every missed hour traced.

    .venv/bin/python -m benchmarks.surge_table --out DIR [--set tuning|held-out|held-out-2|held-out-3|bundled]
        [--days 2] [--gpus 64] [--plan-with p90] [--jobs 2] [--data ../shared/data]

Each run is ``gpuplan simulate --days D --gpus G --traffic CSV --seed S --policy
fast,fifo,priority-backfill`` (its own process, at most ``--jobs`` at a time; a run
already in ``DIR`` is read back, not run again). Each series is scaled as ``--traffic``
scales any series, and its last ``D`` days are simulated. The sets:

- ``tuning`` (16 runs): from the openb pod trace, the pod submissions with seeds 0-4 and
  (seed 0, as every other run) their windows ending 2 and 4 days earlier, the best-effort
  (``BE``) pods' submissions, the latency-sensitive (``LS``) pods' and their window ending
  2 days earlier; the LoRA requests and their window ending 3 days earlier; Philly's
  active nodes and their window ending 6 weeks earlier; the two ServeGen series. The
  ServeGen series hold two weeks, fewer hours than the two weeks of history and the
  simulated days need: their first week is repeated before them, so the simulated days
  are their own last days;
- ``held-out``: the openb GPUs requested per hour, seed 0 (read once, on the final code);
- ``held-out-2``: the openb pods deleted per hour and the CPUs the pods created asked for
  per hour, seed 0 (a second held-out pair, read once, on the final code);
- ``held-out-3``: issue 50's second round (docs/closed-loop.md), seeds 0 and 7: the LoRA
  trace's image-to-image requests per hour and the openb best-effort pods' CPUs requested
  (fresh), then the best-effort pods' GPUs requested and the LoRA execution seconds (the
  round before's held-out pair);
- ``bundled``: the bundled traffic, seed 0.

Prints one row per run (served, unmet GPU-h at the worst hour, utilization and value
against FIFO's and priority-backfill's, promises kept, idle real-time GPU-h,
amendments/day), the mean and the worst run, and then every hour the fast policy left
short: the need, the GPUs its commit held and what the :30 amendment added, what the
plans 1-3 hours before planned for it (P50, P90, the reserve, in GPUs), the GPUs idle at
:00 and at :30, and the batch jobs on the other GPUs (their GPUs, when they started,
when they end).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gpuplan.table import format_table

TRAFFIC = Path(__file__).resolve().parent.parent / "training_data" / "traffic"
POLICIES = ("fast", "fifo", "priority-backfill")


@dataclass(frozen=True)
class RunSpec:
    label: str
    traffic: Path | None  # None: the bundled traffic
    seed: int


def _rewritten(
    source: Path, out: Path, *, pad_week: bool = False, drop_hours: int = 0, column: str | None = None
) -> Path:
    """``source`` as a traffic CSV, with its first week repeated before it (``pad_week``: a
    two-week series made long enough) or its last ``drop_hours`` left off (an earlier window);
    ``column`` is the count column to read (the file's ``requests`` when None)."""
    from features.traffic import load_traffic

    traffic = load_traffic(source, requests_column=column)
    hours, values = list(traffic.hours), [float(v) for v in traffic.requests]
    if pad_week:
        week = 168
        hours = [h - week * (traffic.hours[1] - traffic.hours[0]) for h in traffic.hours[:week]] + hours
        values = values[:week] + values
    if drop_hours:
        hours, values = hours[:-drop_hours], values[:-drop_hours]
    lines = ["hour,requests"]
    lines += [
        f"{str(hour).replace('T', ' ')}:00:00,{value}" for hour, value in zip(hours, values, strict=True)
    ]
    out.write_text("\n".join(lines) + "\n")
    return out


def _lora_class(requests: Path, predict_type: str, out: Path) -> Path:
    """The LoRA trace's requests of one ``predict_type`` per hour, over every hour of the
    trace (from its first request's hour to its last's), as a traffic CSV."""
    import pandas as pd

    trace = pd.read_csv(requests, usecols=["gmt_create", "predict_type"], parse_dates=["gmt_create"])
    hour = trace["gmt_create"].dt.floor("h")
    counts = hour[trace["predict_type"] == predict_type].value_counts()
    every = pd.date_range(hour.min(), hour.max(), freq="h")
    frame = pd.DataFrame({"hour": every, "requests": counts.reindex(every, fill_value=0).to_numpy()})
    frame.to_csv(out, index=False)
    return out


#: The sets the table runs (module docstring).
SETS = ("tuning", "held-out", "held-out-2", "held-out-3", "bundled")


def run_specs(which: str, data: Path, folder: Path) -> list[RunSpec]:
    from benchmarks.forecast_accuracy import PODS, write_pod_series

    folder.mkdir(parents=True, exist_ok=True)

    def pod_series(name: str, **kwargs: Any) -> Path:
        return write_pod_series(data / PODS, folder / f"{name}.csv", **kwargs)

    if which == "bundled":
        return [RunSpec("bundled", None, 0)]
    if which == "held-out":
        return [RunSpec("held out, seed 0", pod_series("openb_gpus_requested", measure="gpus requested"), 0)]
    if which == "held-out-2":
        return [
            RunSpec("pods deleted", pod_series("openb_pods_deleted", measure="pods deleted"), 0),
            RunSpec("CPUs requested", pod_series("openb_cpus_requested", measure="cpus requested"), 0),
        ]
    if which == "held-out-3":
        be = pod_series("openb_be_gpus_requested", weeks=3, measure="gpus requested", qos="BE")
        be_cpus = pod_series("openb_be_cpus_requested", weeks=3, measure="cpus requested", qos="BE")
        lora = data / "traffic" / "alibaba_genai_lora_hourly.csv"
        exec_seconds = _rewritten(lora, folder / "lora_exec_seconds.csv", column="exec_seconds")
        img = _lora_class(
            data / "traffic" / "alibaba_genai_lora_requests.csv", "IMG_2_IMG", folder / "lora_img.csv"
        )
        series = [("LoRA image-to-image", img), ("BE CPUs requested", be_cpus)]
        series += [("BE GPUs requested", be), ("LoRA exec seconds", exec_seconds)]
        return [RunSpec(f"{label}, seed {seed}", path, seed) for label, path in series for seed in (0, 7)]
    pods = pod_series("openb_pods")
    specs = [RunSpec(f"pods, seed {seed}", pods, seed) for seed in (0, 1, 2, 3, 4)]
    for days in (2, 4):
        specs.append(
            RunSpec(f"pods {days} days before", pod_series(f"openb_pods_{days}d", drop_hours=24 * days), 0)
        )
    specs.append(RunSpec("BE pods", pod_series("openb_be_pods", qos="BE"), 0))
    specs.append(RunSpec("LS pods", pod_series("openb_ls_pods", qos="LS"), 0))
    specs.append(RunSpec("LS pods 2 days before", pod_series("openb_ls_pods_2d", qos="LS", drop_hours=48), 0))
    lora = TRAFFIC / "alibaba_genai_lora_hourly.csv"
    specs.append(RunSpec("LoRA", lora, 0))
    specs.append(RunSpec("LoRA 3 days before", _rewritten(lora, folder / "lora_3d.csv", drop_hours=72), 0))
    philly = TRAFFIC / "philly_active_nodes_hourly.csv"
    specs.append(RunSpec("Philly", philly, 0))
    specs.append(
        RunSpec("Philly 6 weeks before", _rewritten(philly, folder / "philly_6w.csv", drop_hours=6 * 168), 0)
    )
    for name in ("m-large", "m-mid"):
        path = _rewritten(
            TRAFFIC / f"servegen_{name}_hourly.csv", folder / f"servegen_{name}_hourly.csv", pad_week=True
        )
        specs.append(RunSpec(f"ServeGen {name}", path, 0))
    return specs


# --- one run (its own process) ------------------------------------------------------------------


def _one(args: argparse.Namespace) -> None:
    from gpuplan.app.core.bridge import STEP, gpus_for
    from gpuplan.app.core.config import PlanWith
    from gpuplan.app.cycle.amend import hourly_rates
    from gpuplan.app.cycle.tick import app_demand
    from gpuplan.app.lab.simulate import SimOptions, SimPolicy, prepare, run_policy
    from gpuplan.app.lab.simulate.loop import SimHooks, observed_so_far
    from gpuplan.app.lab.simulate.measures import measure, realtime_hours

    options = SimOptions(plan_with=PlanWith(args.plan_with))
    with tempfile.TemporaryDirectory(prefix="gpuplan-surge-") as work:
        setup = prepare(
            days=args.days,
            gpus=args.gpus,
            work_dir=Path(work),
            traffic_paths=[args.traffic] if args.traffic else [],
            seed=args.seed,
        )
        planned: dict[tuple[str, datetime], list[dict[str, Any]]] = {}

        def seen(store: Any, run: Any) -> None:
            rates = hourly_rates(observed_so_far(setup, run.created_at), run.created_at)
            for app in setup.apps:
                demand = app_demand(store, app, run.start, 4, partial_rate=rates.get(app.id))
                for step in range(4):
                    planned.setdefault((app.id, run.start + step * STEP), []).append(
                        {
                            "made": run.created_at.isoformat(),
                            "p50": gpus_for(app, demand.p50[step]),
                            "p90": gpus_for(app, demand.p90[step]),
                            "reserve": gpus_for(app, (demand.reserve or demand.p90)[step]),
                            "planned": demand.gpus[step],
                        }
                    )

        result: dict[str, Any] = {"policies": {}}
        for name in POLICIES:
            policy = SimPolicy(name)
            hooks = SimHooks(planned=seen) if policy is SimPolicy.FAST else None
            run = run_policy(setup, policy, options, hooks=hooks)
            result["policies"][name] = measure(setup, run).as_json()
            if policy is SimPolicy.FAST:
                result["missed"] = _missed(setup, run, planned, realtime_hours(setup, run))
    args.result.write_text(json.dumps(result, indent=1))


def _missed(setup: Any, run: Any, planned: dict[Any, Any], apps: dict[str, Any]) -> list[dict[str, Any]]:
    from gpuplan.app.core.bridge import STEP
    from gpuplan.app.lab.simulate.measures import actual_ends

    demand = setup.demand()
    ends = actual_ends(setup, run)
    commits = {c.hour: c for c in run.commits}
    amendments: dict[datetime, list[Any]] = {}
    for m in run.amendments:
        amendments.setdefault(m.hour, []).append(m)
    missed = []
    for app, hours in apps.items():
        for h in range(setup.hours):
            need = int(demand[app][h])
            short = need - float(hours.served[h])
            if short <= 1e-9:
                continue
            hour = setup.start + h * STEP
            commit = commits.get(hour)
            held = {a.job: a.gpus for a in commit.assignments} if commit else {}
            taken = {g for gpus in held.values() for g in gpus}
            added = {
                a.job: list(a.gpus) for m in amendments.get(hour, []) for a in m.assignments if a.job == app
            }
            added_gpus = {g for m in amendments.get(hour, []) for a in m.assignments for g in a.gpus}
            # GPUs whose batch job ended by :30 are free then, unless an amendment took them
            half = hour + timedelta(minutes=30)
            ended = {g for job, gpus in held.items() if job in ends and ends[job] <= half for g in gpus}
            after = (taken - ended) | added_gpus
            batch = []
            for job, gpus in held.items():
                if job in demand:
                    continue
                started = run.started.get(job)
                by_id = next(j for j in setup.jobs if j.id == job)
                batch.append(
                    {
                        "job": job,
                        "gpus": len(gpus),
                        "started_h": None if started is None else (started - setup.start) / STEP,
                        "ends_h": None
                        if started is None
                        else (started - setup.start) / STEP + by_id.actual_hours,
                    }
                )
            before = [
                p
                for p in planned.get((app, hour), [])
                if hour - timedelta(hours=3)
                <= datetime.fromisoformat(p["made"])
                <= hour + timedelta(minutes=30)
            ]
            missed.append(
                {
                    "app": app,
                    "hour": h,
                    "need": need,
                    "short": round(short, 2),
                    "committed": len(held.get(app, ())),
                    "added": sum(len(g) for g in added.values()),
                    "need_before": int(demand[app][h - 1]) if h else None,
                    "held_before": len(
                        next((a.gpus for a in commits[hour - STEP].assignments if a.job == app), ())
                    )
                    if (hour - STEP) in commits
                    else None,
                    "idle_00": setup.cluster.gpus - len(taken),
                    "idle_30": setup.cluster.gpus - len(after),
                    "plans": before,
                    "batch": sorted(batch, key=lambda b: -(b["started_h"] or 0)),
                }
            )
    return missed


# --- the table ------------------------------------------------------------------------------------


def _run(spec: RunSpec, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    safe = spec.label.replace(" ", "_").replace(",", "")
    path = out / f"{safe}.json"
    if not path.exists():
        command = [
            sys.executable,
            "-m",
            "benchmarks.surge_table",
            "--one",
            "--result",
            str(path),
            "--seed",
            str(spec.seed),
            "--days",
            str(args.days),
            "--gpus",
            str(args.gpus),
            "--plan-with",
            args.plan_with,
        ]
        if spec.traffic is not None:
            command += ["--traffic", str(spec.traffic)]
        subprocess.run(command, check=True)
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _row(label: str, result: dict[str, Any]) -> list[str]:
    fast, fifo, backfill = (result["policies"][p] for p in POLICIES)
    return [
        label,
        f"{fast['rt_served']:.2%}",
        f"{fast['rt_unmet_gpu_hours']:.1f}",
        f"{fast['rt_unmet_gpu_hours_worst_hour']:.1f}",
        f"{100 * (fast['utilization'] - fifo['utilization']):+.1f}",
        f"{fast['value'] / fifo['value'] - 1:+.1%}",
        f"{fast['value'] / backfill['value'] - 1:+.1%}",
        f"{fast['promise_kept']:.1%}",
        f"{fast['rt_idle_gpu_hours']:.0f}",
        f"{fast['amendments_per_day']:.1f}",
    ]


def _summary(results: Sequence[dict[str, Any]]) -> list[list[str]]:
    keys = ("rt_served", "rt_unmet_gpu_hours", "rt_unmet_gpu_hours_worst_hour")

    def fast(r: dict[str, Any], key: str) -> float:
        return float(r["policies"]["fast"][key])

    def gap(r: dict[str, Any], key: str, other: str, ratio: bool) -> float:
        mine, theirs = fast(r, key), float(r["policies"][other][key])
        return mine / theirs - 1 if ratio else 100 * (mine - theirs)

    columns = [
        [fast(r, keys[0]) for r in results],
        [fast(r, keys[1]) for r in results],
        [fast(r, keys[2]) for r in results],
        [gap(r, "utilization", "fifo", False) for r in results],
        [gap(r, "value", "fifo", True) for r in results],
        [gap(r, "value", "priority-backfill", True) for r in results],
        [fast(r, "promise_kept") for r in results],
        [fast(r, "rt_idle_gpu_hours") for r in results],
        [fast(r, "amendments_per_day") for r in results],
    ]
    formats = ["{:.2%}", "{:.1f}", "{:.1f}", "{:+.1f}", "{:+.1%}", "{:+.1%}", "{:.1%}", "{:.0f}", "{:.1f}"]
    worse_is_low = [True, False, False, True, True, True, True, False, False]
    mean = ["mean"] + [f.format(sum(c) / len(c)) for f, c in zip(formats, columns, strict=True)]
    worst = ["worst"] + [
        f.format(min(c) if low else max(c)) for f, c, low in zip(formats, columns, worse_is_low, strict=True)
    ]
    return [mean, worst]


def _trace(label: str, result: dict[str, Any]) -> str:
    lines = []
    for m in result.get("missed", []):
        plans = " ".join(
            f"{p['made'][11:16]}:{p['p50']}/{p['p90']}/{p['reserve']}->{p['planned']}" for p in m["plans"]
        )
        batch = ", ".join(
            f"{b['job']}x{b['gpus']} {b['started_h']:.1f}-{b['ends_h']:.1f}"
            if b["started_h"] is not None
            else b["job"]
            for b in m["batch"][:6]
        )
        lines.append(
            f"{label} | {m['app']} h{m['hour']} need {m['need']} (before {m['need_before']}, held "
            f"{m['held_before']}) committed {m['committed']} +{m['added']} short {m['short']} | idle "
            f"{m['idle_00']}/{m['idle_30']} | plans p50/p90/reserve->planned {plans} | latest batch {batch}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--set", default="tuning", choices=SETS)
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--plan-with", default="p90", choices=("p50", "p90"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--no-trace", action="store_true")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--traffic", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _one(args)
        return
    if args.out is None:
        parser.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    specs = run_specs(args.set, args.data, args.out / "traffic")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda spec: _run(spec, args.out, args), specs))
    headers = [
        "run",
        "rt served",
        "unmet GPU-h",
        "worst h",
        "util - FIFO",
        "value vs FIFO",
        "vs p-backfill",
        "promise kept",
        "idle rt GPU-h",
        "amend/day",
    ]
    rows = [_row(spec.label, result) for spec, result in zip(specs, results, strict=True)]
    if len(results) > 1:
        rows += _summary(results)
    sys.stdout.write(format_table(headers, rows) + "\n")
    if not args.no_trace:
        for spec, result in zip(specs, results, strict=True):
            text = _trace(spec.label, result)
            if text:
                sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
