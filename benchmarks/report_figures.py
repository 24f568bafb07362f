"""The README's report figures, from real plans made by the service's own pipeline.

    python -m benchmarks.report_figures [--out docs] [--scenario DAY2.json]

A 16-GPU cluster with the demo's two real-time apps (bundled Alibaba LoRA and Philly
traffic; each trace moved by whole days so that its last full day is the day before the
plan) and batch jobs from the benchmark scenarios. Two day-ahead plans, 24 hours apart,
each built as the daemon builds it: weekly demand profiles fitted on the traffic before
the plan's start, P50/P90 requests mapped to GPUs by ``gpuplan.app.core.bridge``, the scenario
from ``bridge.scenario_document``, the fast mode's plan.

- Day 1 plans the queue of ``4-large-mixed``; its 24 columns stand in for day 1's
  commits (each hour as planned).
- Day 2 carries on: day 1's unfinished jobs run on, the unplaced ones wait, the batch
  jobs of ``1-mixed-control`` arrive, the apps start on the GPUs they held at 23:00, and
  GPUs 4-15 are down for maintenance (a power feed) from 14:00 to 17:00.

The reports read day 2's plan (idle windows, bookable starts, coverage risk with day 1
realised against its actual traffic) and day 1's commits (utilization). No database is
involved: the values are what a stored run would hold.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from contract.records import (
    App,
    Cluster,
    Commit,
    DownWindowRecord,
    Job,
    JobEstimate,
    JobState,
    PlanRun,
    RunMode,
    TrafficHour,
)
from contract.scenario import JobKind
from contract.scenario_io import parse_scenario, write_json_atomic
from features.traffic import load_traffic
from forecasting.realtime import RealtimeProfile
from forecasting.realtime_training import BUNDLED_TRAFFIC_DIR
from gpuplan.app.core.bridge import (
    AppDemand,
    Snapshot,
    app_forecasts,
    column_commit,
    run_record,
    scenario_document,
)
from gpuplan.app.core.config import DEMO_APPS, DEMO_GPUS, PlanWith
from gpuplan.app.views.reports import (
    BookableStart,
    CommitRow,
    CoverageRow,
    IdleWindow,
    UtilizationRow,
    app_needs,
    bookable_starts,
    commit_rows,
    coverage_risk,
    idle_windows,
    planned_counts,
    run_instance,
    utilization,
)
from gpuplan.report_plots import draw_coverage, draw_idle_windows, draw_utilization
from gpuplan.table import rows_table
from scheduler.policies import PolicyName, plan

ROOT = Path(__file__).resolve().parent
DAY1 = datetime(2026, 3, 1, tzinfo=UTC)
DAY2 = DAY1 + timedelta(days=1)
HOUR = timedelta(hours=1)
HEADROOM = 0.1
MAINTENANCE = (range(4, 16), DAY2 + 14 * HOUR, DAY2 + 17 * HOUR)


def _hour(value: np.datetime64) -> datetime:
    moment: datetime = value.astype("datetime64[s]").item()
    return moment.replace(tzinfo=UTC)


def demo_apps() -> tuple[list[App], dict[str, list[TrafficHour]]]:
    """The demo's apps with their traffic moved so that its last full day is DAY1."""
    apps, traffic = [], {}
    for app_id, name, priority, swap_cap, peak_gpus in DEMO_APPS:
        series = load_traffic(BUNDLED_TRAFFIC_DIR / name)
        hours = [_hour(h) for h in series.hours]
        last_full_day = (hours[-1] + HOUR - timedelta(days=1)).replace(hour=0)
        shift = DAY1 - last_full_day
        traffic[app_id] = [
            TrafficHour(app_id, h + shift, float(r))
            for h, r in zip(hours, series.requests, strict=True)
            if h + shift < DAY2
        ]
        rate = max(float(series.requests.max()), 1.0) / peak_gpus  # as the demo seeds it
        apps.append(App(app_id, priority, swap_cap, requests_per_gpu_hour=rate, headroom=HEADROOM))
    return apps, traffic


