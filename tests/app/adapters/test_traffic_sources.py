"""Traffic pulled from a real Prometheus: the config's `prometheus` source, the hourly pull
through `/api/v1/query_range`, and the daemon's recalibration on it.

Two weeks of the bundled LoRA series are backfilled into a Prometheus started for the module
(tests/prom.py). Each database is first seeded at SEED_AT from the series' earlier hours (the
config's `traffic` file), so that the hours the recalibration at NOW takes are the two weeks
Prometheus holds.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from contract.errors import InputError
from contract.records import App, Assignment, Cluster
from features.traffic import load_traffic
from forecasting.realtime import RealtimeProfile
from forecasting.realtime_training import BUNDLED_TRAFFIC_DIR
from gpuplan.app.adapters.executors import InMemoryExecutor
from gpuplan.app.adapters.traffic_sources import (
    MAX_PULL_HOURS,
    PrometheusError,
    hourly_requests,
    pull_traffic,
    requests_so_far,
    store_traffic,
)
from gpuplan.app.core.bridge import STEP, hour_allocation, merged_assignments
from gpuplan.app.core.config import PrometheusSource, ServiceConfig, load_config
from gpuplan.app.cycle.tick import load_profile, next_unseen_hour
from gpuplan.app.cycle.traffic import watch_prometheus
from gpuplan.app.service import Service, recalibrate_now, watch_once
from storage.factory import open_store
from tests.pg import free_port
from tests.prom import PromServer, Series
from tests.service_fixtures import _in_tmp_path, commit_by_hand, models_dir, run_cli

__all__ = ["_in_tmp_path", "models_dir"]

HOUR = timedelta(hours=1)
LORA = BUNDLED_TRAFFIC_DIR / "alibaba_genai_lora_hourly.csv"
PULLED_HOURS = 14 * 24
_TRAFFIC = load_traffic(LORA)
HOURS = [h.astype("datetime64[s]").item().replace(tzinfo=UTC) for h in _TRAFFIC.hours]
REQUESTS = [float(r) for r in _TRAFFIC.requests]
SEED = len(HOURS) - PULLED_HOURS  # the earlier hours: the profile the database starts with
FIRST_PULLED = HOURS[SEED]
SEED_AT = FIRST_PULLED + timedelta(minutes=5)  # the seeded traffic ends just before this hour
NOW = HOURS[-1] + HOUR + timedelta(minutes=5)  # every hour Prometheus holds is finished
GAP = [FIRST_PULLED + n * HOUR for n in (100, 101, 102)]  # hours the `gappy` exporter was down
QUERY = 'sum(increase(vllm:request_success_total{{model_name="{}"}}[1h]))'


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    pulled = REQUESTS[SEED:]
    server = PromServer.start(
        tmp_path_factory.mktemp("prometheus"),
        {"chat": Series(FIRST_PULLED, pulled), "gappy": Series(FIRST_PULLED, pulled, down=GAP)},
    )
    try:
        yield server
    finally:
        server.stop()


def _write_csv(path: Path, hours: list[datetime], requests: list[float]) -> Path:
    path.write_text(
        "hour,requests\n"
        + "".join(f"{h:%Y-%m-%d %H:%M:%S},{r!r}\n" for h, r in zip(hours, requests, strict=True))
    )
    return path


def _config(
    tmp_path: Path, name: str, apps: dict[str, str | None], models: Path, *, seeded: bool = True
) -> Path:
    """A config of 16 GPUs whose apps (id -> Prometheus URL, or None) start from the seed hours
    (``seeded``) or from no traffic at all."""
    seed = _write_csv(tmp_path / "seed.csv", HOURS[:SEED], REQUESTS[:SEED])
    entries: list[dict[str, Any]] = []
    for app, url in apps.items():
        entry: dict[str, Any] = {"id": app, "priority": 80, "swap_cap": 2, "requests_per_gpu_hour": 20.0}
        if seeded:
            entry["traffic"] = str(seed)
        if url is not None:
            entry["prometheus"] = {"url": url, "query": QUERY.format(app)}
        entries.append(entry)
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "cluster": {"gpus": 16},
                "apps": entries,
                "plan_budget_ms": 50,
                "review_every_hours": None,
                "commits_file": None,
                "models_dir": str(models),
            }
        )
    )
    return path


def _daemon_once(config: Path, db: str, at: datetime) -> None:
    result = run_cli("daemon", "--once", "--config", config, "--db", db, "--at", at.isoformat())
    assert result.code == 0, result.err
    assert "cycle hour=" in result.out


def _profile(db: str, app: str) -> RealtimeProfile:
    store = open_store(db)
    try:
        profile = load_profile(store, app)
    finally:
        store.close()
    assert profile is not None
    return profile


def _fitted(profile: RealtimeProfile) -> dict[str, Any]:
    """Every number a forecast comes from, and the next day's forecast itself."""
    forecast = profile.predict(profile.next_hour_, 24)
    return {
        "method": profile.method_,
        "band": profile.band_,
        "validation_mae": profile.validation_mae_,
        "next_hour": profile.next_hour_,
        "z": profile.z_.tolist(),
        "p50": forecast.p50.tolist(),
        "p90": forecast.p90.tolist(),
    }


