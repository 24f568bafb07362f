"""What every policy of the simulated week shares: the clock, the traffic, the forecasts, the store."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from contract.errors import InputError
from contract.records import (
    App,
    Cluster,
    JobEstimate,
    TrafficHour,
)
from contract.scenario import DEFAULT_HALF_LIFE_DAYS, JobKind, Pool, Team
from features.traffic import load_traffic
from forecasting.gpu_mapping import gpus_needed
from forecasting.persistence import model_bytes
from forecasting.realtime import RealtimeProfile
from forecasting.realtime_training import bundled_traffic_paths
from gpuplan.app.core.bridge import STEP, pool_of
from gpuplan.app.core.config import LENDING_HORIZON_HOURS
from gpuplan.app.core.forecasters import Forecasters
from gpuplan.app.core.job_models import job_pools, model_key, pool_models
from gpuplan.app.core.models import load_job_estimator
from gpuplan.app.jobs.submit import check_spec, estimate_spec
from gpuplan.app.lab.seed import derived_capacity
from gpuplan.app.lab.workload import (
    PRIORITY_RANGES,
    SimJob,
    draw_workload,
    fit_held_out_models,
    held_out_split,
    job_pool,
    read_workload,
)
from training_data.arrivals import load_pattern
from training_data.history import bundled_history_path, load_history

if TYPE_CHECKING:
    from features.traffic import HourlyTraffic
    from forecasting.job_forecast import JobForecast
    from gpuplan.app.core.config import ServiceConfig
    from storage.store import Store


log = logging.getLogger(__name__)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Hour 0 of the simulated clock (a Monday). Every series is moved onto this clock.
SIM_START = datetime(2025, 1, 6, tzinfo=UTC)
HOURS_PER_DAY = 24
HOURS_PER_WEEK = 168
#: The profile's weekly shape needs two weeks of history before the first simulated hour.
HISTORY_HOURS = 2 * HOURS_PER_WEEK
#: The apps' summed peak GPU need (in their history), as a share of the cluster.
RT_PEAK_SHARE = 0.4
#: The apps' priority on the drawn workload's scale (batch priorities 20-90,
#: :data:`gpuplan.app.lab.workload.PRIORITY_RANGES`): an unmet GPU-hour costs (1 + rt_penalty) x 80,
#: far above any batch job's GPU-hour.
RT_PRIORITY = 80.0
#: An app's swap cap: a quarter of its peak, so a ramp from trough to peak takes ~4 hours.
SWAP_CAP_SHARE = 0.25
STORE_URL = "sqlite://"  # in memory: the store lives as long as one policy's run


class SimPolicy(StrEnum):
    FAST = "fast"
    FIFO = "fifo"
    PRIORITY_BACKFILL = "priority-backfill"
    COMMIT_ALL = "commit-all"
    FASTEST_FREE = "fastest-free"
    #: With teams (docs/teams.md, "Simulation"): the baselines with hard quotas (no lending) and
    #: with lending but no reclaim guarantee (a job takes any idle GPU).
    FIFO_QUOTA = "fifo-quota"
    FIFO_LEND = "fifo-lend"
    PRIORITY_BACKFILL_QUOTA = "priority-backfill-quota"
    PRIORITY_BACKFILL_LEND = "priority-backfill-lend"


# --- real-time traffic ----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RealtimeSeries:
    """One app's real hourly traffic on the simulated clock: history, then the simulated hours.

    ``hours[history_hours]`` is :data:`SIM_START`.
    """

    app: App
    source: str
    hours: npt.NDArray[np.datetime64]
    requests: FloatArray
    history_hours: int

    @cached_property
    def demand_gpus(self) -> IntArray:
        """GPUs the actual traffic needed, every hour of the series (no headroom)."""

        return gpus_needed(self.requests, self.app.requests_per_gpu_hour)

    def simulated_demand(self, hours: int) -> IntArray:
        return self.demand_gpus[self.history_hours : self.history_hours + hours]


def load_realtime(
    paths: Sequence[Path],
    *,
    days: int,
    gpus: int,
    column: str | None = None,
    priority: float = RT_PRIORITY,
) -> list[RealtimeSeries]:
    """The apps' series (default: the bundled ones long enough), moved onto the simulated clock;
    ``column``: the hourly count's column of each of ``paths`` (:func:`features.traffic.load_traffic`).

    The last ``days`` days of each series are simulated; the hours before are its history.
    An app's capacity is set so that its history's peak needs an equal share of
    :data:`RT_PEAK_SHARE` of the cluster.
    """

    simulated = days * HOURS_PER_DAY
    needed = simulated + HISTORY_HOURS
    chosen = list(paths) or bundled_traffic_paths()
    loaded = []
    for path in chosen:
        traffic = load_traffic(path, requests_column=column if paths else None)
        if len(traffic) < needed:
            if paths:
                raise InputError(
                    "traffic",
                    f"a series of at least {needed} hours ({days} simulated days plus two weeks "
                    "of history for the demand profile)",
                    f"{len(traffic)} hours",
                    source=str(path),
                    hint="Simulate fewer days or give a longer series.",
                )
            log.info(
                "bundled series %s has %d hours, fewer than %d: not used", path.name, len(traffic), needed
            )
            continue
        loaded.append((path, traffic))
    if not loaded:
        raise InputError(
            "days",
            "few enough days that a bundled traffic series also holds two weeks of history",
            days,
            hint="Give traffic series long enough, or simulate fewer days.",
        )
    names = [path.stem for path, _ in loaded]
    if len(set(names)) != len(names):
        raise InputError("traffic", "files with distinct names (one app each)", names)
    peak_gpus = max(1, round(gpus * RT_PEAK_SHARE / len(loaded)))
    series = []
    for path, traffic in loaded:
        history_peak = float(traffic.requests[: len(traffic) - simulated].max())
        app = App(
            id=path.stem,
            priority=priority,
            swap_cap=max(1, math.ceil(peak_gpus * SWAP_CAP_SHARE)),
            requests_per_gpu_hour=history_peak / peak_gpus if history_peak > 0 else 1.0,
        )
        series.append(_on_clock(app, path, traffic, simulated))
    return series


def _on_clock(app: App, path: Path, traffic: HourlyTraffic, simulated: int) -> RealtimeSeries:
    """``traffic`` moved onto the simulated clock: its last ``simulated`` hours are simulated."""
    first_simulated = len(traffic) - simulated
    start = np.datetime64(SIM_START.replace(tzinfo=None), "h")
    return RealtimeSeries(
        app=app,
        source=str(path),
        hours=traffic.hours + (start - traffic.hours[first_simulated]),
        requests=traffic.requests.astype(float),
        history_hours=first_simulated,
    )


def config_realtime(config: ServiceConfig, *, days: int, source: str) -> list[RealtimeSeries]:
    """The config's apps as the daemon runs them (priority, swap cap, headroom, requests per
    GPU-hour), each on its ``traffic`` file moved onto the simulated clock.

    An app without ``requests_per_gpu_hour`` gets the daemon's derived one
    (:func:`gpuplan.app.lab.seed.derived_capacity`), from its history's peak.
    """

    simulated = days * HOURS_PER_DAY
    needed = simulated + HISTORY_HOURS
    files = {t.app: t for t in config.traffic}
    series = []
    for index, configured in enumerate(config.apps):
        traffic_source = files.get(configured.id)
        if traffic_source is None:
            raise InputError(
                f"apps[{index}].traffic",
                "an hourly traffic CSV for the simulation to replay (a Prometheus-only app has none)",
                "missing",
                source=source,
            )
        traffic = load_traffic(traffic_source.path)
        if len(traffic) < needed:
            raise InputError(
                f"apps[{index}].traffic",
                f"a series of at least {needed} hours ({days} simulated days plus two weeks "
                "of history for the demand profile)",
                f"{len(traffic)} hours",
                source=str(traffic_source.path),
                hint="Simulate fewer days or give a longer series.",
            )
        app = configured
        if app.requests_per_gpu_hour <= 0:
            history = traffic.requests[: len(traffic) - simulated]
            app = replace(app, requests_per_gpu_hour=derived_capacity(history, traffic_source.peak_gpus))
        series.append(_on_clock(app, traffic_source.path, traffic, simulated))
    return series


def app_priority(batch_priorities: Sequence[float]) -> float:
    """The apps' priority for a workload of ``batch_priorities``: where :data:`RT_PRIORITY` sits
    in the drawn workload's range (20-90), in this workload's range (lowest to highest). A
    workload on another scale (1-1,000, say) keeps the apps above its batch work as the drawn one
    does, so that the penalty, not the scale, decides what an unmet hour is worth."""

    low = min(low for low, _ in PRIORITY_RANGES.values())
    high = max(high for _, high in PRIORITY_RANGES.values())
    share = (RT_PRIORITY - low) / (high - low)
    least, most = min(batch_priorities), max(batch_priorities)
    return least + share * (most - least)


def fit_profile(series: RealtimeSeries) -> bytes:
    """The app's demand profile fitted on its history only, as the store keeps it (JSON)."""

    history = slice(0, series.history_hours)
    profile = RealtimeProfile().fit(series.hours[history], series.requests[history])
    return model_bytes(profile)


