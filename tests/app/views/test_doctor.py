"""``gpuplan doctor`` against real parts: SQLite files and PostgreSQL, fitted models, a real Slurm
cluster (tests/slurm.py) and a real Prometheus (tests/prom.py), each passing and failing."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, text

from gpuplan.app.core.config import load_config
from gpuplan.app.core.models import TRAINING_MODEL_FILE, load_job_estimator
from gpuplan.app.views.doctor import MODEL_STALE_DAYS, Verdict, diagnose
from gpuplan.cli import main
from storage.factory import open_store
from storage.tables import SCHEMA_REVISION
from tests.prom import PromServer, Series
from tests.service_fixtures import models_dir
from tests.slurm import SlurmServer
from tests.storage.test_upgrades import HOUR, build_at

__all__ = ["models_dir"]


def _config(tmp_path: Path, models: Path, **extra: Any) -> Path:
    document: dict[str, Any] = {"cluster": {"gpus": 16}, "apps": [], "models_dir": str(models), **extra}
    path = tmp_path / "gpuplan.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, str]]:
    """The exit code and each check's line (by check name, the verdict first)."""
    code = main(["doctor", *args])
    lines = capsys.readouterr().out.splitlines()
    by_name = {}
    for line in lines:
        verdict, rest = line.split(" ", 1)
        name, why = rest.strip().split(": ", 1)
        by_name[name] = f"{verdict} {why}"
    return code, by_name


def _verdicts(checks: dict[str, str]) -> dict[str, str]:
    return {name: line.split(" ", 1)[0] for name, line in checks.items()}


@pytest.fixture
def database(db_url: str) -> str:
    open_store(db_url).close()
    return db_url


def test_a_healthy_head_node_passes(
    tmp_path: Path, models_dir: Path, database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, models_dir)
    code, checks = _doctor(capsys, "--config", str(config), "--db", database)
    verdicts = _verdicts(checks)
    assert code == 0, checks
    assert verdicts["config"] == verdicts["database"] == "ok"
    assert verdicts["models.training"] == verdicts["models.quantization"] == "ok"
    assert verdicts["executor"] == "ok"
    assert f"schema revision {SCHEMA_REVISION}, current" in checks["database"]
    assert "fail" not in verdicts.values()