@pytest.mark.prometheus
def test_a_prometheus_fed_app_recalibrates_to_the_profile_that_ingest_gives(
    tmp_path: Path, models_dir: Path, prometheus: PromServer
) -> None:
    pulled_db, ingested_db = f"sqlite:///{tmp_path / 'pulled.db'}", f"sqlite:///{tmp_path / 'ingested.db'}"
    pulled = _config(tmp_path, "pulled", {"chat": prometheus.url}, models_dir)
    ingested = _config(tmp_path, "ingested", {"chat": None}, models_dir)
    _daemon_once(pulled, pulled_db, SEED_AT)
    _daemon_once(ingested, ingested_db, SEED_AT)
    seeded = _fitted(_profile(pulled_db, "chat"))
    assert seeded == _fitted(_profile(ingested_db, "chat"))

    _daemon_once(pulled, pulled_db, NOW)  # reads the two weeks from Prometheus
    csv = _write_csv(tmp_path / "pulled.csv", HOURS[SEED:], REQUESTS[SEED:])
    result = run_cli("ingest", "chat", "--traffic", csv, "--db", ingested_db)
    assert result.code == 0 and f"stored {PULLED_HOURS} hours" in result.out, result.err
    _daemon_once(ingested, ingested_db, NOW)

    store = open_store(pulled_db)
    try:
        stored = store.traffic("chat", since=FIRST_PULLED)
    finally:
        store.close()
    assert [(row.hour, row.requests) for row in stored] == list(
        zip(HOURS[SEED:], REQUESTS[SEED:], strict=True)
    )
    after = _fitted(_profile(pulled_db, "chat"))
    assert next_unseen_hour(_profile(pulled_db, "chat")) == NOW.replace(minute=0)
    assert after != seeded
    assert after == _fitted(_profile(ingested_db, "chat"))


@pytest.mark.prometheus
def test_an_app_with_only_prometheus_gets_its_first_profile_as_one_ingested_would(
    tmp_path: Path, models_dir: Path, prometheus: PromServer
) -> None:
    pulled_db, ingested_db = f"sqlite:///{tmp_path / 'pulled.db'}", f"sqlite:///{tmp_path / 'ingested.db'}"
    pulled = _config(tmp_path, "pulled", {"chat": prometheus.url}, models_dir, seeded=False)
    ingested = _config(tmp_path, "ingested", {"chat": None}, models_dir, seeded=False)
    _daemon_once(pulled, pulled_db, NOW)  # the first start: two weeks from Prometheus, then a fit
    _daemon_once(ingested, ingested_db, SEED_AT)
    csv = _write_csv(tmp_path / "pulled.csv", HOURS[SEED:], REQUESTS[SEED:])
    assert run_cli("ingest", "chat", "--traffic", csv, "--db", ingested_db).code == 0
    _daemon_once(ingested, ingested_db, NOW)
    first = _fitted(_profile(pulled_db, "chat"))
    assert first["next_hour"] == np.datetime64(NOW.replace(minute=0, tzinfo=None), "h")
    assert first == _fitted(_profile(ingested_db, "chat"))


