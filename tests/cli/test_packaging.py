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
from storage import maintenance

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
    # The user gpuplan is made at install (init's step 4); here root stands for it.
    text = rotate.read_text()
    assert "su gpuplan gpuplan\n" in text
    checked.write_text(text.replace("su gpuplan gpuplan\n", "su root root\n"))
    checked.chmod(0o644)  # logrotate refuses a file others may write
    done = subprocess.run(
        ["logrotate", "-d", "-s", str(tmp_path / "state"), str(checked)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "rotating pattern: /var/log/gpuplan/*.log" in done.stdout + done.stderr
    assert "error" not in (done.stdout + done.stderr).lower()


def test_the_wheel_installs_and_init_finds_its_package_data(tmp_path: Path) -> None:
    """``make dist``'s recipe builds the wheel offline, installed with ``--no-index`` into a folder of
    its own; the installed ``gpuplan`` (not this checkout) prints its version and runs init."""
    root = Path(__file__).resolve().parents[2]
    # make dist's recipe, offline: the venv's own setuptools and wheel build it (no index read).
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(tmp_path / "dist"),
            str(root),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("gpuplan-*.whl")
    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stderr
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target), "HOME": str(tmp_path)}
    where = tmp_path / "elsewhere"  # not the checkout, so nothing is imported from it
    where.mkdir()

    def installed(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=where,
            env=env,
        )

    origin = installed("-c", "import gpuplan, storage; print(gpuplan.__file__); print(storage.__file__)")
    assert origin.returncode == 0, origin.stderr
    assert all(line.startswith(str(target)) for line in origin.stdout.splitlines()), origin.stdout
    version = installed("-m", "gpuplan", "--version")
    assert version.returncode == 0 and re.fullmatch(r"gpuplan \S+\n", version.stdout), version
    init = installed(
        "-m",
        "gpuplan",
        "init",
        "--config",
        str(where / "gpuplan.yaml"),
        "--db",
        f"sqlite:///{where / 'gpuplan.db'}",
    )
    assert init.returncode == 0, init.stderr
    assert (where / "gpuplan.yaml").read_bytes() == packaging.CONFIG_TEMPLATE.read_bytes()
    for shipped in (
        _named(init.stdout, "/etc/systemd/system/gpuplan.service"),
        _named(init.stdout, "/etc/logrotate.d/gpuplan"),
    ):
        assert shipped.is_relative_to(target) and shipped.is_file(), shipped


DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
HEAD_NODE = re.compile(r"<!-- head-node: (?P<name>\w+) -->\n```sh\n(?P<body>.*?)\n```", re.DOTALL)
GPUPLAN = "/opt/gpuplan/bin/gpuplan "


def head_node_commands(text: str) -> list[str]:
    """The ``gpuplan`` lines of docs/operations.md's head-node blocks, in order."""
    return [
        line
        for block in HEAD_NODE.finditer(text)
        for line in block["body"].splitlines()
        if line.startswith(GPUPLAN)
    ]


def test_the_head_node_commands_in_the_docs_run_as_written(tmp_path: Path) -> None:
    commands = head_node_commands(DOC.read_text(encoding="utf-8"))
    names = [m["name"] for m in HEAD_NODE.finditer(DOC.read_text(encoding="utf-8"))]
    assert names == ["install", "upgrade", "restore"]
    verbs = [line.removeprefix(GPUPLAN).split()[:2] for line in commands]
    assert verbs == [
        ["--version"],
        ["init", "--config"],
        ["doctor", "--config"],
        ["db", "backup"],
        ["db", "upgrade"],
        ["db", "version"],
        ["db", "restore"],
    ]
    (tmp_path / "backups").mkdir()
    for line in commands:
        # The head node's paths, moved into the scratch directory; the program is this gpuplan.
        local = (
            line.replace("/etc/gpuplan/", f"{tmp_path}/etc/")
            .replace("/var/lib/gpuplan/", f"{tmp_path}/state/")
            .replace("/var/backups/", f"{tmp_path}/backups/")
        )
        argv = [sys.executable, "-m", "gpuplan", *local.removeprefix(GPUPLAN).split()]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
    assert (tmp_path / "backups" / "gpuplan.db").is_file()
    assert maintenance.schema_state(f"sqlite:///{tmp_path}/state/gpuplan.db").current  # restored, upgraded