def demand_at(app: App, traffic: list[TrafficHour], start: datetime, hours: int) -> AppDemand:
    """P50/P90 requests from ``start`` by a weekly profile fitted on the traffic before it."""
    seen = [row for row in traffic if row.hour < start]
    profile = RealtimeProfile().fit(
        np.array([np.datetime64(row.hour.replace(tzinfo=None), "h") for row in seen]),
        np.array([row.requests for row in seen]),
    )
    forecast = profile.predict(np.datetime64(start.replace(tzinfo=None), "h"), hours)
    return AppDemand(app, [float(v) for v in forecast.p50], [float(v) for v in forecast.p90])


def batch_jobs(benchmark: str, submitted: datetime) -> list[Job]:
    document = json.loads((ROOT / benchmark).read_text())
    return [
        Job(
            id=entry["id"],
            kind=entry["kind"],
            priority=float(entry["priority"]),
            spec={},
            submitted_at=submitted,
            estimate=JobEstimate(entry["gpus"], hours_p50=entry["duration"], hours_p90=entry["duration"]),
        )
        for entry in document["jobs"]
        if entry["kind"] != "realtime"
    ]


def plan_run(snapshot: Snapshot, name: str) -> PlanRun:
    document = scenario_document(snapshot, PlanWith.P90, name=name)
    result = plan(parse_scenario(document, source=name), PolicyName.FAST)
    run = run_record(
        document,
        start=snapshot.start,
        created_at=snapshot.start,
        mode=RunMode.PLAN,
        policy="fast",
        grid=result.grid,
        metrics=result.metrics.as_dict(),
        latency_ms=result.solve_ms,
        status=result.status,
        forecasts=app_forecasts(snapshot),
        inputs_hash_=name,
    )
    return replace(run, id=2 if snapshot.start == DAY2 else 1)


def hourly_commits(run: PlanRun) -> list[Commit]:
    """Each column of a plan as that hour's commit."""
    return [
        column_commit([[row[t]] for row in run.grid], run.start + t * HOUR, run.id)
        for t in range(len(run.grid[0]))
    ]


