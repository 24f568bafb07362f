"""The service's configuration: the cluster, its real-time apps and the daemon's periods.

Read from a YAML file (``gpuplan daemon --config FILE``) or, when none is given, the demo
defaults (:func:`demo_config`). Every field is checked here, with the field's path in the
error, so a daemon never starts on a config it would trip over an hour later.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, time
from enum import StrEnum
from pathlib import Path
from typing import Any

from contract.errors import InputError
from contract.files import read_mapping
from contract.records import App, Cluster, DownWindowRecord
from contract.scenario import DEFAULT_HALF_LIFE_DAYS, Pool, Team
from contract.scenario_io import (
    MAX_CLUSTER_GPUS,
    MAX_PRIORITY,
    MAX_PROMISE_PENALTY,
    MAX_RT_PENALTY,
    gpus_per_model,
    parse_half_life,
    parse_pools,
    parse_teams,
)
from contract.times import parse_time
from features.gpu_models import known_model
from forecasting.realtime_training import BUNDLED_TRAFFIC_DIR
from gpuplan.app.core.retention import checked_keep_days
from gpuplan.app.core.slurm_settings import SlurmPool, SlurmSettings
from scheduler.model import HOT_PATH_BUDGET_MS, checked_budget_ms, fast_budget_ms

#: The bundled real-time traffic the demo cluster's two apps follow.
DEMO_APPS = (
    # app id, traffic file, priority, swap cap, GPUs its observed peak needs
    ("lora-serving", "alibaba_genai_lora_hourly.csv", 90.0, 2, 6),
    ("philly-inference", "philly_active_nodes_hourly.csv", 70.0, 1, 4),
)
DEMO_GPUS = 16
#: Allowed range of the plan cycle's period (the issue's 30-60 minutes, widened for tests).
CYCLE_MINUTES_RANGE = (1, 60)


class PlanWith(StrEnum):
    """Which job-duration quantile the plan reserves."""

    P50 = "p50"
    P90 = "p90"


@dataclass(frozen=True)
class AppTraffic:
    """Where an app's hourly traffic comes from when the store has none yet (CSV: hour,requests)."""

    app: str
    path: Path
    peak_gpus: int | None = None  # when the app gives no requests_per_gpu_hour


#: The default weight of a promise, per job: an hour late costs 0.2 x the job's priority, what
#: 0.2 of a GPU-hour of its output is worth (docs/closed-loop-log.md, "The break, the hours
#: beyond it, and a promise per job").
PROMISE_PENALTY = 0.2
#: A start no later than this after its promise keeps it: how promises are judged
#: (issue 21), and the delay the plans weigh as free.
PROMISE_SLACK_HOURS = 1
#: Breaking a promise (a start past its slack) costs at once what this many hours late do:
#: 5.6 GPU-hours of the job's output at the default weight.
PROMISE_BREAK_HOURS = 28.0
PROMISE_SLACK_RANGE = (0, 24)
PROMISE_BREAK_RANGE = (0.0, 168.0)
#: The promise counts the higher-priority work that arrived in this many hours before the
#: submit as what will arrive while the job waits (0: the promise is the plan's start).
PROMISE_LOOKBACK_HOURS = 12
PROMISE_LOOKBACK_RANGE = (0, 168)
#: With ``aging_hours`` set, a queued job's priority in the plans doubles once it has waited
#: that many hours beyond what FIFO would have made it wait, and grows with the fourth power
#: of that (``bridge.aged_priority``, ``bridge.fifo_waits``; docs/benchmarks.md, "Aging"): a
#: job starved by a stream of higher-priority work comes to outrank it. Off by default: at 24
#: hours it cost 2.6-5.8% of value over two simulated days, more than the 2% aimed at.
AGING_HOURS = 64.0
AGING_RANGE = (0.0, 8760.0)
#: ``lending_horizon_hours``: a team's idle quota is lent only within this many hours of the
#: plan's start; beyond it the owner's need is unknown and counted as its whole quota
#: (``team_scenario.with_teams``; docs/teams.md, "The lending horizon"). 0: no lending. Off
#: (None) by default: at 4 and 12 hours it cost 3-18 points of utilization on the benchmark's
#: tuning seeds, below the hard quotas' +10 points on seed 0.
LENDING_HORIZON_HOURS: float | None = None
LENDING_HORIZON_RANGE = (0.0, 8760.0)
#: A running job without a ``time_limit_hours`` in its spec overruns after its P90 hours
#: times this (the config's ``overrun_factor``): the operator is told (``gpuplan status``,
#: the daemon's log), and with ``overrun: stop`` the executor is told to stop it.
OVERRUN_FACTOR = 2.0
OVERRUN_FACTOR_RANGE = (1.0, 100.0)
#: What the daemon does with a job past its time limit: ``warn`` (the default: a P90-based
#: limit is a forecast, and stopping a run that is merely slow throws its work away) or
#: ``stop`` (the executor stops it; it ends ``cancelled``).
OVERRUN_ACTIONS = ("warn", "stop")


