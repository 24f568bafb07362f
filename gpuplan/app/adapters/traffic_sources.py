"""Traffic that arrives by itself: each finished hour of an app's requests, read from Prometheus.

Before each recalibration, every app with a ``prometheus`` source in the config is asked for
the finished hours it has no stored row for, from its first stored hour (at most
:data:`MAX_PULL_HOURS` back), in one call to Prometheus's HTTP API::

    GET {url}/api/v1/query_range?query=Q&start=FIRST+1h&end=THROUGH&step=3600

The query is evaluated at each hour's end, so the point at ``t`` is the hour ``[t - 1h, t)``:
``sum(increase(vllm:request_success_total{model_name="chat"}[1h]))`` is that hour's requests.
The hours come back as one series and the missing ones are stored like ``gpuplan ingest``'s
(:func:`store_traffic`; an hour pushed or ingested is kept);
the recalibration then feeds them to the profile as it feeds any stored hour, and an hour
Prometheus has no point for is skipped and logged there.

An unreachable server or an answer that is not one hourly series fails that app's pull: it is
logged, the app is left out of this recalibration (so that its hours are asked again next time
instead of being skipped as missing), and the other apps go on.

The hour in progress is read too (:func:`requests_so_far`), so that a surge seen in Prometheus
is answered within the hour (:func:`gpuplan.app.cycle.traffic.watch_prometheus`): a query whose
window is written ``[1h]`` is asked once more at ``now``, every ``[1h]`` replaced by the
seconds since the hour began, through the instant-query API::

    GET {url}/api/v1/query?query=sum(increase(...[1200s]))&time=NOW

A query without a ``[1h]`` window gives only finished hours.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, cast

from contract.records import TrafficHour
from gpuplan.app.core.bridge import STEP, floor_hour
from gpuplan.app.core.config import PrometheusSource, ServiceConfig
from storage.store import Store

log = logging.getLogger(__name__)

#: The furthest back a pull reaches: two weeks, what one weekly profile needs to move on.
MAX_PULL_HOURS = 14 * 24
#: How long one call to Prometheus may take before the app's pull fails.
TIMEOUT_S = 10.0
#: The largest answer read: one series of MAX_PULL_HOURS points is a few kB.
MAX_ANSWER_BYTES = 1 << 20
QUERY_RANGE_PATH = "/api/v1/query_range"
QUERY_PATH = "/api/v1/query"
#: The window an hourly query is written with; for the hour in progress it becomes the seconds so far.
HOUR_WINDOW = "[1h]"


class PrometheusError(RuntimeError):
    """Prometheus could not be reached, or its answer was not one series of hourly counts."""


def store_traffic(store: Store, app: str, hours: Iterable[tuple[datetime, float]]) -> int:
    """Store ``(hour, requests)`` pairs as the app's traffic (one row per hour, the last wins)."""
    rows = [TrafficHour(app, hour, float(requests)) for hour, requests in hours]
    store.add_traffic(rows)
    return len(rows)


def pull_traffic(store: Store, now: datetime, config: ServiceConfig) -> frozenset[str]:
    """Store each Prometheus-fed app's finished hours since its last stored hour.

    Returns the apps whose pull failed (logged): their recalibration waits for the next one.
    """
    through = floor_hour(now)  # hours before this one are finished
    failed = set()
    for source in config.prometheus:
        missing = hours_to_pull(store, source.app, through)
        if not missing:
            continue
        first = min(missing)
        try:
            answered = hourly_requests(source, first, through)
        except PrometheusError as error:
            log.error("app %s: %s; not recalibrated this time", source.app, error)
            failed.add(source.app)
            continue
        counts = {}
        for hour, requests in answered.items():
            if hour not in missing:
                continue  # stored already (pushed or ingested): a pull fills gaps, never replaces
            if _is_count(requests):
                counts[hour] = requests
            else:
                log.warning(
                    "app %s: Prometheus gave %r for %s, not a count; hour skipped",
                    source.app,
                    requests,
                    hour.isoformat(),
                )
        stored = store_traffic(store, source.app, sorted(counts.items()))
        log.info(
            "app %s: %d of %d missing finished hours (%s .. %s) from Prometheus",
            source.app,
            stored,
            len(missing),
            first.isoformat(),
            (through - STEP).isoformat(),
        )
    return frozenset(failed)


def hours_to_pull(store: Store, app: str, through: datetime) -> frozenset[datetime]:
    """The finished hours before ``through`` the app has no stored row for, from its first
    stored hour in the last MAX_PULL_HOURS (all of them when it has none there).

    Gaps are asked for, not only the hours after the last stored one: a row pushed or ingested
    for a later hour leaves the hours before it to the pull, instead of hiding them from it.
    """
    earliest = through - MAX_PULL_HOURS * STEP
    stored = {row.hour.astimezone(UTC) for row in store.traffic(app, since=earliest, until=through)}
    first = min(stored) if stored else earliest
    hours = (first + step * STEP for step in range(int((through - first) / STEP)))
    return frozenset(hour for hour in hours if hour not in stored)


def hourly_requests(
    source: PrometheusSource, first: datetime, through: datetime, *, timeout_s: float = TIMEOUT_S
) -> dict[datetime, float]:
    """The source's requests of each hour in ``[first, through)`` that Prometheus has a point for."""
    answer = query_range(
        source, start=first + STEP, end=through, step_s=STEP.total_seconds(), timeout_s=timeout_s
    )
    hours: dict[datetime, float] = {}
    for ends, requests in answer:
        hour = ends - STEP
        if not first <= hour < through or (hour - first) % STEP:
            raise PrometheusError(
                f"{source.url} answered a point at {ends.isoformat()}, not the end of an hour "
                f"in {first.isoformat()} .. {through.isoformat()}"
            )
        hours[hour] = requests
    return hours


