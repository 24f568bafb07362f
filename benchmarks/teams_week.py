"""Teams on a two-pool cluster: quotas, lending by P90 and the fair share against the baselines.

    python -m benchmarks.teams_week [--seeds 0,1] [--held-out 2] [--days 2] [--policies fast,...]
        [--lending-horizon-hours H]

The cluster is :mod:`benchmarks.pools_week`'s (pool `h100` of 32 H100 beside pool `a100` of 32
A100, one real-time app of no team on each) with three teams (:data:`TEAMS`, docs/teams.md):
`research` (weight 2), `product` and `infra` (weight 1), whose quotas leave each model's GPUs
beyond them to the apps. The workload is the drawn one of the seed; each job goes to a team
(:data:`TEAM_SHARES`), and `product` is idle for the first day: its jobs of that day (and its
backlog) arrive together in the first :data:`BURST_HOURS` hours of the second. Each seed runs
fast, fifo and priority-backfill (constraint 7: quotas kept, lending by P90), their `-quota`
(hard quotas, no lending) and `-lend` (lending, no reclaim guarantee) twins, and the fast mode
without teams; every committed run is checked against the contract.

Prints, per seed, each policy's value and utilization, each team's share of its entitlement
while it had backlog, its reclaim wait p90, the fairness and the P90 overruns on lent GPUs; then
the goals (docs/teams.md, "Simulation") per seed. Held-out seeds are reported apart.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from dataclasses import replace
from pathlib import Path

from benchmarks.pools_week import config_text, drawn_setup, named_policies
from gpuplan.app.lab.simulate import Setup, SimOptions, SimPolicy, run_policy, week_grid
from gpuplan.app.lab.simulate.measures import PolicyMetrics, measure
from gpuplan.table import format_table
from scheduler.check import check_plan

#: name, quota per model, weight.
TEAMS = (
    ("research", {"h100": 12, "a100": 8}, 2),
    ("product", {"h100": 8, "a100": 12}, 1),
    ("infra", {"h100": 6, "a100": 6}, 1),
)
TEAM_SHARES = {"research": 0.4, "product": 0.35, "infra": 0.25}
IDLE_TEAM = "product"
BURST_HOURS = 3.0
POLICIES = (
    SimPolicy.FAST,
    SimPolicy.PRIORITY_BACKFILL,
    SimPolicy.FIFO,
    SimPolicy.PRIORITY_BACKFILL_QUOTA,
    SimPolicy.FIFO_QUOTA,
    SimPolicy.PRIORITY_BACKFILL_LEND,
    SimPolicy.FIFO_LEND,
)
NO_TEAMS = "fast, no teams"
#: :data:`NO_TEAMS` as ``--policies`` names it (no comma).
NO_TEAMS_ARG = "fast-no-teams"


def teams_text(lending_horizon_hours: float | None = None) -> str:
    """The config's teams (and ``lending_horizon_hours``, when given: else the config's default)."""
    lines = [
        f"  - {{name: {name}, quota: {{{', '.join(f'{m}: {g}' for m, g in quota.items())}}}, weight: {w}}}\n"
        for name, quota, w in TEAMS
    ]
    horizon = "" if lending_horizon_hours is None else f"lending_horizon_hours: {lending_horizon_hours}\n"
    return "teams:\n" + "".join(lines) + "fair_share: {half_life_days: 7}\n" + horizon


def with_teams(setup: Setup, seed: int) -> Setup:
    """``setup``'s jobs each in a team; :data:`IDLE_TEAM`'s first day moved into a burst."""
    rng = random.Random(seed)
    names, weights = list(TEAM_SHARES), list(TEAM_SHARES.values())
    jobs = []
    for job in setup.jobs:
        team = rng.choices(names, weights)[0]
        hour = job.submit_hour
        if team == IDLE_TEAM and hour < 24:
            hour = 24 + rng.uniform(0, BURST_HOURS)
        jobs.append(replace(job, team=team, submit_hour=hour))
    return replace(setup, jobs=tuple(sorted(jobs, key=lambda job: job.submit_hour)))


def run_seed(
    seed: int,
    *,
    days: int,
    work: Path,
    only: frozenset[str] | None = None,
    lending_horizon_hours: float | None = None,
) -> dict[str, PolicyMetrics]:
    """Each policy's measures on ``seed`` (only those named in ``only``, when given)."""
    config = config_text(pooled=True) + teams_text(lending_horizon_hours)
    setup = with_teams(drawn_setup(seed, days=days, work=work, name="teams.yaml", config=config), seed)
    found = {}
    runs = [(policy.value, policy, setup) for policy in POLICIES]
    runs.append((NO_TEAMS, SimPolicy.FAST, replace(setup, teams=())))
    for name, policy, shape in runs:
        if only is not None and name not in only:
            continue
        run = run_policy(shape, policy, SimOptions())
        instance, grid = week_grid(shape, run)
        violations = check_plan(instance, grid)
        if violations:
            raise AssertionError(f"{name}, seed {seed}: committed {violations[:3]}")
        found[name] = measure(setup, run)  # measured against the teams, even the run without them
    return found