@dataclass(frozen=True)
class PromiseTerms:
    """How plans weigh the starts promised at submit (docs/closed-loop.md, "Promises").

    A promised job that starts ``d`` hours after its promise costs nothing while ``d <=
    slack_hours`` and ``penalty x priority x (d - slack_hours + break_hours)`` after, per
    job whatever its width: the cost jumps where the promise breaks, and grows with each
    hour beyond.

    The promise itself is the plan's start moved by the higher-priority work that arrived
    in the ``lookback_hours`` before the submit (:mod:`gpuplan.app.jobs.promises`; 0: the plan's
    start).
    """

    penalty: float = PROMISE_PENALTY
    slack_hours: int = PROMISE_SLACK_HOURS
    break_hours: float = PROMISE_BREAK_HOURS
    lookback_hours: int = PROMISE_LOOKBACK_HOURS

    def __post_init__(self) -> None:
        if not 0 <= self.penalty <= MAX_PROMISE_PENALTY:
            raise InputError("promise_penalty", f"a number in [0, {MAX_PROMISE_PENALTY:g}]", self.penalty)
        low, high = PROMISE_SLACK_RANGE
        if not low <= self.slack_hours <= high:
            raise InputError("promise_slack_hours", f"an integer in [{low}, {high}]", self.slack_hours)
        low_break, high_break = PROMISE_BREAK_RANGE
        if not low_break <= self.break_hours <= high_break:
            raise InputError(
                "promise_break_hours", f"a number in [{low_break:g}, {high_break:g}]", self.break_hours
            )
        low, high = PROMISE_LOOKBACK_RANGE
        if not low <= self.lookback_hours <= high:
            raise InputError("promise_lookback_hours", f"an integer in [{low}, {high}]", self.lookback_hours)

    def scenario_keys(self, step_minutes: int) -> dict[str, float | int]:
        """The scenario's promise keys (CONTRACT.md's extension, docs/contract.md); none at
        penalty 0, where the scenario is the contract's."""
        if self.penalty <= 0:
            return {}
        return {
            "promise_penalty": self.penalty,
            "promise_slack": self.slack_hours * 60 // step_minutes,
            "promise_break": self.break_hours * 60 / step_minutes,
        }


@dataclass(frozen=True)
class PrometheusSource:
    """An app whose hourly requests the recalibration reads from Prometheus: ``query``
    (PromQL, one series) evaluated at the end of each finished hour on the server at ``url``."""

    app: str
    url: str
    query: str