@pytest.mark.prometheus
def test_an_unreachable_prometheus_is_logged_and_the_other_apps_still_recalibrate(
    tmp_path: Path, models_dir: Path, prometheus: PromServer, caplog: pytest.LogCaptureFixture
) -> None:
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = _config(tmp_path, "two", {"chat": prometheus.url, "lost": nowhere}, models_dir)
    _daemon_once(config, db, SEED_AT)
    with caplog.at_level(logging.ERROR, logger="gpuplan.app.adapters.traffic_sources"):
        _daemon_once(config, db, NOW)
    errors = [r.getMessage() for r in caplog.records if r.name == "gpuplan.app.adapters.traffic_sources"]
    assert errors and errors[0].startswith(f"app lost: Prometheus at {nowhere} is unreachable")
    assert errors[0].endswith("not recalibrated this time")
    assert next_unseen_hour(_profile(db, "chat")) == NOW.replace(minute=0)
    assert next_unseen_hour(_profile(db, "lost")) == FIRST_PULLED  # its hours are asked again next time


@pytest.mark.prometheus
def test_hours_prometheus_has_no_point_for_are_skipped_and_logged_by_the_hourly_job(
    tmp_path: Path, models_dir: Path, prometheus: PromServer, caplog: pytest.LogCaptureFixture
) -> None:
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    path = _config(tmp_path, "gappy", {"gappy": prometheus.url}, models_dir)
    _daemon_once(path, db, SEED_AT)
    config = replace(load_config(path), models_dir=models_dir)
    store = open_store(db)
    try:
        service = Service(store=store, config=config, executor=InMemoryExecutor(), clock=lambda: NOW)
        with caplog.at_level(logging.WARNING, logger="gpuplan.app.cycle.tick"):
            assert recalibrate_now(service) == ["gappy"]
        stored = {row.hour: row.requests for row in store.traffic("gappy", since=FIRST_PULLED)}
        profile = load_profile(store, "gappy")
    finally:
        store.close()
    assert stored == {h: r for h, r in zip(HOURS[SEED:], REQUESTS[SEED:], strict=True) if h not in GAP}
    gap = f"{GAP[0].isoformat()} .. {GAP[-1].isoformat()}"
    assert f"app gappy: no traffic for {gap}; profile not updated with it" in caplog.messages
    assert profile is not None and next_unseen_hour(profile) == NOW.replace(minute=0)


@pytest.mark.prometheus
def test_a_pull_reaches_back_two_weeks_at_most_and_stores_what_prometheus_has(
    db_url: str, prometheus: PromServer
) -> None:
    later = NOW + 7 * 24 * HOUR  # a week after the series ends
    app = App(id="chat", priority=80.0, swap_cap=2, requests_per_gpu_hour=20.0, headroom=0.0)
    source = PrometheusSource("chat", prometheus.url, QUERY.format("chat"))
    config = ServiceConfig(cluster=Cluster(gpus=4), apps=(app,), prometheus=(source,))
    store = open_store(db_url)
    try:
        store.save_app(config.apps[0])
        assert pull_traffic(store, later, config) == frozenset()
        stored = store.traffic("chat")
    finally:
        store.close()
    earliest = later.replace(minute=0) - MAX_PULL_HOURS * HOUR
    assert [row.hour for row in stored] == [h for h in HOURS if h >= earliest]


@pytest.mark.prometheus
def test_a_pushed_row_for_a_later_hour_never_stops_the_pull_of_the_hours_before_it(
    db_url: str, prometheus: PromServer
) -> None:
    app = App(id="chat", priority=80.0, swap_cap=2, requests_per_gpu_hour=20.0, headroom=0.0)
    source = PrometheusSource("chat", prometheus.url, QUERY.format("chat"))
    config = ServiceConfig(cluster=Cluster(gpus=4), apps=(app,), prometheus=(source,))
    pulled_through = HOURS[-30]  # the pull before stored every hour up to this one
    store = open_store(db_url)
    try:
        store.save_app(app)
        store_traffic(
            store, "chat", [(h, r) for h, r in zip(HOURS, REQUESTS, strict=True) if h <= pulled_through]
        )
        store_traffic(store, "chat", [(HOURS[-1], 5.0)])  # pushed: the last finished hour
        assert pull_traffic(store, NOW, config) == frozenset()
        stored = {row.hour: row.requests for row in store.traffic("chat", since=pulled_through)}
    finally:
        store.close()
    expected = {h: r for h, r in zip(HOURS, REQUESTS, strict=True) if h >= pulled_through}
    assert stored == {**expected, HOURS[-1]: 5.0}  # the gap pulled; the pushed hour kept


