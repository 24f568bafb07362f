"""The hostile-input tables' parts: a case (a command line, the files laid out for it and
the message it must print), the laid-out files, and the check that a case is refused with
nothing written (exit 2, the message, no traceback, the folder byte for byte as it was)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli import main
from tests.strategies import small_doc

TRAFFIC_DIR = Path(__file__).resolve().parents[1] / "training_data" / "traffic"
EXAMPLE_SPEC = Path(__file__).resolve().parents[1] / "training_data" / "example_job_training.yaml"

SCENARIO = json.dumps(small_doc()).encode()
HOURLY = "hour,requests\n" + "".join(
    f"2024-01-{1 + h // 24:02d} {h % 24:02d}:00:00,{10 + h % 7}\n" for h in range(48)
)
SPEC = EXAMPLE_SPEC.read_bytes()


# --- files a case lays out before it runs ---------------------------------------------------


@dataclass(frozen=True)
class Dir:
    """A directory (with files inside, name -> content)."""

    files: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Fifo:
    """A named pipe: reading it would block forever."""


@dataclass(frozen=True)
class Link:
    """A symbolic link to ``target`` (relative to the case folder)."""

    target: str


@dataclass(frozen=True)
class Sparse:
    """A file of ``size`` bytes that takes no disk (a size limit must refuse it unread)."""

    size: int


Layout = dict[str, "bytes | Dir | Fifo | Link | Sparse"]


def lay_out(root: Path, layout: Layout) -> None:
    for name, item in layout.items():
        path = root / name
        if isinstance(item, bytes):
            path.write_bytes(item)
        elif isinstance(item, Dir):
            path.mkdir()
            for inner, content in item.files.items():
                (path / inner).write_bytes(content)
        elif isinstance(item, Fifo):
            os.mkfifo(path)
        elif isinstance(item, Link):
            path.symlink_to(root / item.target)
        else:
            with path.open("wb") as handle:
                handle.truncate(item.size)


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root``: its kind and, for regular files, a hash of the bytes."""
    entries = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        if stat.S_ISREG(mode):
            entries[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            entries[str(path.relative_to(root))] = stat.filemode(mode)
    return entries


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Result:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


# --- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]  # "{d}" is the case folder
    layout: Layout
    message: str  # must appear on stderr


def scenario_with(**changes: Any) -> bytes:
    return json.dumps(small_doc(**changes)).encode()


def with_job(index: int, **changes: Any) -> bytes:
    doc = small_doc()
    doc["jobs"] = copy.deepcopy(doc["jobs"])
    doc["jobs"][index].update(changes)
    return json.dumps(doc).encode()


def expand(argv: list[str], root: Path) -> list[str]:
    return [arg.replace("{d}", str(root)) for arg in argv]


def assert_refused(case: Case, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lay_out(root, case.layout)
    before = snapshot(root)
    result = run_cli(capsys, expand(case.argv, root))
    assert result.code == 2, (result.code, result.err)
    assert "Traceback" not in result.err
    assert case.message in result.err, result.err
    assert "error:" in result.err
    assert snapshot(root) == before, "something was written"