def _table(seed: int, metrics: dict[str, PolicyMetrics]) -> str:
    teams = [name for name, _, _ in TEAMS]
    headers = [
        "policy",
        "value",
        "util",
        *(f"{t} met" for t in teams),
        *(f"{t} reclaim p90 h" for t in teams),
    ]
    headers += ["fairness", "lent P90 overruns"]
    rows = []
    for name, m in metrics.items():
        assert m.teams is not None
        by_team = m.teams.teams
        rows.append(
            [
                name,
                f"{m.value:,.0f}",
                f"{m.utilization:.1%}",
                *(f"{by_team[t].entitlement_met:.1%}" for t in teams),
                *(f"{by_team[t].reclaim_wait_h_p90:.2f}" for t in teams),
                f"{m.teams.fairness:.3f}",
                m.teams.lent_p90_overruns,
            ]
        )
    return f"seed {seed}:\n" + format_table(headers, rows)


def _goals(by_seed: dict[int, dict[str, PolicyMetrics]]) -> list[list[str]]:
    """The goals per seed for the fast mode (``n/a`` where a policy compared with was not run)."""
    rows = []
    for seed, metrics in by_seed.items():
        fast = metrics.get(SimPolicy.FAST.value)
        if fast is None or fast.teams is None:
            continue
        met = min((t.entitlement_met for t in fast.teams.teams.values() if t.backlog_hours >= 1), default=1.0)
        reclaim = max(t.reclaim_wait_h_p90 for t in fast.teams.teams.values())
        quotas = [
            metrics[p.value].utilization
            for p in (SimPolicy.FIFO_QUOTA, SimPolicy.PRIORITY_BACKFILL_QUOTA)
            if p.value in metrics
        ]
        gains = [
            fast.value / metrics[p.value].value - 1
            for p in POLICIES[1:]
            if p.value in metrics and metrics[p.value].value
        ]
        alone = metrics.get(NO_TEAMS)
        rows.append(
            [
                str(seed),
                f"{met:.1%}",
                f"{fast.teams.fairness:.3f}",
                f"{reclaim:.2f}",
                str(fast.teams.lent_p90_overruns),
                f"{(fast.utilization - alone.utilization) * 100:+.1f}" if alone else "n/a",
                f"{(fast.utilization - max(quotas)) * 100:+.1f}" if quotas else "n/a",
                f"{min(gains):+.1%}" if gains else "n/a",
            ]
        )
    return rows


GOAL_HEADERS = [
    "seed",
    "worst team met (>= 95%)",
    "fairness (>= 0.95)",
    "worst reclaim p90 h (<= 1)",
    "lent P90 overruns",
    "util - no teams, points (>= -2)",
    "util - best hard quota, points (>= 10)",
    "value vs the best baseline (>= 0)",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--held-out", default="2", help="seeds never looked at while the scheduler changed")
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument(
        "--policies",
        default="",
        help=f"comma-separated policies to run (default all; {NO_TEAMS_ARG}: the fast mode without teams)",
    )
    parser.add_argument(
        "--lending-horizon-hours",
        type=float,
        default=None,
        help="the config's lending_horizon_hours (default: the config's default)",
    )
    args = parser.parse_args(argv)
    named = named_policies(parser, args.policies, [policy.value for policy in POLICIES] + [NO_TEAMS_ARG])
    only = frozenset(NO_TEAMS if p == NO_TEAMS_ARG else p for p in named) or None
    seeds = [int(s) for s in args.seeds.split(",") if s]
    held_out = [int(s) for s in args.held_out.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="teams-week-") as work:
        print(f"== two pools: 32 H100 + 32 A100, three teams, {args.days} simulated days ==")
        for group, names in (("seeds", seeds), ("held-out seeds", held_out)):
            by_seed = {}
            for seed in names:
                by_seed[seed] = run_seed(
                    seed,
                    days=args.days,
                    work=Path(work),
                    only=only,
                    lending_horizon_hours=args.lending_horizon_hours,
                )
                print(_table(seed, by_seed[seed]), flush=True)
            if by_seed:
                print(f"{group}, the goals (fast):")
                print(format_table(GOAL_HEADERS, _goals(by_seed)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
