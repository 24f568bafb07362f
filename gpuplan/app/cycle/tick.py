"""The daemon's jobs, each a plain function of (store, clock): plan, recalibrate, review, retrain.

One plan cycle reads as the pipeline::

    snapshot = load_snapshot(store, start, config)     # state, forecasts
    document = scenario_document(snapshot)             # the contract's scenario
    plan     = policies.plan(instance, FAST, budget)   # checked before it returns
    store.record_run(run, commit=column 0)             # one transaction

Step 0 of a cycle is the current wall-clock hour. Only that hour is committed, once: a
second cycle in an hour that is already committed plans from the next hour on, with the
committed hour as its running state, so every stored plan starts where nothing is
decided yet and the swap cap holds across runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from contract.errors import InputError
from contract.records import App, Cluster, Job, JobState, PlanRun, RunMode, TrafficHour
from contract.scenario import Pool
from contract.scenario_io import parse_scenario
from forecasting.gpu_mapping import AppCapacity
from forecasting.persistence import model_bytes, model_from_bytes
from forecasting.realtime import KEPT_HOURS, RealtimeProfile
from gpuplan.app.adapters.traffic_sources import store_traffic
from gpuplan.app.core.bridge import (
    STEP,
    AppDemand,
    Snapshot,
    app_forecasts,
    column_commit,
    floor_hour,
    hour_allocation,
    realtime_sets,
    run_record,
    scenario_document,
    time_limit,
)
from gpuplan.app.core.config import OVERRUN_FACTOR, ServiceConfig
from gpuplan.app.core.forecasters import Forecasters
from gpuplan.app.core.job_models import estimates_on_pools
from gpuplan.app.core.ports import Executor
from gpuplan.app.core.team_scenario import with_teams
from gpuplan.app.core.team_use import history_since
from gpuplan.app.core.tokens import NotFoundError
from gpuplan.app.cycle.finish import cancel
from gpuplan.app.cycle.outbox import deliver_pending
from scheduler.model import SolveOptions
from scheduler.policies import PolicyName, plan
from storage.store import Store

if TYPE_CHECKING:
    from collections.abc import Mapping

    from features.traffic import HourlyTraffic
    from forecasting.realtime import FloatArray, HourArray, RealtimeProfile
    from scheduler.policies import Plan, PolicyName

log = logging.getLogger(__name__)

#: The least run of stored hours an app's first profile is fitted on: one daily cycle.
MIN_FIRST_PROFILE_HOURS = 24
#: How far ahead an app's demand is forecast: twice the horizon, so that the swap-capped
#: curve starts a rise just after the horizon in time.
LOOKAHEAD = 2


@dataclass(frozen=True)
class CycleReport:
    """What one plan cycle did (also the daemon's one log line per cycle)."""

    hour: datetime
    start: datetime
    run_id: int | None
    committed: bool
    objective: float
    latency_ms: float
    jobs_committed: int
    realtime_gpus: int
    status: str
    utilization: float
    rt_coverage: float
    queue_length: int
    #: The stored run itself (the hot path answers from it without reading it back).
    run: PlanRun | None = field(default=None, repr=False, compare=False)
    #: The amendment the cycle made to the hour already committed (its ``seq``; None: none),
    #: the batch jobs it started and the real-time GPUs it added.
    amendment: int | None = None
    jobs_amended: int = 0
    realtime_gpus_amended: int = 0

    def log_line(self) -> str:
        line = (
            f"cycle hour={self.hour.isoformat()} start={self.start.isoformat()} run={self.run_id} "
            f"committed={str(self.committed).lower()} objective={self.objective:.1f} "
            f"latency_ms={self.latency_ms:.1f} jobs_committed={self.jobs_committed} "
            f"realtime_gpus={self.realtime_gpus} status={self.status}"
        )
        if self.amendment is None:
            return line
        return (
            f"{line} amendment={self.amendment} jobs_amended={self.jobs_amended} "
            f"realtime_gpus_amended={self.realtime_gpus_amended}"
        )


# -- loading -------------------------------------------------------------------------------------


def load_profile(store: Store, app: str) -> RealtimeProfile | None:

    blob = store.profile(app)
    if blob is None:
        return None
    # Data only: a row in any other form (an older version's pickle) is refused, never loaded.
    return model_from_bytes(
        blob,
        RealtimeProfile,
        field="profile",
        source=f"the stored profile of app {app!r}",
        saved_by="the daemon",
        remedy="The next recalibration fits a new one on the app's stored traffic.",
    )


def app_demand(
    store: Store, app: App, start: datetime, hours: int, *, partial_rate: float | None = None
) -> AppDemand:
    """P50 and P90 requests for ``hours`` hours from ``start`` from the app's stored profile,
    and the requests its GPUs are planned for (the P90, raised where a surge is a risk).

    Hours the profile has already seen (a cycle replayed in the past) take the stored
    traffic instead; an app with no profile and no traffic gets no demand (logged).
    ``partial_rate`` is the hour in progress's requests at the rate seen so far: the
    nowcast reads it as the latest hour when the forecast starts after that hour (a plan
    that starts at the hour in progress, before its commit, forecasts it as fitted).
    """
    import numpy as np

    profile = load_profile(store, app.id)
    if profile is None:
        log.warning("app %s has no demand profile yet; planning it with no demand", app.id)
        return AppDemand(app, [0.0] * hours, [0.0] * hours)
    seen_until = next_unseen_hour(profile)
    known = max(0, min(hours, int((seen_until - start) / STEP)))
    p50: list[float] = []
    p90: list[float] = []
    if known:
        actual = {row.hour: row.requests for row in store.traffic(app.id, start, start + known * STEP)}
        for t in range(known):
            value = actual.get(start + t * STEP, 0.0)
            p50.append(value)
            p90.append(value)
    reserve = list(p90)
    first = np.datetime64(start.replace(tzinfo=None) + known * STEP, "h")
    if hours > known:
        partial = partial_rate if start + known * STEP > seen_until else None
        capacity = AppCapacity(app.requests_per_gpu_hour, app.headroom, app.swap_cap)
        forecast = profile.predict(first, hours - known, partial=partial, regrow=capacity.regrow)
        p50 += [float(v) for v in forecast.p50]
        p90 += [float(v) for v in forecast.p90]
        reserve += [float(v) for v in forecast.planned]
    return AppDemand(app, p50, p90, reserve)


def require_cluster(store: Store) -> Cluster:
    """The stored cluster; a database the daemon has not set up yet is an error that says so."""
    cluster = store.cluster()
    if cluster is None:
        raise InputError("db", "a database with a cluster (run `gpuplan daemon --once` first)", "none")
    return cluster


def down_gpus(cluster: Cluster, hour: datetime) -> frozenset[int]:
    """GPUs down at any moment of ``hour``."""
    return frozenset(w.gpu for w in cluster.down if w.start < hour + STEP and (w.end is None or w.end > hour))


def load_snapshot(
    store: Store,
    start: datetime,
    config: ServiceConfig,
    forecasters: Forecasters,
    *,
    partial_rates: Mapping[str, float] | None = None,
) -> Snapshot:
    """The state the plan starting at ``start`` sees; queued jobs without an estimate get one.

    The hour before ``start``, when committed, is taken with its amendments: the plan
    starts from what really holds the GPUs. ``partial_rates`` (app -> requests at the rate
    seen so far in the hour in progress) feed the apps' nowcasts.
    """
    cluster = require_cluster(store)
    waiting = store.jobs([JobState.QUEUED])
    new_estimates = estimates_on_pools(
        forecasters, [job for job in waiting if job.estimate is None], config.pools
    )
    queued = []
    # A block lies inside one pool: a job larger than the largest is left out of the plan.
    largest = max((pool.gpus for pool in config.pools), default=cluster.gpus)
    for stored in waiting:
        job = stored
        if job.estimate is None and job.id in new_estimates:
            store.set_estimate(job.id, new_estimates[job.id])
            job = replace(job, estimate=new_estimates[job.id])
        if job.estimate is None:
            continue
        if job.estimate.gpus <= largest:
            queued.append(job)
        elif config.pools:
            log.warning("job %s needs more GPUs than the largest pool has (%d); left queued", job.id, largest)
        else:
            log.warning("job %s needs more GPUs than the cluster has; left queued", job.id)
    running = store.jobs([JobState.RUNNING])
    warn_overruns(running, start, config.overrun_factor, config.pools)
    apps = store.apps()
    previous = hour_allocation(store, start - STEP)
    held = realtime_sets(previous, [a.id for a in apps]) if previous else {}
    horizon = cluster.horizon_steps
    rates = partial_rates or {}
    demand = [
        app_demand(store, app, start, LOOKAHEAD * horizon, partial_rate=rates.get(app.id)) for app in apps
    ]
    # The teams' past use and arrivals read the jobs that finished (docs/teams.md).
    finished = (
        store.jobs([JobState.DONE], submitted_since=history_since(start, config.half_life_days))
        if config.teams
        else []
    )
    return Snapshot(
        start=start,
        cluster=cluster,
        queued=queued,
        running=running,
        demand=demand,
        realtime_sets=held,
        finished=finished,
    )


#: The running jobs whose overrun this process has logged: each is warned of once.
_warned_overruns: set[str] = set()


def warn_overruns(
    running: Collection[Job], now: datetime, factor: float = OVERRUN_FACTOR, pools: Sequence[Pool] = ()
) -> list[str]:
    """Log a warning, once per job, for each running job past its time limit
    (``bridge.time_limit`` with the config's ``overrun_factor``, on its pool of ``pools``):
    without an executor that stops it, it holds its GPUs until it is reported done. Returns the
    jobs warned of now."""
    warned = []
    for job in running:
        limit = time_limit(job, factor, pools)
        if limit is not None and now >= limit and job.id not in _warned_overruns:
            _warned_overruns.add(job.id)
            warned.append(job.id)
            log.warning(
                "job %s has run past its time limit (started %s, limit %s) and still holds GPUs %s; "
                "stop it, or report it with `gpuplan done %s`",
                job.id,
                job.started_at.isoformat() if job.started_at else "?",
                limit.isoformat(),
                f"{job.first_gpu}-{(job.first_gpu or 0) + (job.gpus or 1) - 1}",
                job.id,
            )
    return warned


def stop_overruns(store: Store, now: datetime, config: ServiceConfig, executor: Executor) -> list[str]:
    """With the config's ``overrun: stop``, each running job past its time limit is stopped
    through ``executor`` and ends ``cancelled`` (its GPUs free for the plan that follows).
    Returns the jobs stopped."""
    if config.overrun != "stop":
        return []
    stopped = []
    for job in store.jobs([JobState.RUNNING]):
        limit = time_limit(job, config.overrun_factor, config.pools)
        if limit is not None and now >= limit:
            cancel(store, job.id, now, executor)
            stopped.append(job.id)
            log.warning(
                "job %s ran past its time limit (%s): stopped (config `overrun: stop`)",
                job.id,
                limit.isoformat(),
            )
    return stopped


# -- planning ------------------------------------------------------------------------------------


def plan_snapshot(
    snapshot: Snapshot,
    config: ServiceConfig,
    policy: PolicyName,
    *,
    budget_ms: float,
    time_limit_s: float = 10.0,
) -> tuple[dict[str, Any], Plan]:
    """The snapshot's scenario and its checked plan."""

    name = f"gpuplan-{snapshot.start:%Y%m%dT%H%M}"
    document = scenario_document(
        snapshot,
        config.plan_with,
        name=name,
        promises=config.promises,
        aging_hours=config.aging_hours,
        fifo_deadline=config.fifo_deadline,
        pools=config.pools,
        app_pools=config.app_pools,
        app_rates=config.app_rates,
    )
    document = with_teams(document, snapshot, config)  # the config's teams (docs/teams.md)
    instance = parse_scenario(document, source=name)
    options = SolveOptions(
        time_limit_s=time_limit_s,
        budget_ms=budget_ms,
        wall_clock=config.plan_wall_clock,
    )
    if not config.plan_wall_clock:  # work-only plans repeat, the full mode's too: one CP-SAT worker
        options = replace(options, workers=1)
    return document, plan(instance, policy, options)


def _better_review(store: Store, start: datetime, digest: str, objective: float) -> PlanRun | None:
    """A stored review of the same inputs that scored better than ``objective``."""
    for review in store.runs(mode=RunMode.REVIEW, start=start, limit=5):
        if review.inputs_hash == digest and review.objective > objective + 1e-9:
            return review
    return None


def first_open_hour(store: Store, now: datetime) -> datetime:
    """Step 0 of a plan made at ``now``: this hour, or the hour after the latest committed one
    when that is this hour or later (commits only move forward: a clock stepped back plans
    from the latest committed state and commits nothing)."""
    hour = floor_hour(now)
    latest = store.last_commit()
    if latest is None or latest.hour < hour:
        return hour
    if latest.hour > hour:
        log.warning(
            "the clock (%s) is before the latest committed hour %s: nothing is committed; "
            "planning from %s (replay the past with `gpuplan export` and `gpuplan plan`)",
            now.isoformat(),
            latest.hour.isoformat(),
            (latest.hour + STEP).isoformat(),
        )
    return latest.hour + STEP


def _run_of(
    snapshot: Snapshot,
    document: dict[str, Any],
    result: Plan,
    *,
    now: datetime,
    mode: RunMode,
    started: float,
) -> PlanRun:
    """A planning result as the run to store; its latency runs from ``started`` to now."""
    return run_record(
        document,
        start=snapshot.start,
        created_at=now,
        mode=mode,
        policy=result.policy,
        grid=result.grid,
        metrics=result.metrics.as_dict(),
        latency_ms=(time.perf_counter() - started) * 1000,
        status=result.status,
        bound=result.bound,
        forecasts=app_forecasts(snapshot),
    )


def fresh_run(
    store: Store,
    now: datetime,
    config: ServiceConfig,
    forecasters: Forecasters,
    *,
    mode: RunMode = RunMode.SUBMIT,
    policy: PolicyName | None = None,
    partial_rates: Mapping[str, float] | None = None,
) -> tuple[Snapshot, PlanRun]:
    """The queue planned from the first open hour (the fast mode unless ``policy``), and the
    run that holds the plan, not stored."""

    started = time.perf_counter()
    snapshot = load_snapshot(
        store, first_open_hour(store, now), config, forecasters, partial_rates=partial_rates
    )
    budget = config.plan_budget_ms if mode is RunMode.PLAN else config.submit_budget_ms
    document, result = plan_snapshot(snapshot, config, policy or PolicyName.FAST, budget_ms=budget)
    return snapshot, _run_of(snapshot, document, result, now=now, mode=mode, started=started)


def plan_cycle(
    store: Store,
    now: datetime,
    config: ServiceConfig,
    executor: Executor | None = None,
    *,
    forecasters: Forecasters | None = None,
    mode: RunMode = RunMode.PLAN,
    policy: PolicyName | None = None,
    partial_rates: Mapping[str, float] | None = None,
) -> CycleReport:
    """Plan 24 hours from the current hour, store the run, commit the hour once, execute it.

    ``mode=SUBMIT`` is the hot path after a submission: the same plan, stored, never committed.
    ``policy`` is the fast mode unless a comparison (``gpuplan simulate``) runs a baseline
    through the same cycle.
    """
    forecasters = forecasters or Forecasters(config.models_dir)
    hour = floor_hour(now)
    if executor is not None and mode is RunMode.PLAN:
        stop_overruns(store, now, config, executor)
    snapshot, run = fresh_run(
        store, now, config, forecasters, mode=mode, policy=policy, partial_rates=partial_rates
    )
    start = snapshot.start
    review = _better_review(store, start, run.inputs_hash, run.objective) if mode is RunMode.PLAN else None
    if review is not None:
        log.info(
            "starting from review run %s (objective %.1f > %.1f)", review.id, review.objective, run.objective
        )
        run = replace(
            run,
            grid=review.grid,
            objective=review.objective,
            metrics=review.metrics,
            status=review.status,
            bound=review.bound,
            policy=review.policy,
            extra={"from_review": review.id},
        )
    commit = column_commit(run.grid, hour) if start == hour and mode is RunMode.PLAN else None
    stored = store.record_run(run, commit, deliver_to=None if executor is None else executor.name)
    if executor is not None and mode is RunMode.PLAN:
        # The outbox: this hour's commit and any earlier one the executor has not acknowledged.
        deliver_pending(store, executor, now)
    app_ids = {a.app.id for a in snapshot.demand}
    report = CycleReport(
        hour=hour,
        start=start,
        run_id=stored.id,
        committed=stored.committed,
        objective=run.objective,
        latency_ms=run.latency_ms,
        jobs_committed=0
        if commit is None or not stored.committed
        else len([a for a in commit.assignments if a.job not in app_ids]),
        realtime_gpus=0
        if commit is None
        else sum(len(a.gpus) for a in commit.assignments if a.job in app_ids),
        status=run.status,
        utilization=float(run.metrics.get("utilization", 0.0)),
        rt_coverage=float(run.metrics.get("rt_coverage", 1.0)),
        queue_length=len(store.jobs([JobState.QUEUED])),  # after the commit: what `status` shows
        run=stored,
    )
    log.debug(report.log_line())  # the daemon's cycle line is amend_cycle's, once amended
    return report


def review(
    store: Store, now: datetime, config: ServiceConfig, *, forecasters: Forecasters | None = None
) -> PlanRun:
    """A time-limited full-mode plan of what the next plan cycle will see, stored beside it."""

    started = time.perf_counter()
    forecasters = forecasters or Forecasters(config.models_dir)
    start = first_open_hour(store, now)
    snapshot = load_snapshot(store, start, config, forecasters)
    document, result = plan_snapshot(
        snapshot,
        config,
        PolicyName.FULL,
        budget_ms=config.plan_budget_ms,
        time_limit_s=config.review_time_limit_s,
    )
    run = _run_of(snapshot, document, result, now=now, mode=RunMode.REVIEW, started=started)
    stored = store.record_run(run)
    log.info(
        "review start=%s objective=%.1f bound=%s status=%s",
        start.isoformat(),
        run.objective,
        "none" if run.bound is None else f"{run.bound:.1f}",
        run.status,
    )
    return stored


# -- recalibrating -------------------------------------------------------------------------------


def recalibrate(
    store: Store, now: datetime, config: ServiceConfig, *, skip: Collection[str] = ()
) -> list[str]:
    """Feed each app's profile the stored traffic hours it has not seen, up to the last full hour.

    An hour that is missing or not a finite count >= 0 is skipped, and the log says so; the
    profile is then not updated with it (its next update skips the gap). An app with no
    profile yet (its traffic comes from Prometheus or ``ingest`` only), or a stored profile
    in a form that is refused (a pickle), gets one fitted once it has a day of stored hours
    without a gap. The apps in ``skip`` (whose traffic source failed
    this time) are left for the next recalibration. Returns the apps whose profile moved.
    """
    import numpy as np

    updated = []
    through = floor_hour(now)  # hours before this one are complete
    for app in store.apps():
        if app.id in skip:
            continue
        try:
            profile = load_profile(store, app.id)
        except InputError as error:
            # A row in another form (an older version's pickle) is never loaded: it is
            # replaced by a profile fitted on the stored traffic, when that makes a day.
            log.warning("app %s: %s", app.id, error)
            profile = None
        if profile is None:
            if _first_profile(store, app.id, through) is not None:
                updated.append(app.id)
            continue
        seen_until = next_unseen_hour(profile)
        if seen_until >= through:
            continue
        rows = {row.hour: row for row in store.traffic(app.id, seen_until, through)}
        fed, missing = 0, []
        hour = seen_until
        while hour < through:
            row = rows.get(hour)
            if row is None:
                missing.append(hour)
            elif not np.isfinite(row.requests) or row.requests < 0:
                log.warning(
                    "app %s: traffic %r at %s is not a count; profile not updated with it",
                    app.id,
                    row.requests,
                    hour.isoformat(),
                )
            else:
                profile.update(np.datetime64(hour.replace(tzinfo=None), "h"), row.requests)
                fed += 1
            hour += STEP
        for first, last in _runs(missing):
            span = first.isoformat() if first == last else f"{first.isoformat()} .. {last.isoformat()}"
            log.warning("app %s: no traffic for %s; profile not updated with it", app.id, span)
        if fed:
            store.save_profile(app.id, model_bytes(profile), through=next_unseen_hour(profile) - STEP)
            updated.append(app.id)
    return updated


def fit_profile(store: Store, app: str, hours: HourArray, requests: FloatArray) -> RealtimeProfile:
    """Fit the app's demand profile on a contiguous hourly series and store it."""

    profile = RealtimeProfile().fit(hours, requests)
    store.save_profile(app, model_bytes(profile), through=next_unseen_hour(profile) - STEP)
    return profile


def _first_profile(store: Store, app: str, through: datetime) -> RealtimeProfile | None:
    """A first profile on the app's latest stored hours without a gap, if they make a day."""
    import numpy as np

    rows = store.traffic(app, since=through - KEPT_HOURS * STEP, until=through)
    run: list[TrafficHour] = []
    for row in reversed(rows):  # from the newest hour back to the first gap or non-count
        if (run and run[-1].hour - row.hour != STEP) or not (np.isfinite(row.requests) and row.requests >= 0):
            break
        run.append(row)
    if len(run) < MIN_FIRST_PROFILE_HOURS:
        return None
    run.reverse()
    hours = np.array([row.hour.astimezone(UTC).replace(tzinfo=None) for row in run], dtype="datetime64[h]")
    profile = fit_profile(store, app, hours, np.array([row.requests for row in run], dtype=float))
    log.info("app %s: first demand profile (%s) on %d stored hours", app, profile.method_.value, len(run))
    return profile


def _runs(hours: list[datetime]) -> list[tuple[datetime, datetime]]:
    """Consecutive hours as (first, last) runs, so that a long gap is one log line."""
    runs: list[tuple[datetime, datetime]] = []
    for hour in hours:
        if runs and hour - runs[-1][1] == STEP:
            runs[-1] = (runs[-1][0], hour)
        else:
            runs.append((hour, hour))
    return runs


def next_unseen_hour(profile: RealtimeProfile) -> datetime:
    """The first hour ``profile`` has not seen, as an aware UTC datetime."""
    moment: datetime = profile.next_hour_.astype("datetime64[s]").item()
    return moment.replace(tzinfo=UTC)


def known_app(store: Store, app: str) -> App:
    """The stored real-time app ``app``; NotFoundError naming ``app`` otherwise."""
    apps = store.apps()
    for stored in apps:
        if stored.id == app:
            return stored
    raise NotFoundError("app", f"one of the stored apps {sorted(a.id for a in apps)}", app)


def ingest_traffic(store: Store, app: str, traffic: HourlyTraffic, *, shift_hours: int = 0) -> int:
    """Store an hourly series as the app's traffic (moved by ``shift_hours``); returns its hours."""
    import numpy as np

    hours = traffic.hours + np.timedelta64(shift_hours, "h")
    return store_traffic(
        store,
        app,
        (
            (hour.astype("datetime64[s]").item().replace(tzinfo=UTC), requests)
            for hour, requests in zip(hours, traffic.requests, strict=True)
        ),
    )


def retrain_from_store(store: Store, config: ServiceConfig) -> Any:
    """The nightly retrain: refit the job estimators on the stored job history."""
    from gpuplan.app.cycle.retrain import retrain
    from training_data.history import validate_history

    history = validate_history(store.history(), source="the stored job history")
    return retrain(history, source="the stored job history", models_dir=config.models_dir, traffic_paths=None)
