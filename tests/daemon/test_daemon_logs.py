"""What the live daemon writes to stderr: one line per cycle without -v, JSON lines on request,
and one clear line (no traceback) when its HTTP port is taken."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

from tests.daemon.test_daemon import _gpuplan, _until_first_commit
from tests.service_fixtures import _in_tmp_path, models_dir

__all__ = ["_in_tmp_path", "models_dir"]


def _one_cycle(tmp_path: Path, models: Path, *flags: str) -> str:
    db = f"sqlite:///{tmp_path / 'd.db'}"
    with _gpuplan("daemon", "--db", db, "--models", models, "--print-commits", *flags) as process:
        line = _until_first_commit(process)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    assert line.startswith("commit "), err
    assert process.returncode == 0, err
    return err


def test_the_daemon_logs_one_line_per_cycle_without_v(tmp_path: Path, models_dir: Path) -> None:
    err = _one_cycle(tmp_path, models_dir)
    cycles = [line for line in err.splitlines() if " cycle hour=" in line]
    assert len(cycles) == 1, err
    assert "committed=true" in cycles[0]
    assert "daemon started" in err and "daemon stopped" in err
    # the rest stays at WARNING: no planner chatter without -v
    assert not [line for line in err.splitlines() if line.startswith("INFO gpuplan.app.")], err


def test_log_format_json_writes_one_object_a_line(tmp_path: Path, models_dir: Path) -> None:
    err = _one_cycle(tmp_path, models_dir, "--log-format", "json")
    lines = [line for line in err.splitlines() if line.startswith("{")]
    records = [json.loads(line) for line in lines]
    assert records and {"time", "level", "logger", "message"} <= set(records[0])
    cycles = [r for r in records if r["logger"] == "gpuplan.cycle"]
    assert len(cycles) == 1 and cycles[0]["message"].startswith("cycle hour="), err
    # nothing else but the daemon's own first line (written before logging) is plain text
    plain = [line for line in err.splitlines() if line and not line.startswith("{")]
    assert all(line.startswith("gpuplan daemon: ") for line in plain), plain


def test_a_port_in_use_gives_one_clear_line_and_no_traceback(tmp_path: Path, models_dir: Path) -> None:
    db = f"sqlite:///{tmp_path / 'p.db'}"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with _gpuplan("daemon", "--db", db, "--models", models_dir, "--http", f"127.0.0.1:{port}") as process:
            _, err = process.communicate(timeout=300)
    assert process.returncode == 2, err
    assert f"cannot serve HTTP on 127.0.0.1:{port} (is the port in use?)" in err
    assert "Traceback" not in err and "RuntimeError" not in err, err
