"""Traffic that comes in, and a surge as an incoming request.

Pushed traffic (``POST /v1/apps/{app}/traffic``, :func:`push_traffic`) and ``gpuplan
ingest`` (:func:`ingest`) store finished hours as the Prometheus pull does. A row for the
hour in progress (the hour of ``now``) covers the minutes since the hour began: it is
stored as the app's *observed* traffic (``Store.observe_traffic``), never as a finished
hour, so the profile and the pull only ever read whole hours.

When an app's observed rate (the count at the rate seen so far) needs more GPUs than the
hour's allocation holds for it, the hot path answers at once (:func:`answer_surge`):

1. if the hour is not committed yet, the cycle commits it first (the hour is committed once);
2. a re-plan from the next hour with the observed rates feeding the nowcast, then an
   amendment of the current hour: real-time GPUs from idle ones, within the swap cap
   (:func:`gpuplan.app.cycle.amend.amend_cycle`), additions only.

Every later cycle of the hour reads the stored observations too, so the :30 cycle amends
the same way. An app fed by Prometheus is observed the same way by :func:`watch_prometheus`,
which the daemon runs every few minutes and before each cycle.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from contract.errors import InputError
from contract.records import Amendment, ObservedTraffic
from gpuplan.app.adapters.traffic_sources import PrometheusError, requests_so_far, store_traffic
from gpuplan.app.core.bridge import STEP, floor_hour, gpus_for, hour_allocation, merged_assignments
from gpuplan.app.cycle.amend import amend_cycle
from gpuplan.app.cycle.tick import CycleReport, ingest_traffic, known_app, plan_cycle

if TYPE_CHECKING:
    from features.traffic import HourlyTraffic
    from gpuplan.app.adapters.executors import Executor
    from gpuplan.app.core.config import ServiceConfig
    from gpuplan.app.core.forecasters import Forecasters
    from storage.store import Store

log = logging.getLogger(__name__)

#: A count of the hour's first minutes is read as over at least this many: a burst in the
#: first seconds is not taken for the hour's rate.
MIN_OBSERVED_MINUTES = 5.0


@dataclass(frozen=True)
class SurgeAnswer:
    """What the hot path did for a surge: the apps that outran their GPUs, the re-plan, the amendment."""

    apps: tuple[str, ...]
    report: CycleReport
    amendment: Amendment | None


@dataclass(frozen=True)
class Stored:
    """What a push or an ingest stored: the finished hours, and the hour in progress if it had one."""

    hours: int
    observed: ObservedTraffic | None


def push_traffic(store: Store, app: str, rows: Sequence[tuple[datetime, float]], now: datetime) -> Stored:
    """Store hourly request counts pushed for ``app`` (the API's push) the way ``gpuplan ingest``
    and the Prometheus pull store theirs (:func:`store_traffic`); a repeated hour replaces the
    stored one, the hour of ``now`` is observed as the hour in progress, and an hour after it
    is refused. Every row is checked before anything is stored."""
    known_app(store, app)
    seen: set[datetime] = set()
    hours = []
    observed = None
    for index, (hour, requests) in enumerate(rows):
        where = f"[{index}].hour"
        if hour.tzinfo is None:
            raise InputError(where, "an ISO 8601 time with a UTC offset", hour.isoformat())
        at = hour.astimezone(UTC)
        if at != floor_hour(at):
            raise InputError(where, "a whole hour (minutes and seconds zero)", hour.isoformat())
        if at in seen:
            raise InputError(where, "each hour once per request", hour.isoformat())
        if at > floor_hour(now):
            raise _future(where, now, hour.isoformat())
        if not (math.isfinite(requests) and requests >= 0):
            raise InputError(f"[{index}].requests", "a finite count >= 0", requests)
        seen.add(at)
        current = in_progress(app, at, float(requests), now)
        if current is None:
            hours.append((at, float(requests)))
        else:
            observed = current
    return Stored(store_traffic(store, app, hours), _observe(store, observed))


def ingest(store: Store, app: str, traffic: HourlyTraffic, now: datetime) -> Stored:
    """``gpuplan ingest``: the series' hours stored, its row for the hour of ``now`` (if any)
    observed; a row for an hour after it refuses the series (nothing stored)."""
    import numpy as np

    hour = np.datetime64(floor_hour(now).astimezone(UTC).replace(tzinfo=None), "h")
    ahead = np.flatnonzero(traffic.hours > hour)
    if ahead.size:
        raise _future("hour", now, f"{traffic.hours[ahead[0]]}:00")
    where = np.flatnonzero(traffic.hours == hour)
    observed = (
        None if not where.size else in_progress(app, floor_hour(now), float(traffic.requests[where[0]]), now)
    )
    finished = traffic if observed is None else traffic.before(hour)
    return Stored(ingest_traffic(store, app, finished), _observe(store, observed))


def _future(where: str, now: datetime, got: str) -> InputError:
    """A count for an hour that has not begun: nothing was served in it yet."""
    return InputError(
        where,
        f"an hour up to the current one ({floor_hour(now).astimezone(UTC).isoformat()})",
        got,
        hint="Traffic counts what was served: an hour that has not begun has none yet.",
    )


def _observe(store: Store, observed: ObservedTraffic | None) -> ObservedTraffic | None:
    if observed is not None:
        store.observe_traffic([observed])
        log.info(
            "app %s: %.0f requests in the first %.0f minutes of %s (the hour in progress)",
            observed.app,
            observed.requests,
            observed.minutes,
            observed.hour.isoformat(),
        )
    return observed


def watch_prometheus(store: Store, now: datetime, config: ServiceConfig) -> tuple[ObservedTraffic, ...]:
    """Each Prometheus-fed app's requests so far in the hour of ``now``, stored as observed.

    Network calls: run it before taking the plan lock. The first minutes of an hour are not
    read (:data:`MIN_OBSERVED_MINUTES`); a server that fails is logged and that app skipped.
    """
    hour = floor_hour(now)
    if (now - hour).total_seconds() < MIN_OBSERVED_MINUTES * 60:
        return ()
    observed = []
    for source in config.prometheus:
        try:
            requests = requests_so_far(source, hour, now)
        except PrometheusError as error:
            log.error("app %s: %s; the hour in progress is not observed", source.app, error)
            continue
        seen = None if requests is None else in_progress(source.app, hour, requests, now)
        if seen is not None:
            _observe(store, seen)
            observed.append(seen)
    return tuple(observed)


def in_progress(app: str, hour: datetime, requests: float, now: datetime) -> ObservedTraffic | None:
    """``requests`` counted in ``hour`` as the hour in progress at ``now`` (None: another hour)."""
    if floor_hour(now) != hour:
        return None
    minutes = max(MIN_OBSERVED_MINUTES, (now - hour).total_seconds() / 60.0)
    return ObservedTraffic(app, hour, requests, minutes)


def surging(store: Store, now: datetime, observed: Sequence[ObservedTraffic]) -> tuple[str, ...]:
    """The apps whose observed rate in the hour of ``now`` needs more GPUs than the hour holds for them."""
    hour = floor_hour(now)
    allocation = hour_allocation(store, hour)
    held = merged_assignments(allocation, ())
    apps = {app.id: app for app in store.apps()}
    return tuple(
        o.app
        for o in observed
        if o.app in apps
        and o.hour == hour
        and gpus_for(apps[o.app], o.hourly_rate()) > len(held.get(o.app, ()))
    )


def answer_surge(
    store: Store,
    now: datetime,
    config: ServiceConfig,
    executor: Executor | None = None,
    *,
    forecasters: Forecasters | None = None,
) -> SurgeAnswer | None:
    """The hot path's answer to the stored observations of the hour of ``now`` (None: no surge).

    Run under the plan lock, as every cycle is.
    """
    hour = floor_hour(now)
    observed = store.observed_traffic(hour)
    apps = surging(store, now, observed)
    if not apps:
        return None
    log.info("surge in %s: %s above the GPUs held; re-planning now", hour.isoformat(), ", ".join(apps))
    if store.commit(hour) is None:
        plan_cycle(store, now, config, executor, forecasters=forecasters)
    report, amendment = amend_cycle(store, now, config, executor, forecasters=forecasters, observed=observed)
    if amendment is None:
        log.warning(
            "surge in %s: no GPU could be added (none idle, or the swap cap's room since %s is used)",
            hour.isoformat(),
            (hour - STEP).isoformat(),
        )
    return SurgeAnswer(apps, report, amendment)