def test_a_bad_config_fails_and_says_which_field(
    tmp_path: Path, models_dir: Path, database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("cluster: {gpus: 0}\n")
    code, checks = _doctor(capsys, "--config", str(config), "--db", database)
    assert code == 1
    assert checks["config"].startswith("fail ")
    assert "cluster.gpus" in checks["config"]
    assert checks["database"].startswith("ok ")  # the other checks still run


def test_a_missing_an_older_and_a_newer_database(
    tmp_path: Path, models_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(_config(tmp_path, models_dir))
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    code, checks = _doctor(capsys, "--config", config, "--db", missing)
    assert code == 1 and checks["database"].startswith("fail ") and "gpuplan init" in checks["database"]
    assert not (tmp_path / "none.db").exists()  # the doctor creates nothing

    older = f"sqlite:///{tmp_path / 'older.db'}"
    build_at(older, "0003")
    code, checks = _doctor(capsys, "--config", config, "--db", older)
    assert code == 0 and checks["database"].startswith("warn ") and "gpuplan db upgrade" in checks["database"]
    assert "0003" in checks["database"]
    with create_engine(older).connect() as connection:  # read, never upgraded
        assert connection.scalar(text("SELECT version_num FROM alembic_version")) == "0003"

    newer = f"sqlite:///{tmp_path / 'newer.db'}"
    open_store(newer).close()
    engine = create_engine(newer)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    code, checks = _doctor(capsys, "--config", config, "--db", newer)
    assert code == 1 and checks["database"].startswith("fail ") and "newer" in checks["database"]


@pytest.mark.postgres
def test_an_unreachable_postgresql_fails(
    tmp_path: Path, models_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.pg import free_port

    url = f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/gpuplan"
    code, checks = _doctor(capsys, "--config", str(_config(tmp_path, models_dir)), "--db", url)
    assert code == 1 and checks["database"].startswith("fail ") and "cannot reach" in checks["database"]


@pytest.mark.postgres
def test_postgresql_clock_is_compared(
    tmp_path: Path, models_dir: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    open_store(pg_url).close()
    code, checks = _doctor(capsys, "--config", str(_config(tmp_path, models_dir)), "--db", pg_url)
    assert code == 0
    assert checks["clock postgresql"].startswith("ok ")  # the server runs on this host's clock


def test_damaged_missing_and_stale_models(
    tmp_path: Path, models_dir: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    open_store(sqlite_url).close()
    damaged = tmp_path / "damaged"
    shutil.copytree(models_dir, damaged)
    (damaged / TRAINING_MODEL_FILE).write_text('{"format_version": 2, "type": "TrainingEstimator"}')
    (damaged / "quantization_estimator.json").unlink()
    code, checks = _doctor(capsys, "--config", str(_config(tmp_path, damaged)), "--db", sqlite_url)
    assert code == 1
    assert checks["models.training"].startswith("fail ") and "does not load" in checks["models.training"]
    assert checks["models.quantization"].startswith("warn ") and "missing" in checks["models.quantization"]

    fitted = load_job_estimator(models_dir, "training").provenance_.fitted_at  # type: ignore[union-attr]
    later = datetime.fromisoformat(fitted) + timedelta(days=MODEL_STALE_DAYS + 1)
    config = load_config(_config(tmp_path, models_dir))
    checks_then = {c.name: c for c in diagnose(config, None, "test", sqlite_url, later)}
    assert checks_then["models.training"].verdict is Verdict.WARN
    assert "retrain_at" in checks_then["models.training"].why
    now = {c.name: c for c in diagnose(config, None, "test", sqlite_url, datetime.now(UTC))}
    assert now["models.training"].verdict is Verdict.OK


def test_a_clock_before_the_last_commit_fails(tmp_path: Path, models_dir: Path, sqlite_url: str) -> None:
    build_at(sqlite_url, SCHEMA_REVISION)  # commits HOUR
    config = load_config(_config(tmp_path, models_dir))
    before = {c.name: c for c in diagnose(config, None, "test", sqlite_url, HOUR - timedelta(minutes=1))}
    assert before["clock"].verdict is Verdict.FAIL
    assert HOUR.isoformat() in before["clock"].why
    after = {c.name for c in diagnose(config, None, "test", sqlite_url, HOUR + timedelta(minutes=1))}
    assert "clock" not in after


# -- Slurm -----------------------------------------------------------------------------------
def _slurm_config(tmp_path: Path, models: Path, slurm: SlurmServer, partition: str, gpus: int) -> str:
    section = {"partition": partition, "slurm_conf": str(slurm.conf), "timeout_s": 20}
    return str(_config(tmp_path, models, executor="slurm", slurm=section, cluster={"gpus": gpus}))


@pytest.mark.slurm
def test_a_reachable_slurm_partition_passes_and_a_wrong_one_fails(
    slurm: SlurmServer, tmp_path: Path, models_dir: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    open_store(sqlite_url).close()
    gpus = len(slurm.nodes) * slurm.gpus_per_node
    code, checks = _doctor(
        capsys, "--config", _slurm_config(tmp_path, models_dir, slurm, "main", gpus), "--db", sqlite_url
    )
    assert code == 0, checks
    assert checks["executor.slurm"].startswith("ok ")
    assert checks["executor.partition"].startswith("ok ")
    assert f"{len(slurm.nodes)} nodes x {slurm.gpus_per_node}" in checks["executor.partition"]
    assert checks["executor.rights"].startswith("ok ")
    assert slurm.run("squeue", "--noheader", "--all").strip() == ""  # --test-only queued nothing

    # The config's GPU count differs from the partition's: a warning, the daemon plans Slurm's.
    code, checks = _doctor(
        capsys, "--config", _slurm_config(tmp_path, models_dir, slurm, "main", gpus * 2), "--db", sqlite_url
    )
    assert code == 0 and checks["executor.partition"].startswith("warn ")

    code, checks = _doctor(
        capsys, "--config", _slurm_config(tmp_path, models_dir, slurm, "nosuch", gpus), "--db", sqlite_url
    )
    assert code == 1
    assert checks["executor.slurm"].startswith("ok ")
    assert checks["executor.partition"].startswith("fail ") and "nosuch" in checks["executor.partition"]
    assert checks["executor.rights"].startswith("fail ")


@pytest.mark.slurm
def test_an_unreachable_slurmctld_fails(
    slurm: SlurmServer, tmp_path: Path, models_dir: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.pg import free_port

    open_store(sqlite_url).close()
    conf = tmp_path / "slurm.conf"
    lines = slurm.conf.read_text().splitlines()
    conf.write_text(
        "\n".join(
            f"SlurmctldPort={free_port()}" if line.startswith("SlurmctldPort=") else line for line in lines
        )
        + "\n"
    )
    section = {"partition": "main", "slurm_conf": str(conf), "timeout_s": 20}
    config = _config(tmp_path, models_dir, executor="slurm", slurm=section)
    code, checks = _doctor(capsys, "--config", str(config), "--db", sqlite_url)
    assert code == 1
    assert checks["executor.slurm"].startswith("fail ") and "unreachable" in checks["executor.slurm"]


# -- Prometheus ------------------------------------------------------------------------------
QUERY = 'sum(increase(vllm:request_success_total{model_name="chat"}[1h])) or vector(0)'


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    first = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=24)
    server = PromServer.start(tmp_path_factory.mktemp("prometheus"), {"chat": Series(first, [100.0] * 24)})
    try:
        yield server
    finally:
        server.stop()


def _prom_config(tmp_path: Path, models: Path, url: str, query: str = QUERY) -> str:
    app = {
        "id": "chat",
        "priority": 80,
        "requests_per_gpu_hour": 100.0,
        "prometheus": {"url": url, "query": query},
    }
    return str(_config(tmp_path, models, apps=[app]))


@pytest.mark.prometheus
def test_a_reachable_prometheus_passes_and_its_clock_is_compared(
    prometheus: PromServer,
    tmp_path: Path,
    models_dir: Path,
    sqlite_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    open_store(sqlite_url).close()
    code, checks = _doctor(
        capsys, "--config", _prom_config(tmp_path, models_dir, prometheus.url), "--db", sqlite_url
    )
    assert code == 0, checks
    assert checks["prometheus chat"].startswith("ok ")
    assert checks[f"clock {prometheus.url}"].startswith("ok ")  # same host, same clock
    assert checks["models.profile chat"].startswith("warn ")  # no profile fitted yet

    # A query that matches nothing answers, but warns: the app's traffic would never arrive.
    config = _prom_config(tmp_path, models_dir, prometheus.url, "sum(increase(nothing_total[1h]))")
    code, checks = _doctor(capsys, "--config", config, "--db", sqlite_url)
    assert code == 0 and checks["prometheus chat"].startswith("warn ")


@pytest.mark.prometheus
def test_an_unreachable_prometheus_fails(
    tmp_path: Path, models_dir: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.pg import free_port

    open_store(sqlite_url).close()
    url = f"http://127.0.0.1:{free_port()}"
    code, checks = _doctor(capsys, "--config", _prom_config(tmp_path, models_dir, url), "--db", sqlite_url)
    assert code == 1
    assert checks["prometheus chat"].startswith("fail ") and "unreachable" in checks["prometheus chat"]
