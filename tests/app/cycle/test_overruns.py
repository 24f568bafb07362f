"""Jobs that overrun: the time limit (the spec's, or P90 times the config's factor) shown by
status and logged once, and with `overrun: stop` the job stopped through the executor."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from contract.errors import InputError
from contract.records import JobState, Outcome
from gpuplan.app.adapters.executors import JsonLinesExecutor
from gpuplan.app.core.bridge import time_limit
from gpuplan.app.cycle.tick import plan_cycle
from gpuplan.app.lab.seed import ensure_service
from storage.factory import open_store
from tests.app.test_service import _db, _once
from tests.service_fixtures import _in_tmp_path, models_dir, quick_config, run_cli

__all__ = ["_in_tmp_path", "models_dir"]

T0 = datetime(2026, 11, 30, 10, 5, tzinfo=UTC)
HOUR = timedelta(hours=1)


def test_a_job_past_its_time_limit_is_shown_by_status_and_named_once_in_the_log(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an executor that stops it, a job past its limit (its P90 hours x 2, or its
    spec's ``time_limit_hours``) holds its GPUs: status marks it and the cycle's log names it."""
    from gpuplan.app.core.bridge import time_limit
    from gpuplan.app.cycle import tick
    from gpuplan.app.cycle.tick import warn_overruns

    monkeypatch.setattr(
        tick, "_warned_overruns", set()
    )  # this process's earlier cycles warned of the same ids
    db = _db(tmp_path)
    _once(db, models_dir, T0)
    store = open_store(db)
    try:
        running = store.jobs([JobState.RUNNING])
    finally:
        store.close()
    assert running
    limits = {job.id: time_limit(job) for job in running}
    first = min(limits, key=lambda job_id: limits[job_id])  # the first to overrun
    late = limits[first]
    assert late is not None and late > T0
    before = json.loads(run_cli("status", "--db", db, "--json", "--at", (late - HOUR).isoformat()).out)
    after = json.loads(run_cli("status", "--db", db, "--json", "--at", late.isoformat()).out)
    overrun = {r["job"] for r in after["running"] if r.get("overrun")}
    assert not any(r.get("overrun") for r in before["running"])
    assert first in overrun and overrun == {j for j, limit in limits.items() if limit and limit <= late}
    text = run_cli("status", "--db", db, "--at", late.isoformat()).out
    assert any(first in line and "OVERRUN" in line for line in text.splitlines())
    with caplog.at_level(logging.WARNING, logger="gpuplan.app.cycle.tick"):
        assert warn_overruns(running, late - HOUR) == []
        assert first in warn_overruns(running, late)
        assert warn_overruns(running, late + HOUR) == []  # once
    assert [
        r.getMessage() for r in caplog.records if first in r.getMessage() and "time limit" in r.getMessage()
    ]
    limited = replace(running[0], spec={**running[0].spec, "time_limit_hours": 1.5})
    assert time_limit(limited) == limited.started_at + timedelta(hours=1.5)


def test_with_overrun_stop_a_job_past_its_limit_is_stopped_through_the_executor(
    tmp_path: Path, models_dir: Path
) -> None:
    """``overrun: stop`` and ``overrun_factor``: the cycle past a running job's P90 hours x the
    factor tells the executor to stop it (the json-lines feed gets its stop line) and the job
    ends cancelled; a job within its limit runs on, and the default only warns."""
    store = open_store(_db(tmp_path))
    try:
        config = replace(quick_config(models_dir), overrun_factor=1.5)
        ensure_service(store, config, T0)
        feed = tmp_path / "commits.jsonl"
        executor = JsonLinesExecutor(feed)
        plan_cycle(store, T0, config, executor)
        running = store.jobs([JobState.RUNNING])
        assert running
        limits = {job.id: time_limit(job, 1.5) for job in running}
        first = min(limits, key=lambda job_id: limits[job_id])  # type: ignore[arg-type, return-value]
        late = limits[first]
        assert late is not None and late < time_limit(store.job(first), 2.0)  # type: ignore[arg-type, operator]
        plan_cycle(store, late, config, executor)  # `overrun: warn`, the default: nothing stopped
        assert store.job(first).state is JobState.RUNNING  # type: ignore[union-attr]
        stopping = replace(config, overrun="stop")
        plan_cycle(store, late, stopping, executor)
        ended = store.job(first)
        still = {job.id for job in store.jobs([JobState.RUNNING])}
    finally:
        store.close()
    assert ended is not None and ended.state is JobState.DONE and ended.outcome is Outcome.CANCELLED
    stops = [line for line in map(json.loads, feed.read_text().splitlines()) if line.get("stop")]
    assert {line["job"] for line in stops} == {j for j, limit in limits.items() if limit and limit <= late}
    assert first not in still


def test_the_overrun_keys_of_a_config_file_are_checked(tmp_path: Path) -> None:
    from gpuplan.app.core.config import load_config

    path = tmp_path / "cluster.yaml"
    path.write_text("cluster: {gpus: 8}\noverrun: stop\noverrun_factor: 3\n")
    config = load_config(path)
    assert (config.overrun, config.overrun_factor) == ("stop", 3.0)
    path.write_text("cluster: {gpus: 8}\noverrun: kill\n")
    with pytest.raises(InputError, match=r"`overrun` must be warn or stop; got 'kill'"):
        load_config(path)
    path.write_text("cluster: {gpus: 8}\noverrun_factor: 0.5\n")
    with pytest.raises(InputError, match=r"`overrun_factor` must be a number in \[1, 100\]; got 0.5"):
        load_config(path)
