"""Bringing a database to life: the cluster and apps from the config, their traffic and
demand profiles, and, for the demo, a queue and a job history drawn from the bundled one.

Idempotent: what a database already has is kept, so every start of the daemon may call it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from contract.errors import InputError
from contract.records import App, Job, JobEstimate
from contract.scenario import JobKind
from features.traffic import load_traffic
from gpuplan.app.core.bridge import STEP, floor_hour
from gpuplan.app.core.config import AppTraffic, ServiceConfig
from gpuplan.app.core.models import TRAINING_MODEL_FILE
from gpuplan.app.cycle.tick import fit_profile, ingest_traffic
from storage.store import Store

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

WEEK = timedelta(days=7)
#: The demo's queue: this many jobs of each kind, drawn from the bundled history.
DEMO_QUEUE: dict[JobKind, int] = {JobKind.TRAINING: 9, JobKind.QUANTIZATION: 3}
DEMO_PRIORITIES = (10.0, 30.0, 50.0, 70.0)
#: Rows of the bundled history copied into a demo database (what `train --db` starts from).
DEMO_HISTORY_ROWS = 3000
DEMO_SEED = 7


def ensure_models(config: ServiceConfig) -> bool:
    """Train the job forecasters on the bundled history when the models folder has none."""
    if (config.models_dir / TRAINING_MODEL_FILE).is_file():
        return False
    from gpuplan.app.cycle.retrain import retrain
    from training_data.history import bundled_history_path, load_history

    path = bundled_history_path()
    log.info("no models in %s: training them on the bundled history", config.models_dir)
    retrain(load_history(path), source=str(path), models_dir=config.models_dir, traffic_paths=None)
    return True


def check_traffic(config: ServiceConfig) -> None:
    """Read every traffic file the config names, before a database is opened: a config that
    would fail half-way through :func:`ensure_service` fails here, with nothing written."""

    for source in config.traffic:
        try:
            load_traffic(source.path)
        except InputError as error:
            if error.field != "traffic":  # a field of the file itself: its own message says where
                raise
            raise InputError(
                f"apps[{source.app}].traffic", error.expected, error.got, hint=error.hint
            ) from None


def ensure_service(store: Store, config: ServiceConfig, now: datetime, *, from_file: bool = False) -> None:
    """Cluster, apps, traffic and profiles, and the demo queue, where the database lacks them.

    A config read from a file (``from_file``) is the source of truth for the cluster and the
    apps and replaces what is stored; the demo defaults only fill an empty database.
    """
    fresh = store.cluster() is None
    if fresh or from_file:
        store.save_cluster(config.cluster)
    stored_apps = {app.id: app for app in store.apps()}
    traffic_of = {t.app: t for t in config.traffic}
    for configured in config.apps:
        if configured.id in stored_apps and not from_file:
            continue
        app, source, stored = configured, traffic_of.get(configured.id), stored_apps.get(configured.id)
        if store.profile(app.id) is None and source is not None:
            app = _seed_traffic(store, app, source, now, demo=not from_file)
        elif app.requests_per_gpu_hour <= 0 and stored is not None and stored.requests_per_gpu_hour > 0:
            # A restart on the same config: the capacity was derived from the traffic on the first start.
            app = replace(app, requests_per_gpu_hour=stored.requests_per_gpu_hour)
        elif app.requests_per_gpu_hour <= 0:
            raise InputError(
                f"apps[{app.id}].requests_per_gpu_hour", "a number > 0 (or traffic to derive it from)", 0
            )
        store.save_app(app)
    if fresh and config.demo_queue:
        _seed_demo_jobs(store, now)


#: The GPUs an app's traffic peak needs when its config gives neither requests per GPU-hour
#: nor ``peak_gpus``.
DEFAULT_PEAK_GPUS = 8


def derived_capacity(requests: Iterable[float], peak_gpus: int | None) -> float:
    """An app's requests per GPU-hour when its config gives none: its traffic's peak over
    ``peak_gpus`` (default :data:`DEFAULT_PEAK_GPUS`)."""
    return max(float(max(requests)), 1.0) / (peak_gpus or DEFAULT_PEAK_GPUS)


def _seed_traffic(store: Store, app: App, source: AppTraffic, now: datetime, *, demo: bool) -> App:
    """Store the app's traffic, moved by whole weeks to end before ``now`` (the weekly pattern
    stays on its weekdays), fit its profile on it, and derive its GPU capacity if unset.

    A move of a user's traffic (not the ``demo``'s bundled series) is logged as a warning:
    the hours the profile learns from are not the hours the file names."""
    import numpy as np

    traffic = load_traffic(source.path)
    last = traffic.hours[-1].astype("datetime64[s]").item().replace(tzinfo=UTC)
    weeks = math.floor((floor_hour(now) - STEP - last) / WEEK)
    shift_hours = weeks * 7 * 24
    if weeks:
        (log.info if demo else log.warning)(
            "app %s: the traffic in %s ends at %s; moved %s by %d whole weeks to end at %s "
            "(the weekly pattern keeps its weekdays)",
            app.id,
            source.path.name,
            last.isoformat(),
            "forward" if weeks > 0 else "back",
            abs(weeks),
            (last + weeks * WEEK).isoformat(),
        )
    ingest_traffic(store, app.id, traffic, shift_hours=shift_hours)
    profile = fit_profile(store, app.id, traffic.hours + np.timedelta64(shift_hours, "h"), traffic.requests)
    if app.requests_per_gpu_hour <= 0:
        app = replace(app, requests_per_gpu_hour=derived_capacity(traffic.requests, source.peak_gpus))
    log.info(
        "app %s: %d hours of traffic from %s, profile %s",
        app.id,
        len(traffic),
        source.path.name,
        profile.method_.value,
    )
    return app


def _demo_draw(history: pd.DataFrame) -> list[tuple[dict[str, Any], float]]:
    """The demo queue's specs drawn from ``history``'s completed jobs, each with the hours it
    really took (what the demo cluster runs it for)."""
    import numpy as np

    from features.job_features import SCHEMAS

    rng = np.random.default_rng(DEMO_SEED)
    done = history[history["outcome"] == "completed"]
    hours = (done["end_time"] - done["start_time"]).dt.total_seconds() / 3600
    fits = done[(done["gpus"] <= 8) & (hours <= 20) & (hours >= 0.5)]
    drawn = []
    kind: JobKind
    for kind, count in DEMO_QUEUE.items():
        rows = fits[fits["kind"] == kind]
        for n, index in enumerate(rng.choice(len(rows), size=count, replace=False)):
            row = rows.iloc[int(index)]
            spec: dict[str, Any] = {"id": f"demo-{kind}-{n}", "kind": kind}
            spec["priority"] = float(rng.choice(DEMO_PRIORITIES))
            spec.update({name: _plain(row[name]) for name in SCHEMAS[kind].names})
            drawn.append((spec, float(hours.loc[rows.index[int(index)]])))
    return drawn


def demo_durations() -> dict[str, float]:
    """Job id -> the hours each job of the demo queue really runs (from the bundled history)."""
    from training_data.history import bundled_history_path, load_history

    drawn = {spec["id"]: actual for spec, actual in _demo_draw(load_history(bundled_history_path()))}
    drawn.update({spec["id"]: spec["hours"] for spec in _demo_batch_specs()})
    return drawn


def _demo_batch_specs() -> list[dict[str, Any]]:
    # Batch inference has no forecaster: its spec states GPUs and hours.
    return [
        {
            "id": f"demo-batch-inference-{n}",
            "kind": "batch_inference",
            "priority": 40.0,
            "gpus": g,
            "hours": h,
        }
        for n, (g, h) in enumerate(((2, 3.0), (4, 5.0)))
    ]


def _seed_demo_jobs(store: Store, now: datetime) -> None:
    """A queue of real-looking jobs (features from the bundled history) and a slice of history."""
    from training_data.history import bundled_history_path, load_history

    history = load_history(bundled_history_path())
    store.append_history(history.tail(DEMO_HISTORY_ROWS))
    for spec, _ in _demo_draw(history):
        kind = JobKind(spec["kind"])
        store.add_job(Job(id=spec["id"], kind=kind, priority=spec["priority"], spec=spec, submitted_at=now))
    for spec in _demo_batch_specs():
        gpus, hours_ = spec["gpus"], spec["hours"]
        store.add_job(
            Job(
                id=spec["id"],
                kind=JobKind.BATCH_INFERENCE,
                priority=40.0,
                spec=spec,
                submitted_at=now,
                estimate=JobEstimate(gpus=gpus, hours_p50=hours_, hours_p90=hours_),
            )
        )


def _plain(value: Any) -> Any:
    """A frame cell as a JSON value."""
    if hasattr(value, "item"):
        value = value.item()
    return value
