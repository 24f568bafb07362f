"""The files a head node installs (docs/operations.md, "Install on a head node"): the systemd
unit and the logrotate file that ``gpuplan init`` names, checked by the tools that read them
(Debian's ``systemd`` and ``logrotate``, which ``make unit`` installs), and the wheel."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan import packaging

SHIPPED_COMMAND = "/opt/gpuplan/bin/gpuplan"


def _init(tmp_path: Path, python: str = sys.executable) -> str:
    """What ``gpuplan init`` prints, run as a head node runs it (a process of its own)."""
    done = subprocess.run(
        [
            python,
            "-m",
            "gpuplan",
            "init",
            "--config",
            str(tmp_path / "etc" / "gpuplan.yaml"),
            "--db",
            f"sqlite:///{tmp_path / 'gpuplan.db'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _named(out: str, target: str) -> Path:
    """The file ``gpuplan init`` tells the operator to install as ``target``."""
    found = re.search(rf"install -m 644 (\S+) {re.escape(target)}\n", out)
    assert found is not None, out
    return Path(found.group(1))


def test_the_unit_init_names_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    unit = _named(_init(tmp_path), "/etc/systemd/system/gpuplan.service")
    assert unit == packaging.UNIT
    text = unit.read_text()
    for wanted in (
        "Restart=on-failure",
        "User=gpuplan",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/gpuplan",
    ):
        assert wanted in text
    # verify checks that ExecStart's program exists: the shipped /opt/gpuplan venv is this one here.
    assert SHIPPED_COMMAND in text
    checked = tmp_path / "gpuplan.service"
    checked.write_text(text.replace(SHIPPED_COMMAND, str(Path(sys.executable).parent / "gpuplan")))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(checked)], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_systemd_analyze_verify_fails_on_a_broken_unit(tmp_path: Path) -> None:
    broken = tmp_path / "gpuplan.service"
    broken.write_text(packaging.UNIT.read_text())  # the shipped program, not installed here
    done = subprocess.run(
        ["systemd-analyze", "verify", str(broken)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode != 0 and SHIPPED_COMMAND in done.stderr


@pytest.mark.skipif(shutil.which("logrotate") is None, reason="Debian's logrotate (make unit installs it)")
def test_the_logrotate_file_init_names_is_read_by_logrotate(tmp_path: Path) -> None:
    rotate = _named(_init(tmp_path), "/etc/logrotate.d/gpuplan")
    assert rotate == packaging.LOGROTATE
    checked = tmp_path / "gpuplan.logrotate"
    checked.write_bytes(rotate.read_bytes())
    checked.chmod(0o644)  # logrotate refuses a file others may write
    done = subprocess.run(
        ["logrotate", "-d", "-s", str(tmp_path / "state"), str(checked)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "/var/log/gpuplan/*.log" in done.stdout + done.stderr
    assert "error" not in (done.stdout + done.stderr).lower()