@pytest.mark.prometheus
@pytest.mark.parametrize(
    ("query", "error"),
    [
        (
            "sum by (model_name) (increase(vllm:request_success_total[1h]))",
            "gives 2 series (first [{'model_name': 'chat'}, {'model_name': 'gappy'}]); it must give one",
        ),
        (
            "sum(increase(vllm:request_success_total[1h])",
            "answered HTTP 400: bad_data: 1:45: parse error: unclosed left parenthesis",
        ),
    ],
)
def test_a_bad_answer_fails_the_pull_with_prometheus_own_reason(
    prometheus: PromServer, query: str, error: str
) -> None:
    source = PrometheusSource("chat", prometheus.url, query)
    with pytest.raises(PrometheusError, match=re.escape(error)):
        hourly_requests(source, FIRST_PULLED, FIRST_PULLED + 3 * HOUR)
    # The hour in progress alike (its narrowed window moves a parse error's column).
    with pytest.raises(PrometheusError, match=re.escape(error.partition(" 1:")[0])):
        requests_so_far(source, FIRST_PULLED, FIRST_PULLED + timedelta(minutes=30))


def test_a_server_that_does_not_answer_in_time_fails_the_pull() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        source = PrometheusSource("chat", url, QUERY.format("chat"))
        with pytest.raises(
            PrometheusError, match=re.escape(f"Prometheus at {url} is unreachable (timed out)")
        ):
            hourly_requests(source, FIRST_PULLED, FIRST_PULLED + HOUR, timeout_s=0.5)


BAD_SOURCES = [
    ({"url": "ftp://prometheus:9090", "query": "up"}, "apps[0].prometheus.url", "an http:// or https:// URL"),
    ({"url": 9090, "query": "up"}, "apps[0].prometheus.url", "an http:// or https:// URL"),
    ({"url": "http://:9090/", "query": "up"}, "apps[0].prometheus.url", "an http:// or https:// URL"),
    (
        {"url": "http://me:secret@prom:9090", "query": "up"},
        "apps[0].prometheus.url",
        "a URL without user:password@",
    ),
    ({"query": "up"}, "apps[0].prometheus.url", "the URL of the Prometheus server"),
    ({"url": "http://127.0.0.1:9090"}, "apps[0].prometheus.query", "a PromQL query"),
    ({"url": "http://127.0.0.1:9090", "query": "  "}, "apps[0].prometheus.query", "a non-empty string"),
    (
        {"url": "http://127.0.0.1:9090", "query": "up", "step": 60},
        "apps[0].prometheus.step",
        "one of ['query', 'url']",
    ),
    ("http://127.0.0.1:9090", "apps[0].prometheus", "a mapping"),
]


@pytest.mark.parametrize(("source", "field", "expected"), BAD_SOURCES)
def test_a_bad_prometheus_source_names_the_field_the_expected_and_the_received_value(
    tmp_path: Path, source: object, field: str, expected: str
) -> None:
    path = tmp_path / "config.yaml"
    app = {"id": "chat", "requests_per_gpu_hour": 20.0, "prometheus": source}
    path.write_text(yaml.safe_dump({"cluster": {"gpus": 4}, "apps": [app]}))
    with pytest.raises(InputError, match=re.escape(f"`{field}` must be {expected}")) as caught:
        load_config(path)
    assert str(path) in str(caught.value) and "; got " in str(caught.value)
    assert "secret" not in str(caught.value)


