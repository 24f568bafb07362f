"""An app of the committed hour before the plan's start carries its GPU set into the plan,
even an empty one, so that the swap cap counts step 0 against it (constraint 4)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from contract.records import App, Assignment, Cluster
from gpuplan.app.core.bridge import AppDemand, Snapshot, scenario_document
from gpuplan.app.core.config import PlanWith, ServiceConfig
from gpuplan.app.core.forecasters import Forecasters
from gpuplan.app.cycle.tick import load_snapshot, plan_snapshot
from scheduler.policies import PolicyName
from storage.factory import open_store
from tests.service_fixtures import commit_by_hand

T0 = datetime(2026, 12, 1, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)
CHAT = App(id="chat", priority=100.0, swap_cap=2, requests_per_gpu_hour=10.0, headroom=0.0)


def _snapshot(realtime_sets: dict[str, tuple[int, ...]]) -> Snapshot:
    """8 GPUs, no batch work, ``chat`` asking for 7 GPUs every hour."""
    return Snapshot(
        start=T0,
        cluster=Cluster(gpus=8),
        queued=[],
        running=[],
        demand=[AppDemand(CHAT, [70.0] * 48, [70.0] * 48)],
        realtime_sets=realtime_sets,
    )


def _held_at_step_0(snapshot: Snapshot) -> int:
    config = replace(ServiceConfig(cluster=snapshot.cluster, apps=(CHAT,)), plan_wall_clock=False)
    _, plan = plan_snapshot(snapshot, config, PolicyName.FAST, budget_ms=20.0)
    return sum(1 for row in plan.grid if row[0] == "chat")


def test_an_app_that_held_no_gpu_in_the_hour_before_grows_by_its_swap_cap() -> None:
    carried = _snapshot({"chat": ()})
    document = scenario_document(carried, PlanWith.P90, name="carried")
    assert {"id": "chat", "gpus": []} in document["running"]
    assert _held_at_step_0(carried) == CHAT.swap_cap
    # Without a committed hour before (a first plan), the app starts where its demand is.
    fresh = _snapshot({})
    assert all(entry["id"] != "chat" for entry in scenario_document(fresh, PlanWith.P90, name="x")["running"])
    assert _held_at_step_0(fresh) == 7


def test_the_snapshot_after_a_committed_hour_gives_every_app_a_set(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/sets.db")
    config = ServiceConfig(cluster=Cluster(gpus=8), apps=(CHAT,), models_dir=tmp_path / "models")
    try:
        store.save_cluster(config.cluster)
        store.save_app(CHAT)
        forecasters = Forecasters(config.models_dir)
        assert load_snapshot(store, T0, config, forecasters).realtime_sets == {}  # nothing committed
        commit_by_hand(store, [T0 - HOUR], (Assignment("other", (0, 1)),), gpus=8)
        assert load_snapshot(store, T0, config, forecasters).realtime_sets == {"chat": ()}
        commit_by_hand(store, [T0], (Assignment("chat", (6, 7)),), gpus=8)
        assert load_snapshot(store, T0 + HOUR, config, forecasters).realtime_sets == {"chat": (6, 7)}
    finally:
        store.close()