def requests_so_far(
    source: PrometheusSource, hour: datetime, now: datetime, *, timeout_s: float = TIMEOUT_S
) -> float | None:
    """The source's requests from ``hour`` to ``now`` (the hour in progress); None when its query
    has no ``[1h]`` window to narrow, or Prometheus has no point for it yet."""
    if HOUR_WINDOW not in source.query or now <= hour:
        return None
    window = f"[{max(1, round((now - hour).total_seconds()))}s]"
    params = {"query": source.query.replace(HOUR_WINDOW, window), "time": now.timestamp()}
    sample = _one_series(source, _get(source, QUERY_PATH, params, timeout_s), "vector")
    if sample is None:
        return None
    _, requests = _point(source, sample.get("value"))
    if not _is_count(requests):
        raise PrometheusError(f"{source.url} gave {requests!r} for the hour in progress, not a count")
    return requests


def instant_value(
    source: PrometheusSource, query: str, *, timeout_s: float = TIMEOUT_S
) -> tuple[str, float | None]:
    """``query`` evaluated now on the source's server: its result type and its one value
    (None when a vector query matches no series). ``time()`` gives the server's clock."""
    data = _get(source, QUERY_PATH, {"query": query}, timeout_s).get("data")
    kind = data.get("resultType") if isinstance(data, dict) else None
    if kind == "scalar":
        return "scalar", _point(source, data.get("result"))[1]  # type: ignore[union-attr]
    sample = _one_series(source, {"data": data}, "vector")
    return "vector", None if sample is None else _point(source, sample.get("value"))[1]


def query_range(
    source: PrometheusSource, *, start: datetime, end: datetime, step_s: float, timeout_s: float
) -> list[tuple[datetime, float]]:
    """The points of the one series ``source.query`` gives from ``start`` to ``end`` (inclusive)."""
    params = {"query": source.query, "start": start.timestamp(), "end": end.timestamp(), "step": step_s}
    return _points(source, _get(source, QUERY_RANGE_PATH, params, timeout_s))


def _get(source: PrometheusSource, path: str, params: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """The successful JSON answer of one call to the server's HTTP API."""
    from urllib.error import HTTPError, URLError
    from urllib.parse import urlencode
    from urllib.request import Request, urlopen

    request = Request(f"{source.url}{path}?{urlencode(params)}", headers={"Accept": "application/json"})
    try:
        with urlopen(request, timeout=timeout_s) as response:
            body = response.read(MAX_ANSWER_BYTES + 1)
    except HTTPError as error:  # Prometheus explains a refused query in a JSON body
        detail = _error_of(error.read(MAX_ANSWER_BYTES))
        raise PrometheusError(f"{source.url} answered HTTP {error.code}{detail}") from error
    except (URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise PrometheusError(f"Prometheus at {source.url} is unreachable ({reason})") from error
    if len(body) > MAX_ANSWER_BYTES:
        raise PrometheusError(f"{source.url} answered more than {MAX_ANSWER_BYTES} bytes")
    return _document(source, body)


def _document(source: PrometheusSource, body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PrometheusError(f"{source.url} answered something that is not JSON") from error
    if not isinstance(document, dict) or document.get("status") != "success":
        raise PrometheusError(f"{source.url} answered no success{_error_of(body)}")
    return document


def _points(source: PrometheusSource, document: dict[str, Any]) -> list[tuple[datetime, float]]:
    """The one series of a ``query_range`` answer; no series at all is no point (every hour missing)."""
    series = _one_series(source, document, "matrix")
    if series is None:
        return []
    values = series.get("values")
    if not isinstance(values, list):
        raise PrometheusError(f"{source.url} answered a series without a list of values")
    return [_point(source, point) for point in values]


def _one_series(source: PrometheusSource, document: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The one series of an answer whose ``resultType`` is ``kind`` (``matrix`` for a range,
    ``vector`` for an instant); None when the query matched no series."""
    data = document.get("data")
    if (
        not isinstance(data, dict)
        or data.get("resultType") != kind
        or not isinstance(data.get("result"), list)
    ):
        raise PrometheusError(f"{source.url} answered no result of type {kind}")
    series = data["result"]
    if not series:
        return None
    if len(series) > 1:
        labels = [entry.get("metric") if isinstance(entry, dict) else entry for entry in series[:3]]
        raise PrometheusError(
            f"the query {source.query!r} gives {len(series)} series (first {labels}); it must give one "
            "series of hourly requests: aggregate it, e.g. sum(increase(METRIC[1h]))"
        )
    if not isinstance(series[0], dict):
        raise PrometheusError(f"{source.url} answered a series that is not an object: {series[0]!r}")
    return series[0]


def _point(source: PrometheusSource, point: object) -> tuple[datetime, float]:
    """One ``[unix time, "value"]`` pair of an answer."""
    try:
        ends, value = cast("tuple[Any, Any]", point)
        return datetime.fromtimestamp(float(ends), UTC), float(value)
    except (TypeError, ValueError) as error:
        raise PrometheusError(
            f"{source.url} answered a point that is not [time, value]: {point!r}"
        ) from error


def _is_count(value: float) -> bool:
    """A number of requests: finite and not negative."""
    return math.isfinite(value) and value >= 0


def _error_of(body: bytes) -> str:
    """Prometheus's own ``errorType: error`` from an answer's body, if it has one."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return ""
    if not isinstance(document, dict) or "error" not in document:
        return ""
    return f": {document.get('errorType', 'error')}: {document['error']}"