def test_a_prometheus_source_is_read_with_its_url_and_query(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    query = QUERY.format("chat")
    app = {
        "id": "chat",
        "requests_per_gpu_hour": 20.0,
        "prometheus": {"url": "http://10.0.0.5:9090/", "query": query},
    }
    path.write_text(
        yaml.safe_dump(
            {"cluster": {"gpus": 4}, "apps": [app, {"id": "batchy", "requests_per_gpu_hour": 5.0}]}
        )
    )
    config = load_config(path)
    assert config.prometheus == (PrometheusSource("chat", "http://10.0.0.5:9090", query),)
    assert [app.id for app in config.apps] == ["chat", "batchy"]


#: An hour Prometheus holds, read as the hour in progress half-way through.
SURGE = SEED + 200
SURGE_HOUR, SURGE_REQUESTS = HOURS[SURGE], REQUESTS[SURGE]


@pytest.mark.prometheus
def test_the_hour_in_progress_is_read_with_the_window_narrowed_to_the_minutes_so_far(
    prometheus: PromServer,
) -> None:
    source = PrometheusSource("chat", prometheus.url, QUERY.format("chat"))
    half = requests_so_far(source, SURGE_HOUR, SURGE_HOUR + 30 * timedelta(minutes=1))
    assert half == pytest.approx(SURGE_REQUESTS / 2)
    # Without a [1h] window there is nothing to narrow: only finished hours are read.
    counter = PrometheusSource("chat", prometheus.url, 'sum(vllm:request_success_total{model_name="chat"})')
    assert requests_so_far(counter, SURGE_HOUR, SURGE_HOUR + timedelta(minutes=30)) is None
    # A query that matches no series has no point yet.
    nothing = PrometheusSource("chat", prometheus.url, QUERY.format("nobody"))
    assert requests_so_far(nothing, SURGE_HOUR, SURGE_HOUR + timedelta(minutes=30)) is None


@pytest.mark.prometheus
def test_a_surge_seen_in_prometheus_is_answered_within_the_hour_by_an_amendment(
    tmp_path: Path, prometheus: PromServer
) -> None:
    # chat holds GPUs 6-7; the hour's rate needs six GPUs' worth.
    chat = App("chat", 80.0, swap_cap=2, requests_per_gpu_hour=SURGE_REQUESTS / 6)
    config = ServiceConfig(
        cluster=Cluster(gpus=8),
        apps=(chat,),
        prometheus=(PrometheusSource("chat", prometheus.url, QUERY.format("chat")),),
        models_dir=tmp_path / "models",
    )
    store = open_store(f"sqlite:///{tmp_path / 'watch.db'}")
    try:
        store.save_cluster(config.cluster)
        store.save_app(chat)
        commit_by_hand(store, (SURGE_HOUR - STEP, SURGE_HOUR), (Assignment("chat", (6, 7)),), gpus=8)
        executor = InMemoryExecutor()
        service = Service(store, config, executor)
        early = watch_once(service, SURGE_HOUR + timedelta(minutes=2))  # too early to read a rate
        assert early is None and store.observed_traffic(SURGE_HOUR) == []

        now = SURGE_HOUR + timedelta(minutes=30)
        answer = watch_once(service, now)
        assert answer is not None and answer.apps == ("chat",)
        (seen,) = store.observed_traffic(SURGE_HOUR)
        assert (seen.app, seen.minutes) == ("chat", 30.0)
        assert seen.requests == pytest.approx(SURGE_REQUESTS / 2)
        amendment = answer.amendment
        assert amendment is not None and amendment.made_at == now and executor.amendments == [amendment]
        added = merged_assignments(None, [amendment])["chat"]
        assert len(added) == chat.swap_cap and not set(added) & {6, 7}
        held = merged_assignments(hour_allocation(store, SURGE_HOUR), ())["chat"]
        assert set(held) == {6, 7, *added}
        assert [row.hour for row in store.traffic("chat")] == []  # observed, never a finished hour
    finally:
        store.close()


def test_an_unreachable_prometheus_leaves_the_hour_in_progress_unobserved_and_logs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    chat = App("chat", 80.0, swap_cap=2, requests_per_gpu_hour=20.0)
    config = ServiceConfig(
        cluster=Cluster(gpus=8),
        apps=(chat,),
        prometheus=(PrometheusSource("chat", nowhere, QUERY.format("chat")),),
        models_dir=tmp_path / "models",
    )
    store = open_store(f"sqlite:///{tmp_path / 'lost.db'}")
    try:
        with caplog.at_level(logging.ERROR, logger="gpuplan.app.cycle.traffic"):
            assert watch_prometheus(store, SURGE_HOUR + timedelta(minutes=30), config) == ()
        assert store.observed_traffic(SURGE_HOUR) == []
    finally:
        store.close()
    (error,) = [r.getMessage() for r in caplog.records if r.name == "gpuplan.app.cycle.traffic"]
    assert error.startswith(f"app chat: Prometheus at {nowhere} is unreachable")
    assert error.endswith("the hour in progress is not observed")


@pytest.mark.parametrize("minutes", [0, 61, 2.5, "often"])
def test_a_bad_surge_watch_period_names_the_field_the_expected_and_the_received_value(
    tmp_path: Path, minutes: object
) -> None:
    path = tmp_path / "config.yaml"
    app = {"id": "chat", "requests_per_gpu_hour": 20.0}
    path.write_text(yaml.safe_dump({"cluster": {"gpus": 4}, "apps": [app], "surge_watch_minutes": minutes}))
    with pytest.raises(
        InputError, match=re.escape(f"`surge_watch_minutes` must be an integer in [1, 60]; got {minutes!r}")
    ):
        load_config(path)
