"""Warm starts on the simulated week's submits: each answer against a fresh plan cycle at the same moment.

    python -m benchmarks.warm_start [--days 7] [--gpus 64] [--every 1] [--cycle-ms 1000]

The fast policy's simulated week (``gpuplan simulate``'s, gpuplan/app/lab/simulate), each arriving
job submitted as the served API submits it: through a :class:`SubmitBatcher`, so that the
answer is the last stored plan (the cycle's, or the previous submit's) with the job inserted
and repaired on the hot path (2 ms a job), or a fresh hot-path plan of the whole queue when
that plan no longer holds (a job ended, an hour was committed, the plan is older than a
cycle). At every ``--every``-th submit, a fresh plan cycle at the same moment (the fast mode
at ``--cycle-ms``, CP-SAT windows included) plans the same queue, and the answer's grid is
scored on that cycle's scenario. Budgets count work, not wall time, so the figures repeat.

Prints, for warm and for fresh answers: how many, the answer's shortfall from the cycle's
objective as a share of the cycle's value (mean, largest; below zero: the answer scores more),
how often the start the answer promises the new job differs from the one the
cycle plans for it, and the answer's planning time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from contract.scenario_io import parse_scenario
from gpuplan.app.core.bridge import planned_place
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.core.forecasters import Forecasters
from gpuplan.app.cycle.tick import first_open_hour, load_snapshot, plan_snapshot
from gpuplan.app.jobs.batcher import SubmitBatcher
from gpuplan.app.jobs.changes import Changes
from gpuplan.app.jobs.submit import submit
from gpuplan.app.lab.simulate import SimOptions, SimPolicy, prepare
from gpuplan.app.lab.simulate.loop import SimHooks, run_policy
from gpuplan.table import format_table
from scheduler.check import check_plan
from scheduler.metrics import score
from scheduler.policies import PolicyName, warm_up
from storage.store import Store


@dataclass
class Tally:
    #: (cycle's objective - answer's) / cycle's value: well defined where promise costs or
    #: real-time penalties bring the objective itself near zero.
    shortfalls: dict[str, list[float]] = field(default_factory=lambda: {"warm": [], "fresh": []})
    moved: dict[str, int] = field(default_factory=lambda: {"warm": 0, "fresh": 0})
    planning_ms: dict[str, list[float]] = field(default_factory=lambda: {"warm": [], "fresh": []})
    not_comparable: int = 0  # the answer's grid is not a plan of the cycle's scenario
    submits: int = 0


@dataclass
class Watch:
    """The served submit path inside the simulation, and the comparison at every ``every``-th submit."""

    every: int
    cycle_ms: float
    tally: Tally = field(default_factory=Tally)
    changes: Changes = field(default_factory=Changes)
    clock: list[datetime] = field(default_factory=list)
    batcher: SubmitBatcher | None = None

    def planned(self, store: Store, run: Any) -> None:
        self.changes.planned(run, store.marks())
        self._settle()

    def _settle(self) -> None:
        """Wait for the batches' thread (the plan it makes ahead after a change, a batch's last
        steps): the simulation's store is one in-memory connection, and in the daemon the plan
        lock keeps that thread and a cycle apart; the simulated clock stands still meanwhile."""
        if self.batcher is not None:
            self.batcher.settle()

    def submit(
        self,
        store: Store,
        spec: object,
        at: datetime,
        config: ServiceConfig,
        *,
        source: str,
        forecasters: Forecasters,
    ) -> object:
        self.clock[:] = [at]
        if self.batcher is None:
            self.batcher = SubmitBatcher(
                store,
                config=config,
                forecasters=forecasters,
                clock=lambda: self.clock[0],
                plan_lock=nullcontext,
                changes=self.changes,
            )
        warm_before = self.batcher.stats.warm
        answer = submit(
            store, spec, at, config, source=source, forecasters=forecasters, batcher=self.batcher.submit
        )
        self._settle()
        kind = "warm" if self.batcher.stats.warm > warm_before else "fresh"
        self.tally.submits += 1
        if self.tally.submits % self.every:
            return answer
        run = store.run()
        assert run is not None
        snapshot = load_snapshot(store, first_open_hour(store, at), config, forecasters)
        document, cycle = plan_snapshot(snapshot, config, PolicyName.FAST, budget_ms=self.cycle_ms)
        instance = parse_scenario(document)
        if run.start != snapshot.start or check_plan(instance, run.grid):
            self.tally.not_comparable += 1
            return answer
        answered = score(instance, run.grid).objective
        if cycle.metrics.value > 0:
            shortfall = (cycle.metrics.objective - answered) / cycle.metrics.value
            self.tally.shortfalls[kind].append(shortfall)
        job = answer.job
        cycle_run = replace(run, grid=[list(row) for row in cycle.grid])
        if planned_place(run, job)[0] != planned_place(cycle_run, job)[0]:
            self.tally.moved[kind] += 1
        self.tally.planning_ms[kind].append(run.latency_ms)
        return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--every", type=int, default=1, help="compare every N-th submit")
    parser.add_argument("--cycle-ms", type=float, default=1000.0)
    args = parser.parse_args(argv)
    warm_up()  # CP-SAT loaded before the first cycle of the comparison
    watch = Watch(every=args.every, cycle_ms=args.cycle_ms)
    with tempfile.TemporaryDirectory(prefix="gpuplan-warm-") as work:
        setup = prepare(days=args.days, gpus=args.gpus, work_dir=Path(work))
        run_policy(
            setup, SimPolicy.FAST, SimOptions(), hooks=SimHooks(submit=watch.submit, planned=watch.planned)
        )
    tally = watch.tally
    rows = []
    for kind in ("warm", "fresh"):
        shortfalls, ms = tally.shortfalls[kind], tally.planning_ms[kind]
        if not shortfalls:
            rows.append([kind, 0, "-", "-", "-", "-"])
            continue
        rows.append(
            [
                kind,
                len(shortfalls),
                f"{statistics.fmean(shortfalls):.2%}",
                f"{max(shortfalls):.2%}",
                f"{tally.moved[kind]} ({tally.moved[kind] / len(shortfalls):.1%})",
                f"{statistics.median(ms):.1f} / {max(ms):.1f}",
            ]
        )
    stats = watch.batcher.stats if watch.batcher else None
    sys.stdout.write(
        f"{args.days} days at {args.gpus} GPUs: {tally.submits} submits "
        f"({stats.warm if stats else 0} warm, {stats.fresh if stats else 0} fresh), every {args.every} "
        f"compared with a {args.cycle_ms:g} ms cycle; not comparable: {tally.not_comparable}\n"
        + format_table(
            [
                "answer",
                "compared",
                "shortfall / cycle's value, mean",
                "largest",
                "promised start differs",
                "plan ms p50 / max",
            ],
            rows,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