def carried_over(day1: PlanRun, queue: list[Job]) -> tuple[list[Job], list[Job]]:
    """Day 1's jobs at day 2's start: (still running, still queued)."""
    horizon = len(day1.grid[0])
    running, queued = [], []
    for job in queue:
        cells = [(g, t) for g, row in enumerate(day1.grid) for t, cell in enumerate(row) if cell == job.id]
        if not cells:
            queued.append(job)
            continue
        start = min(t for _, t in cells)
        assert job.estimate is not None
        if start + math.ceil(job.estimate.hours_p90) > horizon:
            running.append(
                replace(
                    job,
                    state=JobState.RUNNING,
                    first_gpu=min(g for g, _ in cells),
                    gpus=job.estimate.gpus,
                    started_at=day1.start + start * HOUR,
                )
            )
    return running, queued


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT.parent / "docs", help="folder for the PNGs")
    parser.add_argument("--scenario", type=Path, help="also write day 2's scenario here (to replan it)")
    args = parser.parse_args()
    out = args.out
    apps, traffic = demo_apps()
    horizon = 24
    cluster = Cluster(gpus=DEMO_GPUS)
    queue = batch_jobs("4-large-mixed.json", DAY1 - HOUR)
    day1 = plan_run(
        Snapshot(
            start=DAY1,
            cluster=cluster,
            queued=queue,
            running=[],
            demand=[demand_at(app, traffic[app.id], DAY1, 2 * horizon) for app in apps],
            realtime_sets={},
        ),
        "day-1",
    )
    commits = hourly_commits(day1)
    running, waiting = carried_over(day1, queue)
    app_ids = {app.id for app in apps}
    gpus, down_from, down_until = MAINTENANCE
    cluster2 = replace(cluster, down=tuple(DownWindowRecord(g, down_from, down_until) for g in gpus))
    day2 = plan_run(
        Snapshot(
            start=DAY2,
            cluster=cluster2,
            queued=waiting + batch_jobs("1-mixed-control.json", DAY2 - HOUR),
            running=running,
            demand=[demand_at(app, traffic[app.id], DAY2, 2 * horizon) for app in apps],
            realtime_sets={a.job: a.gpus for a in commits[-1].assignments if a.job in app_ids},
        ),
        "day-2",
    )
    instance = run_instance(day2)
    if args.scenario:
        write_json_atomic(args.scenario, day2.scenario)
    heading = f"day-2 plan (fast) of {instance.gpus} GPUs from {DAY2:%Y-%m-%d %H:%M} UTC"

    idle = idle_windows(instance, day2.grid, DAY2, min_gpus=2, min_hours=2)
    print(f"{heading}: idle windows of >= 2 GPUs for >= 2 h")
    print(rows_table(IdleWindow, idle.rows))
    print(f"free: {idle.free_gpu_hours:g} GPU-hours; in no such window: {idle.unlisted_gpu_hours:g}\n")
    draw_idle_windows(
        instance,
        day2.grid,
        DAY2,
        report=idle,
        bookable=(),
        title=f"{heading}: {len(idle.rows)} idle windows of >= 2 GPUs for >= 2 h (outlined), "
        f"{idle.free_gpu_hours:g} free GPU-hours, {idle.unlisted_gpu_hours:g} in none",
        path=out / "report-idle-windows.png",
    )

    bookable = bookable_starts(instance, day2.grid, DAY2, gpus=4, hours=6)
    print(f"{heading}: where a 4-GPU job of 6 h fits")
    print(rows_table(BookableStart, bookable) + "\n")
    draw_idle_windows(
        instance,
        day2.grid,
        DAY2,
        report=None,
        bookable=bookable,
        title=f"{heading}: where a 4-GPU job of 6 h fits without moving anything planned "
        "(each block at its earliest start)",
        path=out / "report-bookable.png",
    )

    actual = [row for app in apps for row in traffic[app.id]]
    risk = coverage_risk(day2, apps, traffic=actual, commits=commits)
    print(f"{heading}: coverage risk at P90 (day 1 realised against its traffic)")
    print(rows_table(CoverageRow, risk.rows))
    for r in risk.realised:
        print(f"realised day 1: {r.app} served {r.served_share:.1%} of {r.needed_gpu_hours:g} GPU-hours")
    print()
    by_quantile = {q: app_needs(day2, instance, apps, q) for q in (0.5, 0.9)}
    needs = {app: {q: by_quantile[q][app] for q in by_quantile} for app in app_ids}
    draw_coverage(
        instance,
        DAY2,
        risk,
        planned=planned_counts(instance, day2.grid),
        needs=needs,
        title=f"{heading}: real-time GPUs planned against P50/P90 need, P90 shortfall shaded "
        "(GPUs 4-15 down 14:00-17:00); left of the start, day 1's commits against its actual traffic",
        path=out / "report-coverage-risk.png",
    )

    kinds = {job.id: JobKind(job.kind) for job in queue} | {app.id: JobKind.REALTIME for app in apps}
    used = utilization(commits, cluster, kinds)
    print(f"day 1's {len(commits)} committed hours by kind")
    print(rows_table(UtilizationRow, used.rows))
    print(f"busy {used.busy_share:.1%} of up GPU-hours\n")
    draw_utilization(
        used,
        cluster.gpus,
        f"Day 1 ({DAY1:%Y-%m-%d}), {cluster.gpus} GPUs: committed GPUs by kind "
        f"(busy {used.busy_share:.1%} of up GPU-hours)",
        out / "report-utilization.png",
    )
    print(f"day 1's commits at 00:00-01:00: {len(commit_rows(commits[:2]))} rows")
    print(rows_table(CommitRow, commit_rows(commits[:2])))


if __name__ == "__main__":
    main()
