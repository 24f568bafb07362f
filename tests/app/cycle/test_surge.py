"""A surge is an incoming request: traffic of the hour in progress above the app's committed GPUs
is answered at once by a re-plan that amends the hour, with additions only, within the swap cap."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from contract.records import App, Assignment, Cluster, Job, JobEstimate, ObservedTraffic, Outcome
from contract.scenario import JobKind
from gpuplan.app.adapters.executors import InMemoryExecutor
from gpuplan.app.core.bridge import STEP, hour_allocation, merged_assignments
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.core.forecasters import Forecasters
from gpuplan.app.cycle.amend import check_amendment, occupied
from gpuplan.app.cycle.finish import finish
from gpuplan.app.cycle.traffic import MIN_OBSERVED_MINUTES, in_progress
from gpuplan.app.service import Service, run_once
from gpuplan.app.views.health import Health
from gpuplan.http.context import ApiContext
from storage.factory import open_store
from storage.store import Store
from tests.service_fixtures import commit_by_hand, run_cli

H0 = datetime(2026, 12, 2, 10, tzinfo=UTC)
#: chat serves 10 requests per GPU-hour; it holds GPUs 6 and 7 in the hour before and in H0.
CHAT = App("chat", 80.0, swap_cap=2, requests_per_gpu_hour=10.0)


def _committed(url: str) -> ServiceConfig:
    """8 GPUs; the hour before H0 and H0 committed with chat on GPUs 6-7; nothing else."""
    config = ServiceConfig(cluster=Cluster(gpus=8), apps=(CHAT,), models_dir=Path("models"))
    store = open_store(url)
    try:
        store.save_cluster(config.cluster)
        store.save_app(CHAT)
        commit_by_hand(store, (H0 - STEP, H0), (Assignment("chat", (6, 7)),), gpus=8)
    finally:
        store.close()
    return config


@contextmanager
def _api(
    url: str, config: ServiceConfig, clock: list[datetime]
) -> Iterator[tuple[ApiContext, InMemoryExecutor]]:
    store = open_store(url)
    executor = InMemoryExecutor()
    mutex = threading.Lock()

    @contextmanager
    def lock() -> Iterator[None]:
        with mutex:
            yield

    try:
        yield (
            ApiContext(
                store=store,
                config=config,
                executor=executor,
                forecasters=Forecasters(config.models_dir),
                clock=lambda: clock[0],
                plan_lock=lock,
                health=Health(started_at=H0),
            ),
            executor,
        )
    finally:
        store.close()


def _chat(store: Store, hour: datetime) -> tuple[int, ...]:
    return merged_assignments(hour_allocation(store, hour), ()).get("chat", ())


def test_a_surge_pushed_mid_hour_amends_the_hour_with_additions_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/surge.db"
    config = _committed(url)
    clock = [H0 + timedelta(minutes=20)]
    with _api(url, config, clock) as (api, executor):
        store = api.store
        committed = store.commit(H0)
        assert committed is not None
        # 20 requests in 20 minutes: 60 an hour, 6 GPUs' worth, where chat holds 2.
        stored, surge = api.push_traffic("chat", [(H0 - STEP, 25.0), (H0, 20.0)])
        assert stored.hours == 1 and stored.observed == ObservedTraffic("chat", H0, 20.0, 20.0)
        assert surge is not None and surge.apps == ("chat",)
        assert (
            surge.report.start == H0 + STEP and not surge.report.committed
        )  # the re-plan from the next hour
        amendment = surge.amendment
        assert amendment is not None and amendment.hour == H0 and amendment.made_at == clock[0]
        assert executor.amendments == [amendment]
        # Additions only: the commit stands as it was, chat grows by its swap cap onto idle GPUs.
        assert store.commit(H0) == committed
        added = merged_assignments(None, [amendment])["chat"]
        assert len(added) == CHAT.swap_cap and not set(added) & {6, 7}
        assert set(_chat(store, H0)) == {6, 7, *added}
        # The hour in progress is observed, never stored as a finished hour.
        assert [row.hour for row in store.traffic("chat")] == [H0 - STEP]
        assert store.observed_traffic(H0) == [stored.observed]
        # Still short, but the swap cap's room since the hour before is used: nothing more is added.
        clock[0] = H0 + timedelta(minutes=40)
        _, again = api.push_traffic("chat", [(H0, 40.0)])
        assert again is not None and again.apps == ("chat",)
        assert _chat(store, H0) == tuple(sorted({6, 7, *added}))
        # Within what the hour holds now (4 GPUs, 40 an hour): no surge, no re-plan.
        runs = store.run()
        _, calm = api.push_traffic("chat", [(H0, 20.0)])
        assert calm is None and store.run() == runs


def test_a_surge_takes_the_gpus_a_batch_job_freed_within_the_hour(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/freed.db"
    config = ServiceConfig(cluster=Cluster(gpus=8), apps=(CHAT,), models_dir=Path("models"))
    store = open_store(url)
    try:
        store.save_cluster(config.cluster)
        store.save_app(CHAT)
        # The rest of the cluster is busy in H0: "wide" on GPUs 0-3, "short" on 4-5.
        for job_id, gpus in (("wide", 4), ("short", 2)):
            estimate = JobEstimate(gpus=gpus, hours_p50=8.0, hours_p90=8.0)
            store.add_job(Job(job_id, JobKind.TRAINING, 50.0, {"id": job_id}, H0 - STEP, estimate=estimate))
        held = (Assignment("chat", (6, 7)), Assignment("wide", (0, 1, 2, 3)), Assignment("short", (4, 5)))
        commit_by_hand(store, (H0 - STEP, H0), held, gpus=8)
        committed = store.commit(H0)
    finally:
        store.close()
    clock = [H0 + timedelta(minutes=20)]
    with _api(url, config, clock) as (api, _):
        store = api.store
        finish(store, "short", H0 + timedelta(minutes=5), Outcome.OK)
        _, surge = api.push_traffic("chat", [(H0, 20.0)])  # 60 an hour: 6 GPUs' worth
        assert surge is not None and surge.amendment is not None
        # The swap cap's two GPUs come from the job that ended at :05; the running one keeps its block.
        assert merged_assignments(None, [surge.amendment]) == {"chat": (4, 5)}
        assert store.commit(H0) == committed
        assert set(_chat(store, H0)) == {4, 5, 6, 7}
        assert check_amendment(
            [Assignment("chat", (0,))],
            gpus=8,
            down=frozenset(),
            held=occupied(store, H0),
            before=None,
            apps={"chat": CHAT},
            queued={},
        ) == ["chat: GPU 0 is committed in this hour"]


def test_the_hour_in_progress_is_read_from_a_few_minutes_on() -> None:
    assert in_progress("chat", H0, 5.0, H0 + timedelta(minutes=61)) is None
    assert in_progress("chat", H0 - STEP, 5.0, H0) is None
    early = in_progress("chat", H0, 5.0, H0 + timedelta(seconds=30))
    assert early is not None and early.minutes == MIN_OBSERVED_MINUTES
    assert early.hourly_rate() == pytest.approx(5.0 * 60 / MIN_OBSERVED_MINUTES)


def test_the_daemon_cycle_amends_for_the_observed_traffic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cycle.db"
    config = _committed(url)
    store = open_store(url)
    try:
        store.observe_traffic([ObservedTraffic("chat", H0, 15.0, 30.0)])  # 30 an hour: 3 GPUs
        service = Service(store, config, InMemoryExecutor())
        run_once(service, H0 + timedelta(minutes=30))
        assert len(_chat(store, H0)) == 3
        (amendment,) = store.amendments(H0, H0 + STEP)
        assert [a.job for a in amendment.assignments] == ["chat"]
        # An observation of another hour is not this hour's.
        run_once(service, H0 + STEP + timedelta(minutes=30))
        assert store.amendments(H0 + STEP, H0 + 2 * STEP) == []
    finally:
        store.close()


def test_ingest_with_the_hour_in_progress_answers_the_surge(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/ingest.db"
    _committed(url)
    csv = tmp_path / "chat.csv"
    csv.write_text(f"hour,requests\n{(H0 - STEP).isoformat()},20\n{H0.isoformat()},10\n")
    at = (H0 + timedelta(minutes=15)).isoformat()
    result = run_cli("ingest", "chat", "--traffic", csv, "--db", url, "--at", at)
    assert result.code == 0, result.err
    assert "chat: stored 1 hours" in result.out
    assert "10 requests in the first 15 minutes" in result.out
    assert "surge: re-planned" in result.out and "chat +2 GPUs" in result.out  # 40 an hour: 4 GPUs
    store = open_store(url)
    try:
        assert len(_chat(store, H0)) == 4
        assert [row.hour for row in store.traffic("chat")] == [H0 - STEP]
    finally:
        store.close()


def test_an_app_whose_traffic_ran_high_in_its_band_is_planned_with_the_reserve(tmp_path: Path) -> None:
    """Three hours at their P90: the plan's next hours ask GPUs for the reserve, later ones for the P90."""
    from features.traffic import load_traffic
    from forecasting.persistence import model_bytes
    from forecasting.realtime import SURGE_RISK_HOURS, RealtimeProfile
    from gpuplan.app.core.bridge import AppDemand
    from gpuplan.app.cycle.tick import app_demand, next_unseen_hour

    traffic = load_traffic(
        Path(__file__).resolve().parents[3] / "training_data" / "traffic" / "philly_active_nodes_hourly.csv"
    )
    hours, requests = traffic.hours, traffic.requests
    app = App("philly", 80.0, swap_cap=64, requests_per_gpu_hour=float(requests[:900].max()) / 16)
    store = open_store(f"sqlite:///{tmp_path}/risk.db")
    try:
        store.save_app(app)
        for band in ("p50", "p90"):
            profile = RealtimeProfile(method="weekly", surge_decay=0.0).fit(hours[:900], requests[:900])
            for hour, value in zip(
                hours[900:903], getattr(profile.predict(hours[900], 3), band), strict=True
            ):
                profile.update(hour, float(value))
            start = next_unseen_hour(profile)
            store.save_profile(app.id, model_bytes(profile), through=start - STEP)
            demand = app_demand(store, app, start, 24)
            p90_only = AppDemand(app, demand.p50, demand.p90)
            assert list(demand.gpus[SURGE_RISK_HOURS:]) == list(p90_only.gpus[SURGE_RISK_HOURS:])
            if band == "p50":  # at the P50: no risk, the P90 alone
                assert list(demand.gpus) == list(p90_only.gpus)
            else:
                assert sum(demand.gpus[:SURGE_RISK_HOURS]) > sum(p90_only.gpus[:SURGE_RISK_HOURS])
    finally:
        store.close()


