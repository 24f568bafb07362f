"""``gpuplan doctor``: what a head node needs before the daemon can run, one check a line.

Each check gives ``ok``, ``warn`` (it runs, but an operator should look) or ``fail`` (the
daemon would not do its work), and why. Nothing is written: the database's schema is read,
never upgraded; Slurm is asked with ``sbatch --test-only``, which queues nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from contract.errors import InputError, StoreError
from gpuplan.app.adapters.traffic_sources import PrometheusError, instant_value
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.core.models import MODEL_FILES, load_job_estimator
from gpuplan.app.core.ports import Check, Checkable, Verdict
from storage import maintenance
from storage.factory import open_store
from storage.store import Store

#: A job forecaster fitted longer ago than this is stale (the nightly retrain keeps it fresh).
MODEL_STALE_DAYS = 30
#: An app's profile that has seen no traffic hour for this long is stale (its traffic stopped).
PROFILE_STALE_HOURS = 48
#: Clocks further apart than these warn, or fail: an hour's commit is decided by the clock.
CLOCK_WARN_S = 5.0
CLOCK_FAIL_S = 300.0


def diagnose(
    config: ServiceConfig | None,
    config_error: str | None,
    config_source: str,
    db_url: str,
    now: datetime,
    *,
    cluster: Checkable | None = None,
) -> list[Check]:
    """Every check, in the order an operator fixes them. ``config`` is None when it did not load
    (``config_error`` says why); the checks that need it are then left out. ``cluster``: the
    config's Slurm partition, asked through the port
    (:func:`gpuplan.app.adapters.executors.registry.slurm_partition`; None: no ``slurm:`` section)."""
    if config is None:
        return [Check("config", Verdict.FAIL, f"{config_source}: {config_error}"), *_database(db_url, now)]
    checks = [Check("config", Verdict.OK, f"{config_source}: {_summary(config)}")]
    checks += quota_checks(config)
    checks += _database(db_url, now, config)
    checks += _models(config, now)
    checks += _executor(config, now, cluster)
    checks += _prometheus(config)
    return checks


def failed(checks: list[Check]) -> bool:
    return any(check.verdict is Verdict.FAIL for check in checks)


def quota_checks(config: ServiceConfig) -> list[Check]:
    """Per GPU model with quotas, whether they add up to less than its GPUs (the rest unowned,
    free to every team), exactly to them, or to more (a warning: oversubscribed)."""
    checks = []
    for model, quotas, gpus in config.quota_balance():
        if quotas > gpus:
            why = (
                f"{model}: quotas add up to {quotas} of {gpus} GPUs, more than the model has: "
                "a quota is guaranteed only as far as the GPUs go"
            )
            checks.append(Check(f"teams {model}", Verdict.WARN, why))
        elif quotas < gpus:
            unowned = gpus - quotas
            share = f"{quotas} of {gpus} GPUs, {unowned} unowned"
            why = f"{model}: quotas add up to {share} (any team may use them)"
            checks.append(Check(f"teams {model}", Verdict.OK, why))
        else:
            checks.append(Check(f"teams {model}", Verdict.OK, f"{model}: quotas add up to its {gpus} GPUs"))
    return checks


def _summary(config: ServiceConfig) -> str:
    executor = config.executor or "jsonl"
    return (
        f"{config.cluster.gpus} GPUs, {len(config.apps)} apps, executor {executor}, "
        f"a cycle every {config.cycle_minutes} min"
    )


# -- the database ---------------------------------------------------------------------------------
def _database(url: str, now: datetime, config: ServiceConfig | None = None) -> Iterator[Check]:

    try:
        state = maintenance.schema_state(url)
    except (StoreError, InputError) as error:
        yield Check("database", Verdict.FAIL, str(error))
        return
    if state.revision is None:
        yield Check("database", Verdict.FAIL, f"{url}: no gpuplan database; `gpuplan init` creates it")
        return
    verdict = Verdict.OK if state.current else Verdict.FAIL if state.newer else Verdict.WARN
    yield Check("database", verdict, f"{url}: {maintenance.describe(state)}")
    if not state.current:
        return  # opening would upgrade it: the doctor writes nothing
    store = open_store(url)
    try:
        if store.cluster() is None:
            yield Check(
                "database.cluster", Verdict.WARN, "no cluster stored yet: the daemon's first start stores it"
            )
        last = store.last_commit()
        if last is not None and last.hour > now:
            yield Check(
                "clock",
                Verdict.FAIL,
                f"now ({now.isoformat(timespec='seconds')}) is before the last committed hour "
                f"{last.hour.isoformat()}: the daemon commits nothing until the clock passes it",
            )
        if store.dialect == "postgresql":
            yield _offset_check("clock postgresql", "the PostgreSQL server", _pg_now(store))
        if config is not None:
            yield from _profiles(store, config, now)
    finally:
        store.close()


def _pg_now(store: Store) -> datetime:
    from sqlalchemy import text

    engine = store.engine  # type: ignore[attr-defined]
    with engine.connect() as connection:
        value: datetime = connection.scalar(text("SELECT now()"))
    return value.astimezone(UTC)


def _profiles(store: Store, config: ServiceConfig, now: datetime) -> Iterator[Check]:
    for app in config.apps:
        through = store.profile_through(app.id)
        name = f"models.profile {app.id}"
        if through is None:
            yield Check(
                name, Verdict.WARN, "no demand profile yet: the daemon fits one from the app's traffic"
            )
            continue
        age = now - through
        if age > timedelta(hours=PROFILE_STALE_HOURS):
            yield Check(
                name,
                Verdict.WARN,
                f"last traffic hour seen {through.isoformat()}, {age.total_seconds() / 3600:.0f} h ago "
                f"(more than {PROFILE_STALE_HOURS} h): is the app's traffic arriving?",
            )
        else:
            yield Check(name, Verdict.OK, f"last traffic hour seen {through.isoformat()}")


# -- the models -----------------------------------------------------------------------------------
def _models(config: ServiceConfig, now: datetime) -> Iterator[Check]:

    folder = config.models_dir
    for kind, file_name in MODEL_FILES.items():
        name = f"models.{kind}"
        path = folder / file_name
        if not path.is_file():
            yield Check(
                name,
                Verdict.WARN,
                f"{path} is missing: the daemon's first start trains it on the bundled history "
                "(or run `gpuplan train --models DIR`)",
            )
            continue
        try:
            estimator = load_job_estimator(folder, kind)
        except InputError as error:
            yield Check(name, Verdict.FAIL, f"{path}: {error}")
            continue
        fitted = _fitted_at(getattr(estimator, "provenance_", None))
        if fitted is None:
            yield Check(name, Verdict.WARN, f"{path} loads, but says not when it was fitted")
            continue
        age_days = (now - fitted).total_seconds() / 86_400
        if age_days > MODEL_STALE_DAYS:
            hint = "" if config.retrain_at else "; set retrain_at to refit it nightly"
            yield Check(
                name,
                Verdict.WARN,
                f"{path} was fitted {age_days:.0f} days ago (more than {MODEL_STALE_DAYS}): "
                f"`gpuplan train --db URL` refits it on the stored history{hint}",
            )
        else:
            yield Check(name, Verdict.OK, f"{path}, fitted {fitted.isoformat()}")


def _fitted_at(provenance: object) -> datetime | None:
    text = getattr(provenance, "fitted_at", None)
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# -- the executor ---------------------------------------------------------------------------------
def _executor(config: ServiceConfig, now: datetime, cluster: Checkable | None) -> Iterator[Check]:
    if cluster is None:
        target = config.commits_file or "the database's own feed"
        yield Check("executor", Verdict.OK, f"{config.executor or 'jsonl'}: commits go to {target}")
        return
    yield from cluster.checks(now)


# -- Prometheus and the clocks ----------------------------------------------------------------------
def _prometheus(config: ServiceConfig) -> Iterator[Check]:

    clocks: set[str] = set()
    for source in config.prometheus:
        name = f"prometheus {source.app}"
        try:
            _, requests = instant_value(source, source.query)
        except PrometheusError as error:
            yield Check(name, Verdict.FAIL, str(error))
            continue
        if requests is None:
            yield Check(name, Verdict.WARN, f"{source.url} answers, but the app's query gives no series now")
        else:
            yield Check(name, Verdict.OK, f"{source.url}: the app's query gives {requests:g} requests now")
        if source.url in clocks:
            continue
        clocks.add(source.url)
        try:
            _, server_time = instant_value(source, "time()")
        except PrometheusError as error:
            yield Check(f"clock.prometheus {source.url}", Verdict.WARN, f"cannot read its time: {error}")
            continue
        if server_time is not None:
            theirs = datetime.fromtimestamp(server_time, UTC)
            yield _offset_check(f"clock {source.url}", f"Prometheus at {source.url}", theirs)


def _offset_check(name: str, what: str, theirs: datetime) -> Check:
    offset = (datetime.now(UTC) - theirs).total_seconds()
    verdict = (
        Verdict.FAIL
        if abs(offset) > CLOCK_FAIL_S
        else Verdict.WARN
        if abs(offset) > CLOCK_WARN_S
        else Verdict.OK
    )
    return Check(name, verdict, f"this host's clock is {offset:+.1f} s from {what}'s")