def _moment(hour: np.datetime64) -> datetime:
    moment: datetime = hour.astype("datetime64[s]").item()
    return moment.replace(tzinfo=UTC)


# --- the set-up every policy shares ----------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Setup:
    """Everything the policies share: cluster, apps and traffic, jobs and their estimates."""

    cluster: Cluster
    series: tuple[RealtimeSeries, ...]
    profiles: Mapping[str, bytes]
    jobs: tuple[SimJob, ...]
    estimates: Mapping[str, JobEstimate]
    models_dir: Path
    forecasts: Mapping[FeatureKey, JobForecast]
    hours: int
    start: datetime = SIM_START
    #: The config's pools (``cluster.pools``, their ``first_gpu`` set); empty: one pool.
    pools: tuple[Pool, ...] = ()
    #: app -> the pool it serves on (the config's ``apps[i].pool``; default: the first pool).
    app_pools: Mapping[str, str] = field(default_factory=dict)
    #: app -> pool -> its requests per GPU-hour there (the config's ``apps[i].gpu_models``): an
    #: app of several pools, served on the one each plan chooses (docs/pools.md).
    app_rates: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: The config's teams (quotas per GPU model, weights; docs/teams.md); empty: no teams.
    teams: tuple[Team, ...] = ()
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS
    lending_horizon_hours: float | None = LENDING_HORIZON_HOURS  # the config's (docs/teams.md)

    @property
    def apps(self) -> tuple[App, ...]:
        return tuple(s.app for s in self.series)

    @property
    def pooled(self) -> bool:
        """Whether the cluster is several pools (one is today's cluster)."""
        return len(self.pools) > 1

    def app_pool(self, app_id: str) -> Pool | None:
        """The pool an app serves on (None on one pool); for an app of several pools, the first
        of them (the one its ``requests_per_gpu_hour`` and :meth:`demand` are on)."""
        if not self.pooled:
            return None
        rates = self.app_rates.get(app_id)
        name = next(iter(rates)) if rates else self.app_pools.get(app_id, self.pools[0].name)
        return next(pool for pool in self.pools if pool.name == name)

    def needs_on(self, app_id: str, pool: Pool | None) -> IntArray:
        """GPUs an app's actual traffic needed every hour of its series (history, then the
        simulated hours) on ``pool``, at its requests per GPU-hour there (its one rate where
        ``pool`` is None or not one of its pools)."""
        series = next(s for s in self.series if s.app.id == app_id)
        rate = self.app_rates.get(app_id, {}).get(pool.name) if pool is not None else None
        if rate is None:
            return series.demand_gpus
        return gpus_needed(series.requests, rate)

    def actual_hours(self, job: SimJob, first_gpu: int) -> float:
        """How long ``job`` really runs on a block from ``first_gpu``: on its pool's model,
        ``actual_by_model``'s hours, else ``actual_hours`` in the ratio of its forecast there to
        its estimate's hours (docs/pools.md); on one pool, ``actual_hours``."""
        pool = pool_of(self.pools, first_gpu) if self.pooled else None
        if pool is None:
            return job.actual_hours
        model = model_key(pool.gpu_model)
        if model in job.actual_by_model:
            return job.actual_by_model[model]
        estimate = self.estimates[job.id]
        on_model = estimate.hours_on(model)
        if on_model is None or estimate.hours_p50 <= 0:
            return job.actual_hours
        return job.actual_hours * on_model[0] / estimate.hours_p50

    def fastest_hours(self, job: SimJob) -> float:
        """The job's actual hours on the fastest pool it may run on: its work (on one pool,
        ``actual_hours``); a GPU-hour of it on a slower pool is worth this over its hours there."""
        if not self.pooled:
            return job.actual_hours
        estimate = self.estimates[job.id]
        hours = [
            self.actual_hours(job, pool.first_gpu)
            for pool in self.pools
            if estimate.hours_on(model_key(pool.gpu_model)) is not None and pool.gpus >= estimate.gpus
        ]
        return min(hours, default=job.actual_hours)

    @property
    def end(self) -> datetime:
        return self.start + self.hours * STEP

    def demand(self) -> dict[str, IntArray]:
        """Per app, the GPUs its actual traffic needed in each simulated hour."""
        return {s.app.id: s.simulated_demand(self.hours) for s in self.series}

    def peak_last_week(self, hour: datetime, pool: Pool | None = None) -> dict[str, int]:
        """Per app, its peak GPU need in the week before the day ``hour`` falls in (on
        ``pool``, at its rate there: :meth:`needs_on`)."""
        day_start = self.start + (hour - self.start) // timedelta(days=1) * timedelta(days=1)
        index = (day_start - self.start) // STEP
        return {
            s.app.id: int(
                self.needs_on(s.app.id, pool)[
                    max(0, s.history_hours + index - HOURS_PER_WEEK) : s.history_hours + index
                ].max()
            )
            for s in self.series
        }

    def busiest_day(self) -> int:
        """The simulated day asking the most GPU-hours: real-time demand plus arriving batch work."""
        days = self.hours // HOURS_PER_DAY
        asked = np.zeros(max(days, 1))
        for demand in self.demand().values():
            asked += demand[: days * HOURS_PER_DAY].reshape(days, HOURS_PER_DAY).sum(axis=1)
        for job in self.jobs:
            day = int(job.submit_hour // HOURS_PER_DAY)
            if 0 <= day < days:
                asked[day] += self.estimates[job.id].gpus * self.fastest_hours(job)
        return int(np.argmax(asked))


def prepare(
    *,
    days: int,
    gpus: int,
    work_dir: Path,
    traffic_paths: Sequence[Path] = (),
    traffic_column: str | None = None,
    workload_path: Path | None = None,
    seed: int = 0,
    config: ServiceConfig | None = None,
    config_source: str = "--config",
    hours_factor: Mapping[str, Mapping[JobKind, float]] | None = None,
) -> Setup:
    """Load traffic, read or draw the jobs, and fit what forecasts them.

    With ``config`` (the daemon's, :func:`gpuplan.app.core.config.load_config`), the cluster and
    the apps are the config's, each app on its own ``traffic`` file and with its own priority;
    ``gpus`` and ``traffic_paths`` are not used. A config of several pools (``cluster.pools``)
    is simulated as the daemon runs it: the jobs may say where they run and how long they take
    on each model (:mod:`gpuplan.app.lab.workload`; ``hours_factor``: the drawn workload's
    factor per model and kind against the reference pool's hours), each app serves on its pool.

    The job estimators are fitted on the earlier 80% of the bundled history into
    ``work_dir`` (unless every job states its hours), so that the default workload's jobs,
    drawn from the later 20%, are forecast by models that never saw them.
    """

    if days < 1:
        raise InputError("days", "an integer >= 1", days)
    cluster = Cluster(gpus=gpus)
    pools: tuple[Pool, ...] = ()
    teams: tuple[Team, ...] = ()
    half_life_days = DEFAULT_HALF_LIFE_DAYS
    lending_horizon_hours = LENDING_HORIZON_HOURS
    app_pools: Mapping[str, str] = {}
    app_rates: Mapping[str, Mapping[str, float]] = {}
    if config is not None:
        if config.cluster.down:
            log.warning(
                "%s: the cluster's %d down windows are at dates the simulated clock does not reach: left out",
                config_source,
                len(config.cluster.down),
            )
        cluster = replace(config.cluster, down=())
        gpus = cluster.gpus
        if len(config.pools) > 1:
            pools, app_pools, app_rates = config.pools, config.app_pools, config.app_rates
        teams, half_life_days = config.teams, config.half_life_days
        lending_horizon_hours = config.lending_horizon_hours
    models = list(pool_models(pools))
    if gpus < 1:
        raise InputError("gpus", "an integer >= 1", gpus)
    hours = days * HOURS_PER_DAY
    # A workload file is checked before anything slow happens.
    listed = None
    if workload_path is not None:
        every = read_workload(
            workload_path, cluster_gpus=gpus, models=models, teams=[team.name for team in teams]
        )
        listed = [job for job in every if job.submit_hour < hours]
        if len(listed) < len(every):
            log.warning(
                "%s: %d of %d jobs are submitted at hour %d or later, after the %d simulated days: left out",
                workload_path,
                len(every) - len(listed),
                len(every),
                hours,
                days,
            )
    if config is not None:
        series = config_realtime(config, days=days, source=config_source)
    else:
        priority = RT_PRIORITY if not listed else app_priority([job.priority for job in listed])
        series = load_realtime(traffic_paths, days=days, gpus=gpus, column=traffic_column, priority=priority)
    models_dir = work_dir / "models"
    history_path = bundled_history_path()
    if listed is None or any(job.forecast_hours is None for job in listed):
        earlier, later = held_out_split(load_history(history_path))
        fit_held_out_models(earlier, models_dir)
    if listed is None:
        last_week = sum(
            s.demand_gpus[s.history_hours - HOURS_PER_WEEK : s.history_hours].mean() for s in series
        )
        jobs = draw_workload(
            job_pool(later, models_dir, source=str(history_path)),
            load_pattern(),
            hours=hours,
            cluster_gpus=gpus,
            free_gpus=gpus - float(last_week),
            seed=seed,
            models=models,
            hours_factor=hours_factor,
        )
    else:
        jobs = listed
    forecasts = forecast_jobs(jobs, models_dir)
    forecasters = PrecomputedForecasters(models_dir, forecasts)
    estimates = {}
    for job in jobs:
        source = f"{workload_path or 'the default workload'}, job {job.id}"
        estimate = estimate_spec(
            check_spec(job.spec(), source=source), forecasters, source=source, pools=pools
        )
        largest = max((pool.gpus for pool, _ in job_pools(estimate, pools)), default=gpus)
        if estimate.gpus > largest:
            where = f"the largest pool it may run on's {largest}" if pools else f"the cluster's {gpus}"
            raise InputError("gpus", f"at most {where} GPUs", estimate.gpus, source=source, in_file=True)
        estimates[job.id] = estimate
    profiles = {s.app.id: fit_profile(s) for s in series}
    return Setup(
        cluster=cluster,
        series=tuple(series),
        profiles=profiles,
        jobs=tuple(jobs),
        estimates=estimates,
        models_dir=models_dir,
        forecasts=forecasts,
        hours=hours,
        pools=pools,
        app_pools=app_pools,
        app_rates=app_rates,
        teams=teams,
        half_life_days=half_life_days,
        lending_horizon_hours=lending_horizon_hours,
    )


FeatureKey = tuple[str, tuple[tuple[str, str], ...]]


def _feature_key(kind: str, features: Mapping[str, object]) -> FeatureKey:
    return kind, tuple(sorted((str(name), repr(value)) for name, value in features.items()))


def forecast_jobs(jobs: Sequence[SimJob], models_dir: Path) -> dict[FeatureKey, JobForecast]:
    """Every job's forecast from its features, one batch per kind (the same models, the same numbers)."""
    import pandas as pd

    by_kind: dict[str, list[SimJob]] = {}
    for job in jobs:
        if job.forecast_hours is None and job.features:
            by_kind.setdefault(job.kind.value, []).append(job)
    forecasts: dict[FeatureKey, JobForecast] = {}
    for kind, group in by_kind.items():
        frame = pd.DataFrame([dict(job.features) for job in group])
        for job, forecast in zip(group, load_job_estimator(models_dir, kind).forecast(frame), strict=True):
            forecasts[_feature_key(kind, job.features)] = forecast
    return forecasts


class PrecomputedForecasters(Forecasters):
    """The service's forecasters, answering from forecasts made up front where it has them.

    Asking the estimators one job at a time costs about 0.1 s a job (validation and the
    analytic features of a one-row frame); a week submits hundreds of jobs to each policy.
    """

    def __init__(self, models_dir: Path, forecasts: Mapping[FeatureKey, JobForecast]) -> None:
        super().__init__(models_dir)
        self.forecasts = forecasts

    def forecast(self, kind: str, features: dict[str, object], *, source: str) -> JobForecast:
        found = self.forecasts.get(_feature_key(kind, features))
        return found if found is not None else super().forecast(kind, features, source=source)


def seed_store(store: Store, setup: Setup) -> None:
    """The cluster, the apps, their traffic history and their profiles, as the daemon keeps them."""
    store.save_cluster(setup.cluster)
    for s in setup.series:
        store.save_app(s.app)
        history = range(s.history_hours)
        store.add_traffic([TrafficHour(s.app.id, _moment(s.hours[i]), float(s.requests[i])) for i in history])
        store.save_profile(s.app.id, setup.profiles[s.app.id], through=_moment(s.hours[s.history_hours - 1]))