def _rising(tmp_path: Path, before: float, rate: float) -> int:
    """chat (swap cap 2, 10 requests a GPU-hour) on GPUs 4-7 in the hour before and in H0, a
    flat profile of about 10 requests an hour whose latest hour (before H0) saw ``before``;
    H0 observed at ``rate`` an hour at :30: the GPUs chat holds in H0 after the :30 cycle."""
    import numpy as np

    from forecasting.persistence import model_bytes
    from forecasting.realtime import RealtimeProfile

    url = f"sqlite:///{tmp_path}/rising.db"
    config = ServiceConfig(cluster=Cluster(gpus=8), apps=(CHAT,), models_dir=Path("models"))
    store = open_store(url)
    try:
        store.save_cluster(config.cluster)
        store.save_app(CHAT)
        commit_by_hand(store, (H0 - STEP, H0), (Assignment("chat", (4, 5, 6, 7)),), gpus=8)
        first = np.datetime64(H0.replace(tzinfo=None), "h") - 21 * 24
        hours = first + np.arange(21 * 24).astype("timedelta64[h]")
        requests = 10.0 + np.random.default_rng(0).normal(0, 1, hours.size).clip(-3, 3)
        requests[-1] = before
        profile = RealtimeProfile(method="flat", surge_decay=0.0, surge_reserve=0.0).fit(hours, requests)
        store.save_profile("chat", model_bytes(profile), through=H0 - STEP)
        store.observe_traffic([ObservedTraffic("chat", H0, rate / 2, 30.0)])
        run_once(Service(store, config, InMemoryExecutor()), H0 + timedelta(minutes=30))
        return len(_chat(store, H0))
    finally:
        store.close()


def test_a_rising_app_gets_gpus_before_the_hour_that_needs_them(tmp_path: Path) -> None:
    """35 requests an hour so far are within chat's 4 GPUs (40), but up from 10 the hour
    before: faster than its swap cap follows (2 GPUs, 20 requests, an hour). The next hours are
    planned for the rise carried on (60, 85, 110 requests: 6, 9, 11 GPUs), and the :30 cycle
    grows chat now, in the hour that does not need it yet, toward what the swap cap must reach:
    5 GPUs (the next hour's 7 of the capped curve less a cap). Not rising, nothing is added."""
    assert _rising(tmp_path / "up", before=10.0, rate=35.0) == 5
    assert _rising(tmp_path / "flat", before=30.0, rate=35.0) == 4