@dataclass(frozen=True)
class ServiceConfig:
    cluster: Cluster
    apps: tuple[App, ...]
    traffic: tuple[AppTraffic, ...] = ()
    prometheus: tuple[PrometheusSource, ...] = ()
    cycle_minutes: int = 30
    #: How often the hour in progress of Prometheus-fed apps is read for a surge.
    surge_watch_minutes: int = 5
    review_every_hours: float | None = 4.0
    review_time_limit_s: float = 10.0
    retrain_at: time | None = None  # nightly retrain from the stored history; off by default
    plan_budget_ms: float = 1000.0
    submit_budget_ms: float = HOT_PATH_BUDGET_MS
    plan_with: PlanWith = PlanWith.P90
    #: What a promised job's delay past its promised start costs the plan (penalty 0:
    #: promises weigh nothing). README, "Promises".
    promises: PromiseTerms = PromiseTerms()
    #: Hours of waiting after which a queued job's priority in the plans has doubled
    #: (``bridge.aged_priority``); None or 0: no aging.
    aging_hours: float | None = None
    #: Plan a queued job first once the start FIFO would have given it has come
    #: (``bridge.fifo_starts``, ``bridge.queued_priorities``); it outranks ``aging_hours``.
    fifo_deadline: bool = False
    #: ``warn`` or ``stop`` a running job past its time limit (:data:`OVERRUN_ACTIONS`).
    overrun: str = "warn"
    #: A job without ``time_limit_hours`` overruns after its P90 hours times this.
    overrun_factor: float = OVERRUN_FACTOR
    #: False: plans count estimated work, not wall time (the simulation, reproducible per seed).
    plan_wall_clock: bool = True
    models_dir: Path = Path("models")
    #: The jsonl executor's feed; None: the database's own (beside a SQLite file, see
    #: gpuplan/app/adapters/executors/jsonl.py), so that two databases never share one.
    commits_file: Path | None = None
    #: The executor's name in gpuplan/app/adapters/executors' registry; None: jsonl on the database's feed.
    executor: str | None = None
    demo_queue: bool = False  # seed a queue from the bundled job history on an empty database
    #: The daemon deletes runs older than this many days once a day (None: never).
    prune_keep_days: int | None = 30
    slurm: SlurmSettings | None = None  # the Slurm partition this cluster is (the `slurm:` section)
    #: app -> the command one real-time replica runs on one GPU (the Slurm executor's)
    replica_commands: Mapping[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    #: The cluster's pools (``cluster.pools``), side by side in this order; empty: one pool of
    #: all ``cluster.gpus``. Kept here, not in the stored :class:`Cluster` record.
    pools: tuple[Pool, ...] = ()
    #: app -> the pool it serves on (``apps[i].pool``; default: the first pool)
    app_pools: Mapping[str, str] = field(default_factory=dict)
    #: app -> each pool it may serve on -> its requests per GPU-hour there (``apps[i].gpu_models``,
    #: read per pool of those models); an app not here serves on its one pool (``app_pools``).
    app_rates: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: The teams (``teams:``): quotas per GPU model, weights (docs/teams.md); none: no teams.
    teams: tuple[Team, ...] = ()
    #: ``fair_share.half_life_days``: the half-life of the teams' past use.
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS
    #: ``lending_horizon_hours``: idle quota is lent only within it (:data:`LENDING_HORIZON_HOURS`).
    lending_horizon_hours: float | None = LENDING_HORIZON_HOURS

    def quota_balance(self) -> list[tuple[str, int, int]]:
        """Per GPU model some team has a quota of: (model, the quotas' sum, the model's GPUs)."""
        models = gpus_per_model(self.pools, self.cluster.gpus)
        return [
            (model, sum(team.quota.get(model, 0) for team in self.teams), gpus)
            for model, gpus in models.items()
            if any(model in team.quota for team in self.teams)
        ]


def demo_config(models_dir: Path = Path("models")) -> ServiceConfig:
    """16 GPUs, two real-time apps on bundled traffic, a queue from the bundled job history."""

    apps = tuple(
        App(id=app_id, priority=priority, swap_cap=cap, requests_per_gpu_hour=0.0, headroom=0.1)
        for app_id, _, priority, cap, _ in DEMO_APPS
    )
    traffic = tuple(
        AppTraffic(app_id, BUNDLED_TRAFFIC_DIR / name, peak_gpus)
        for app_id, name, _, _, peak_gpus in DEMO_APPS
    )
    return ServiceConfig(
        cluster=Cluster(gpus=DEMO_GPUS),
        apps=apps,
        traffic=traffic,
        models_dir=models_dir,
        demo_queue=True,
    )


# -- reading a YAML config -------------------------------------------------------------------

TOP_KEYS = {
    "cluster",
    "apps",
    "cycle_minutes",
    "surge_watch_minutes",
    "review_every_hours",
    "review_time_limit_s",
    "retrain_at",
    "plan_budget_ms",
    "submit_budget_ms",
    "plan_with",
    "plan_wall_clock",
    "promise_penalty",
    "promise_slack_hours",
    "promise_break_hours",
    "promise_lookback_hours",
    "aging_hours",
    "fifo_deadline",
    "overrun",
    "overrun_factor",
    "models_dir",
    "commits_file",
    "executor",
    "demo_queue",
    "prune_keep_days",
    "slurm",
    "teams",
    "fair_share",
    "lending_horizon_hours",
}
CLUSTER_KEYS = {"gpus", "pools", "step_minutes", "horizon", "decay", "rt_penalty", "down"}
#: A pool's keys beside the scenario's (``name``, ``gpu_model``, ``gpus``): where it lies in Slurm.
POOL_SLURM_KEYS = ("partition", "feature")
SLURM_KEYS = {
    "partition",
    "bin_dir",
    "slurm_conf",
    "timeout_s",
    "poll_seconds",
    "gpu_models",
    "start_grace_s",
}
APP_KEYS = {
    "id",
    "priority",
    "swap_cap",
    "requests_per_gpu_hour",
    "headroom",
    "traffic",
    "peak_gpus",
    "replica_command",
    "prometheus",
    "pool",
    "gpu_models",
}
PROMETHEUS_KEYS = {"url", "query"}


class _Fields:
    """Typed reads of one config document, each error naming the field's path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, field_name: str, expected: str, got: object) -> InputError:
        return InputError(field_name, expected, got, source=self.source)

    def mapping(self, value: object, name: str, allowed: set[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(name or "(top level)", "a mapping", type(value).__name__)
        unknown = sorted(set(map(str, value)) - allowed)
        if unknown:
            raise self.fail(
                f"{name}.{unknown[0]}" if name else unknown[0], f"one of {sorted(allowed)}", "unknown key"
            )
        return value

    def number(self, value: object, name: str, low: float, high: float) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(name, f"a finite number in [{low:g}, {high:g}]", value)
        if not low <= value <= high:
            raise self.fail(name, f"a number in [{low:g}, {high:g}]", value)
        return float(value)

    def integer(self, value: object, name: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(name, f"an integer in [{low}, {high}]", value)
        return value

    def boolean(self, value: object, name: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(name, "true or false", value)
        return value

    def budget_ms(self, value: object, name: str, *, optional: bool = False) -> float:
        """A fast-mode budget in the one range every face shares (``scheduler.model.checked_budget_ms``);
        ``optional``: absent or null is the hot path's (``scheduler.model.fast_budget_ms``)."""
        check = fast_budget_ms if optional else checked_budget_ms
        try:
            return check(value, name)  # type: ignore[arg-type]  # checked there
        except InputError as error:
            raise self.fail(name, error.expected, value) from None

    def text(self, value: object, name: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(name, "a non-empty string", value)
        return value

    def url(self, value: object, name: str) -> str:
        from urllib.parse import urlsplit

        expected = "an http:// or https:// URL of a server, such as http://127.0.0.1:9090"
        if not isinstance(value, str):
            raise self.fail(name, expected, value)
        parts = urlsplit(value.strip())
        if parts.scheme not in {"http", "https"} or not parts.hostname or parts.query or parts.fragment:
            raise self.fail(name, expected, value)
        if parts.username is not None or parts.password is not None:  # it would be logged
            raise self.fail(name, "a URL without user:password@", "a URL with credentials")
        return value.strip().rstrip("/")

    def instant(self, value: object, name: str) -> datetime:
        try:
            return parse_time(value if isinstance(value, str) else str(value), name)
        except InputError as error:
            raise self.fail(name, error.expected, value) from error


def _slurm(r: _Fields, raw: object, base: Path, pools: tuple[SlurmPool, ...] = ()) -> SlurmSettings:
    """The ``slurm:`` section; relative paths are read from the config file's folder. With
    ``pools``, its partition is theirs (joined by commas)."""
    s = r.mapping(raw, "slurm", SLURM_KEYS)
    if "partition" not in s and not pools:
        raise r.fail("slurm.partition", "the name of the Slurm partition gpuplan plans", "missing")
    partition = ",".join(dict.fromkeys(p.partition for p in pools))
    partition = partition or r.text(s["partition"], "slurm.partition")
    models = s.get("gpu_models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
        raise r.fail("slurm.gpu_models", "a list of node features that name GPU models", models)

    def path(key: str) -> Path | None:
        value = s.get(key)
        return None if value is None else (base / r.text(value, f"slurm.{key}")).resolve()

    return SlurmSettings(
        partition=partition,
        bin_dir=path("bin_dir"),
        slurm_conf=path("slurm_conf"),
        timeout_s=r.number(s.get("timeout_s", 30.0), "slurm.timeout_s", 0.1, 600),
        poll_seconds=r.number(s.get("poll_seconds", 60.0), "slurm.poll_seconds", 1, 3600),
        gpu_models=tuple(models),
        start_grace_s=r.number(s.get("start_grace_s", 120.0), "slurm.start_grace_s", 0, 86_400),
        pools=pools,
    )


#: Each pool's ``partition`` and ``feature`` as the config gives them (None: not given).
_Places = tuple[tuple[str | None, str | None], ...]


def _slurm_pools(r: _Fields, pools: tuple[Pool, ...], places: _Places, raw: object) -> tuple[SlurmPool, ...]:
    """Where each of ``cluster.pools`` lies in Slurm: its ``partition`` (default:
    ``slurm.partition``) and its ``feature`` (default, on a partition that several pools
    share: the pool's ``gpu_model``). Two pools on the same nodes are refused."""
    if not pools:
        return ()
    shared = raw.get("partition") if isinstance(raw, Mapping) else None
    named = [part if part is not None else shared for part, _ in places]
    found: list[SlurmPool] = []
    for index, (pool, given, (_, given_feature)) in enumerate(zip(pools, named, places, strict=True)):
        field_name = f"cluster.pools[{index}]"
        if given is None:
            expected = "the Slurm partition of the pool (or slurm.partition, shared by the pools)"
            raise r.fail(f"{field_name}.partition", expected, "missing")
        partition = r.text(given, f"{field_name}.partition" if places[index][0] else "slurm.partition")
        feature = given_feature
        if feature is None and named.count(partition) > 1:
            feature = pool.gpu_model  # pools that share a partition are told apart by a feature
        if any(p.partition == partition and p.feature == feature for p in found):
            expected = f"a node feature of partition {partition!r} that no other pool uses"
            raise r.fail(f"{field_name}.feature", expected, feature)
        found.append(SlurmPool(pool.name, partition, feature, pool.gpus))
    return tuple(found)


def _no_slurm_places(r: _Fields, places: _Places) -> None:
    """A pool's ``partition`` or ``feature`` means nothing without a ``slurm:`` section."""
    for index, place in enumerate(places):
        for key, value in zip(POOL_SLURM_KEYS, place, strict=True):
            if value is not None:
                raise r.fail(f"cluster.pools[{index}].{key}", "absent without a `slurm:` section", value)


def load_config(path: Path) -> ServiceConfig:
    """Read and check a YAML config; missing keys take the demo's defaults."""

    document = read_mapping(path, "--config", expected="a mapping of settings (cluster, apps, ...)")
    r = _Fields(str(path))
    top = r.mapping(document, "", TOP_KEYS)
    base = demo_config()
    cluster, pools, places = (base.cluster, (), ()) if "cluster" not in top else _cluster(r, top["cluster"])
    apps = _Apps(base.apps, base.traffic, base.prometheus, {}, {}, {})
    if "apps" in top:
        apps = _apps(r, top["apps"], path.parent, pools)
    slurm = None
    if top.get("slurm") is not None:
        slurm = _slurm(r, top["slurm"], path.parent, _slurm_pools(r, pools, places, top["slurm"]))
    else:
        _no_slurm_places(r, places)
    teams, half_life = _teams(r, top, cluster, pools)
    retrain_at = _retrain_at(r, top.get("retrain_at"))
    review = top.get("review_every_hours", base.review_every_hours)
    plan_with = top.get("plan_with", "p90")
    if plan_with not in {p.value for p in PlanWith}:
        raise r.fail("plan_with", "p50 or p90", plan_with)
    keep_days = _keep_days(r, top.get("prune_keep_days", base.prune_keep_days))
    commits_file = top.get("commits_file")
    overrun = top.get("overrun", "warn")
    if overrun not in OVERRUN_ACTIONS:
        raise r.fail("overrun", " or ".join(OVERRUN_ACTIONS), overrun)
    return ServiceConfig(
        cluster=cluster,
        apps=apps.apps,
        traffic=apps.traffic,
        prometheus=apps.prometheus,
        cycle_minutes=r.integer(top.get("cycle_minutes", 30), "cycle_minutes", *CYCLE_MINUTES_RANGE),
        surge_watch_minutes=r.integer(top.get("surge_watch_minutes", 5), "surge_watch_minutes", 1, 60),
        review_every_hours=None if review is None else r.number(review, "review_every_hours", 0.5, 168),
        review_time_limit_s=r.number(top.get("review_time_limit_s", 10.0), "review_time_limit_s", 0.1, 600),
        retrain_at=retrain_at,
        plan_budget_ms=r.budget_ms(top.get("plan_budget_ms", 1000.0), "plan_budget_ms"),
        submit_budget_ms=r.budget_ms(top.get("submit_budget_ms"), "submit_budget_ms", optional=True),
        plan_with=PlanWith(plan_with),
        plan_wall_clock=r.boolean(top.get("plan_wall_clock", True), "plan_wall_clock"),
        promises=_promise_terms(r, top),
        aging_hours=None
        if top.get("aging_hours") is None
        else r.number(top.get("aging_hours"), "aging_hours", *AGING_RANGE) or None,
        fifo_deadline=r.boolean(top.get("fifo_deadline", False), "fifo_deadline"),
        overrun=overrun,
        overrun_factor=r.number(
            top.get("overrun_factor", OVERRUN_FACTOR), "overrun_factor", *OVERRUN_FACTOR_RANGE
        ),
        models_dir=Path(r.text(top.get("models_dir", "models"), "models_dir")),
        commits_file=None if commits_file is None else Path(r.text(commits_file, "commits_file")),
        executor=None if top.get("executor") is None else r.text(top["executor"], "executor"),
        demo_queue=bool(top.get("demo_queue", "cluster" not in top and "apps" not in top)),
        prune_keep_days=keep_days,
        slurm=slurm,
        replica_commands=apps.replica_commands,
        pools=pools,
        app_pools=apps.pools,
        app_rates=apps.rates,
        teams=teams,
        half_life_days=half_life,
        lending_horizon_hours=None
        if top.get("lending_horizon_hours") is None
        else r.number(top["lending_horizon_hours"], "lending_horizon_hours", *LENDING_HORIZON_RANGE),
    )


def _teams(
    r: _Fields, top: Mapping[str, Any], cluster: Cluster, pools: tuple[Pool, ...]
) -> tuple[tuple[Team, ...], float]:
    """``teams:`` and ``fair_share:``, read by the scenario's rules (docs/contract.md, "Teams"):
    a quota names a GPU model of the cluster (``default`` without pools), at most its GPUs."""
    if top.get("teams") is None:
        for key in ("fair_share", "lending_horizon_hours"):
            if top.get(key) is not None:
                raise r.fail(key, "absent without a `teams:` section", top[key])
        return (), DEFAULT_HALF_LIFE_DAYS
    teams = parse_teams(top["teams"], models=gpus_per_model(pools, cluster.gpus), source=r.source)
    return teams, parse_half_life(top.get("fair_share"), source=r.source)


def _cluster(r: _Fields, value: object) -> tuple[Cluster, tuple[Pool, ...], _Places]:
    """The ``cluster:`` section: its GPUs (``gpus``, or ``pools``, whose GPUs it sums), the
    horizon, the objective's terms and the down windows; and where each pool lies in Slurm."""
    raw = r.mapping(value, "cluster", CLUSTER_KEYS)
    pools, places = _pools(r, raw["pools"]) if "pools" in raw else ((), ())
    if "gpus" not in raw and not pools:
        raise r.fail("cluster.gpus", f"an integer in [1, {MAX_CLUSTER_GPUS}] (or cluster.pools)", "missing")
    total = sum(pool.gpus for pool in pools)
    if total > MAX_CLUSTER_GPUS:
        raise r.fail("cluster.pools", f"pools of at most {MAX_CLUSTER_GPUS} GPUs in all", f"{total} GPUs")
    gpus = r.integer(raw["gpus"], "cluster.gpus", 1, MAX_CLUSTER_GPUS) if "gpus" in raw else total
    if pools and gpus != total:
        raise r.fail("cluster.gpus", f"the sum of the pools' GPUs ({total}), or absent", gpus)
    down = []
    for index, window in enumerate(raw.get("down", []) or []):
        name = f"cluster.down[{index}]"
        w = r.mapping(window, name, {"gpu", "start", "end"})
        down.append(
            DownWindowRecord(
                gpu=r.integer(w.get("gpu"), f"{name}.gpu", 0, gpus - 1),
                start=r.instant(w.get("start"), f"{name}.start"),
                end=None if w.get("end") is None else r.instant(w["end"], f"{name}.end"),
            )
        )
    cluster = Cluster(
        gpus=gpus,
        step_minutes=r.integer(raw.get("step_minutes", 60), "cluster.step_minutes", 60, 60),
        horizon_steps=r.integer(raw.get("horizon", 24), "cluster.horizon", 1, 168),
        decay=r.number(raw.get("decay", 0.95), "cluster.decay", 1e-6, 1.0),
        rt_penalty=r.number(raw.get("rt_penalty", 8.0), "cluster.rt_penalty", 0.0, MAX_RT_PENALTY),
        down=tuple(down),
    )
    return cluster, pools, places


def _pools(r: _Fields, value: object) -> tuple[tuple[Pool, ...], _Places]:
    """``cluster.pools``: a list of ``{name, gpu_model, gpus}``, read by the scenario's own rules
    (its ``pools``, docs/contract.md: names once each, at least one GPU each); a pool's GPUs
    follow the pools before it. A pool's ``partition`` and ``feature`` (where it lies in
    Slurm) are set aside for the ``slurm:`` section."""
    places: list[tuple[str | None, str | None]] = []
    entries: object = value
    if isinstance(value, list):
        listed: list[object] = []
        entries = listed
        for index, entry in enumerate(value):
            if not isinstance(entry, Mapping):
                listed.append(entry)  # the scenario's rules refuse it
                continue
            given = [entry.get(key) for key in POOL_SLURM_KEYS]
            for key, got in zip(POOL_SLURM_KEYS, given, strict=True):
                if got is not None:
                    r.text(got, f"cluster.pools[{index}].{key}")
            places.append((given[0], given[1]))
            listed.append({k: v for k, v in entry.items() if k not in POOL_SLURM_KEYS})
    try:
        pools = parse_pools(entries, source=r.source)
    except InputError as error:
        raise InputError(
            f"cluster.{error.field}", error.expected, error.got, source=r.source, hint=error.hint
        ) from None
    placed: list[Pool] = []
    for pool in pools:
        placed.append(replace(pool, first_gpu=sum(p.gpus for p in placed)))
    return tuple(placed), tuple(places)


@dataclass(frozen=True, slots=True)
class _Apps:
    """The ``apps:`` section: the apps, the traffic files and Prometheus sources of those that
    name one, and each app's replica command."""

    apps: tuple[App, ...]
    traffic: tuple[AppTraffic, ...]
    prometheus: tuple[PrometheusSource, ...]
    replica_commands: dict[str, str]
    pools: dict[str, str]  # app -> the pool it names
    rates: dict[str, dict[str, float]]  # app -> pool -> requests per GPU-hour (its gpu_models)


def _apps(r: _Fields, value: object, folder: Path, pools: tuple[Pool, ...]) -> _Apps:
    """The ``apps:`` list; traffic files are read from ``folder`` (the config file's). An app's
    ``pool`` is one of ``pools`` (the cluster's), and only on a cluster of pools."""
    if not isinstance(value, list):
        raise r.fail("apps", "a list of apps", type(value).__name__)
    app_list, traffic_list, prometheus_list = [], [], []
    replica_commands: dict[str, str] = {}
    app_pools: dict[str, str] = {}
    app_rates: dict[str, dict[str, float]] = {}
    names = [pool.name for pool in pools]
    for index, raw_app in enumerate(value):
        name = f"apps[{index}]"
        a = r.mapping(raw_app, name, APP_KEYS)
        app_id = r.text(a.get("id"), f"{name}.id")
        rate = a.get("requests_per_gpu_hour")
        peak = a.get("peak_gpus")
        if "gpu_models" in a:
            app_rates[app_id] = _app_rates(r, a, name, pools)
            rate = next(iter(app_rates[app_id].values()))  # on its first pool, the cluster's order
        elif rate is None and (peak is None or "traffic" not in a):
            raise r.fail(
                f"{name}.requests_per_gpu_hour", "a number > 0 (or peak_gpus with traffic)", "missing"
            )
        app_list.append(
            App(
                id=app_id,
                priority=r.number(a.get("priority", 50), f"{name}.priority", 1e-9, MAX_PRIORITY),
                swap_cap=r.integer(a.get("swap_cap", 2), f"{name}.swap_cap", 0, MAX_CLUSTER_GPUS),
                requests_per_gpu_hour=0.0
                if rate is None
                else r.number(rate, f"{name}.requests_per_gpu_hour", 1e-9, 1e15),
                headroom=r.number(a.get("headroom", 0.0), f"{name}.headroom", 0.0, 10.0),
            )
        )
        if "pool" in a:
            if not pools:
                raise r.fail(f"{name}.pool", "absent on a cluster without cluster.pools", a["pool"])
            if a["pool"] not in names:
                raise r.fail(f"{name}.pool", f"one of the cluster's pools {names}", a["pool"])
            app_pools[app_id] = a["pool"]
        if "replica_command" in a:
            replica_commands[app_id] = r.text(a["replica_command"], f"{name}.replica_command")
        if "traffic" in a:
            traffic_list.append(
                AppTraffic(
                    app_id,
                    (folder / r.text(a["traffic"], f"{name}.traffic")).resolve(),
                    None if peak is None else r.integer(peak, f"{name}.peak_gpus", 1, MAX_CLUSTER_GPUS),
                )
            )
        if "prometheus" in a:
            prometheus_list.append(_prometheus_source(r, app_id, a["prometheus"], f"{name}.prometheus"))
    return _Apps(
        tuple(app_list), tuple(traffic_list), tuple(prometheus_list), replica_commands, app_pools, app_rates
    )


def _app_rates(r: _Fields, a: Mapping[str, Any], name: str, pools: tuple[Pool, ...]) -> dict[str, float]:
    """An app's ``gpu_models``: GPU model -> its requests per GPU-hour on it, read per pool of
    those models (pool name -> rate, in the cluster's order). It then names no ``pool`` and no
    ``requests_per_gpu_hour``, and the cluster has ``cluster.pools``."""
    given = a["gpu_models"]
    field_name = f"{name}.gpu_models"
    for key in ("pool", "requests_per_gpu_hour"):
        if key in a:
            raise r.fail(
                f"{name}.{key}", f"absent beside {field_name} (its requests per GPU-hour per model)", a[key]
            )
    if not pools:
        raise r.fail(field_name, "absent on a cluster without cluster.pools", given)
    if not isinstance(given, Mapping) or not given:
        raise r.fail(
            field_name, "a mapping of GPU model -> requests per GPU-hour, such as {h100: 120}", given
        )
    models = [pool.gpu_model for pool in pools]
    canonical = {model: known_model(model) or model for model in models}
    rates: dict[str, float] = {}
    for model, rate in given.items():
        key = known_model(str(model)) or str(model)
        if key not in canonical.values():
            raise r.fail(
                f"{field_name}.{model}",
                f"a GPU model of the cluster's pools {list(dict.fromkeys(models))}",
                model,
            )
        if (
            isinstance(rate, bool)
            or not isinstance(rate, int | float)
            or not math.isfinite(rate)
            or rate <= 0
        ):
            raise r.fail(f"{field_name}.{model}", "requests per GPU-hour on that model, a number > 0", rate)
        rates[key] = r.number(rate, f"{field_name}.{model}", 1e-9, 1e15)
    return {
        pool.name: rates[canonical[pool.gpu_model]] for pool in pools if canonical[pool.gpu_model] in rates
    }


def _retrain_at(r: _Fields, value: object) -> time | None:
    """``retrain_at``: a time of day, or None (off)."""
    if value is None:
        return None
    try:
        return time.fromisoformat(str(value))
    except ValueError as error:
        raise r.fail("retrain_at", "a time of day such as 03:00, or null (off)", value) from error


def _keep_days(r: _Fields, value: object) -> int | None:
    """``prune_keep_days``: the days of history kept, or None (never pruned)."""
    if value is None:
        return None
    try:
        return checked_keep_days(value, "prune_keep_days")
    except InputError as error:
        raise r.fail("prune_keep_days", f"{error.expected}, or null (never)", value) from None


def _promise_terms(r: _Fields, top: Mapping[str, Any]) -> PromiseTerms:
    """The promise terms: the delay penalty, the slack, the break and the look-back."""
    return PromiseTerms(
        penalty=r.number(
            top.get("promise_penalty", PROMISE_PENALTY), "promise_penalty", 0.0, MAX_PROMISE_PENALTY
        ),
        slack_hours=r.integer(
            top.get("promise_slack_hours", PROMISE_SLACK_HOURS),
            "promise_slack_hours",
            *PROMISE_SLACK_RANGE,
        ),
        break_hours=r.number(
            top.get("promise_break_hours", PROMISE_BREAK_HOURS),
            "promise_break_hours",
            *PROMISE_BREAK_RANGE,
        ),
        lookback_hours=r.integer(
            top.get("promise_lookback_hours", PROMISE_LOOKBACK_HOURS),
            "promise_lookback_hours",
            *PROMISE_LOOKBACK_RANGE,
        ),
    )


def _prometheus_source(r: _Fields, app: str, value: object, name: str) -> PrometheusSource:
    """``prometheus: {url, query}`` of one app; both are required."""
    raw = r.mapping(value, name, PROMETHEUS_KEYS)
    if "url" not in raw:
        raise r.fail(f"{name}.url", "the URL of the Prometheus server", "missing")
    if "query" not in raw:
        raise r.fail(f"{name}.query", "a PromQL query of the app's requests in one hour", "missing")
    query = r.text(raw["query"], f"{name}.query")
    return PrometheusSource(app, r.url(raw["url"], f"{name}.url"), query.strip())
