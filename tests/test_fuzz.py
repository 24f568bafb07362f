"""Hostile input for every reader and every path option (issue 13).

Each case runs the real command line in-process and requires: exit 2, a message on
stderr naming the problem, no traceback, nothing written anywhere under the case's
folder, and the models folder byte for byte as it was. A table holds the cases a user
or an attacker would try (odd encodings, odd shapes of valid JSON, hostile paths, huge
and NaN numbers, partial files); Hypothesis then throws generated documents and bytes
at the scenario, plan and job-spec readers.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from tests.strategies import small_doc
from training_data.history import generate_history, write_history

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


def _lay_out(root: Path, layout: Layout) -> None:
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


def _snapshot(root: Path) -> dict[str, str]:
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


def _scenario(**changes: Any) -> bytes:
    return json.dumps(small_doc(**changes)).encode()


def _with_job(index: int, **changes: Any) -> bytes:
    doc = small_doc()
    doc["jobs"] = copy.deepcopy(doc["jobs"])
    doc["jobs"][index].update(changes)
    return json.dumps(doc).encode()


def _plan_cases() -> list[Case]:
    plan = ["plan", "{d}/s.json", "--out", "{d}/out.json"]
    scenario_bytes = [
        (
            "latin-1",
            SCENARIO.replace(b'"small"', '"smäll"'.encode("latin-1")),
            "`scenario` must be UTF-8 text",
        ),
        ("utf-16", json.dumps(small_doc()).encode("utf-16"), "`scenario` must be UTF-8 text"),
        ("nul-byte", SCENARIO + b"\x00", "`scenario` must be text"),
        ("empty", b"", "`scenario` must be valid JSON"),
        ("truncated", SCENARIO[: len(SCENARIO) // 2], "`scenario` must be valid JSON"),
        ("top-level-list", b"[1, 2]", "`(top level)` must be an object; got 'list'"),
        ("top-level-null", b"null", "`(top level)` must be an object; got 'NoneType'"),
        ("top-level-string", b'"gpus"', "`(top level)` must be an object; got 'str'"),
        ("duplicate-key", b'{"gpus": 8, "gpus": 4, "jobs": []}', "`gpus` must be given once in its object"),
        (
            "nan-literal",
            SCENARIO.replace(b'"priority": 10', b'"priority": NaN'),
            "NaN and Infinity are not JSON",
        ),
        (
            "overflowing-float",
            SCENARIO.replace(b'"priority": 10', b'"priority": 1e400'),
            "must be a finite number",
        ),
        ("huge-integer", SCENARIO.replace(b'"gpus": 8', b'"gpus": ' + b"9" * 5000), "must be valid JSON"),
        ("deep-nesting", b'{"gpus": 8, "jobs": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "nested at most 32"),
        (
            "deep-under-recursion-limit",
            b'{"gpus": 8, "jobs": ' + b"[" * 500 + b"]" * 500 + b"}",
            "nested at most 32",
        ),
        (
            "million-lists",
            b"[" + b"[]," * 1_100_000 + b"[]]",
            "must be a document of at most 1,000,000 objects",
        ),
        ("gpus-2^20", _scenario(gpus=2**20), "`gpus` must be an integer <= 4096; got 1048576."),
        ("gpus-2^70", _scenario(gpus=2**70), "`gpus` must be an integer within 64 bits"),
        ("gpus-zero", _scenario(gpus=0), "`gpus` must be an integer >= 1; got 0."),
        ("gpus-float", _scenario(gpus=8.0), "`gpus` must be an integer; got 8.0."),
        ("gpus-string", _scenario(gpus="8"), "`gpus` must be an integer; got '8'."),
        ("gpus-bool", _scenario(gpus=True), "`gpus` must be an integer; got True."),
        ("horizon-huge", _scenario(horizon=10**6), "`horizon` must be an integer <= 672"),
        (
            "grid-too-large",
            _scenario(gpus=4096, horizon=672, jobs=[]),
            "`horizon` must be at most 168 steps for 4096 GPUs (GPUs x steps <= 688,128); got 672.",
        ),
        ("step-minutes-huge", _scenario(step_minutes=10**9), "`step_minutes` must be an integer <= 1440"),
        ("decay-zero", _scenario(decay=0), "`decay` must be a number > 0"),
        ("rt-penalty-huge", _scenario(rt_penalty=1e300), "`rt_penalty` must be a number in [0, 1000]"),
        (
            "priority-huge",
            _with_job(0, priority=1.7e308),
            "`jobs[0].priority` must be a number in (0, 1e+06]",
        ),
        ("priority-negative", _with_job(0, priority=-1), "`jobs[0].priority` must be a number > 0"),
        ("duration-zero", _with_job(0, duration=0), "`jobs[0].duration` must be an integer >= 1"),
        (
            "demand-huge",
            _with_job(1, demand=[1, 2, 2, 10**9]),
            "`jobs[1].demand[3]` must be an integer <= 4096",
        ),
        ("demand-float", _with_job(1, demand=[1, 2, 2, 0.5]), "`jobs[1].demand[3]` must be an integer"),
        ("demand-short", _with_job(1, demand=[1]), "`jobs[1].demand` must be a list of 4 integers"),
        ("swap-cap-huge", _with_job(1, swap_cap=2**40), "`jobs[1].swap_cap` must be an integer <= 8192"),
        ("jobs-object", _scenario(jobs={"a": 1}), "`jobs` must be a list; got 'dict'."),
        ("job-not-object", _scenario(jobs=[3]), "`jobs[0]` must be an object; got 'int'."),
        ("unknown-key", _scenario(colour="red"), "`colour` must be one of the keys"),
        (
            "remaining-past-duration",
            _scenario(running=[{"id": "train", "gpus": [0, 1, 2, 3], "remaining": 3}]),
            "`running[0].remaining` must be at most the job's duration (2 steps); got 3.",
        ),
        (
            "running-unknown-id",
            _scenario(running=[{"id": "ghost", "gpus": [0]}]),
            "`running[0].id` must be the id of a job listed in `jobs`",
        ),
        ("down-gpu-outside", _scenario(down=[{"gpu": 99}]), "`down[0].gpu` must be an integer <= 7; got 99."),
        ("name-empty", _scenario(name=""), "`name` must be a non-empty string"),
        ("name-number", _scenario(name=7), "`name` must be a non-empty string; got 7."),
    ]
    cases = [
        Case(f"scenario-{name}", plan, {"s.json": content}, message)
        for name, content, message in scenario_bytes
    ]
    yaml_bytes = [
        ("alias", b"gpus: &n 8\nhorizon: *n\njobs: []\n", "aliases (*name) are not accepted"),
        ("duplicate-key", b"gpus: 8\ngpus: 4\njobs: []\n", "key 'gpus' appears twice"),
        (
            "python-tag",
            b"gpus: !!python/object/apply:os.getcwd []\njobs: []\n",
            "could not determine a constructor",
        ),
        ("binary-tag", b"name: !!binary aGk=\ngpus: 8\njobs: []\n", "`name` must be a string, number"),
        ("integer-key", b"8: gpus\njobs: []\n", "`8` must be a text key"),
        ("two-documents", b"gpus: 8\njobs: []\n---\ngpus: 4\n", "must be valid YAML"),
        ("nan", b"gpus: 8\ndecay: .nan\njobs: []\n", "`decay` must be a finite number"),
        ("deep", b"gpus: 8\njobs: " + b"[" * 5000 + b"]" * 5000 + b"\n", "exceeded maximum nesting depth"),
        (
            "deep-under-libyaml-limit",
            b"gpus: 8\njobs: " + b"[" * 100 + b"]" * 100 + b"\n",
            "nested at most 32",
        ),
        ("over-1-mib", b"gpus: 8\njobs: []\n" + b"#" * 2**20, "`scenario` must be a file of at most 1 MiB"),
        ("tab-indent", b"gpus: 8\njobs:\n\t- 1\n", "must be valid YAML"),
        ("latin-1", "name: smäll\ngpus: 8\njobs: []\n".encode("latin-1"), "`scenario` must be UTF-8 text"),
    ]
    cases += [
        Case(f"yaml-{name}", ["plan", "{d}/s.yaml", "--out", "{d}/out.json"], {"s.yaml": content}, message)
        for name, content, message in yaml_bytes
    ]
    paths = [
        ("missing", {}, "`scenario` must be a readable file; got"),
        ("directory", {"s.json": Dir()}, "`scenario` must be a regular file"),
        ("fifo", {"s.json": Fifo()}, "`scenario` must be a regular file; got"),
        ("link-to-device", {"s.json": Link("/dev/zero")}, "It is a character device."),
        ("dangling-link", {"s.json": Link("nowhere.json")}, "`scenario` must be a readable file"),
        ("over-64-mib", {"s.json": Sparse(65 * 2**20)}, "`scenario` must be a file of at most 64 MiB"),
    ]
    cases += [Case(f"scenario-path-{name}", plan, layout, message) for name, layout, message in paths]
    good = {"s.json": SCENARIO}
    out_paths = [
        ("directory", "{d}/outdir", {"outdir": Dir()}, "`--out` must be a regular file or a new name"),
        (
            "device",
            "/dev/null",
            {},
            "`--out` must be a regular file or a new name; got '/dev/null'. It is a character device.",
        ),
        ("proc", "/proc/gpuplan-plan.json", {}, "`--out` must be a path where files can be created"),
        ("under-a-file", "{d}/s.json/plan.json", {}, "`--out` must be a writable file path"),
        (
            "symlink",
            "{d}/link.json",
            {"target.json": b"old", "link.json": Link("target.json")},
            "symbolic link",
        ),
        ("fifo", "{d}/pipe", {"pipe": Fifo()}, "`--out` must be a regular file or a new name"),
    ]
    cases += [
        Case(f"plan-out-{name}", ["plan", "{d}/s.json", "--out", out], {**good, **layout}, message)
        for name, out, layout, message in out_paths
    ]
    png_paths = [
        ("text-suffix", "{d}/g.txt", {}, "`--png` must be a file name ending in one of"),
        ("no-suffix", "{d}/grid", {}, "`--png` must be a file name ending in one of"),
        (
            "directory",
            "{d}/pngdir.png",
            {"pngdir.png": Dir()},
            "`--png` must be a regular file or a new name",
        ),
        ("proc", "/proc/gpuplan-grid.png", {}, "`--png` must be a path where files can be created"),
    ]
    cases += [
        Case(f"plan-png-{name}", ["plan", "{d}/s.json", "--png", png], {**good, **layout}, message)
        for name, png, layout, message in png_paths
    ]
    options = [
        (
            "time-limit-nan",
            ["--policy", "full", "--time-limit", "nan"],
            "`--time-limit` must be a number of seconds > 0 and <= 3,600",
        ),
        (
            "time-limit-inf",
            ["--policy", "full", "--time-limit", "inf"],
            "`--time-limit` must be a number of seconds > 0 and <= 3,600",
        ),
        (
            "time-limit-negative",
            ["--time-limit", "-1"],
            "`--time-limit` must be a number of seconds > 0 and <= 3,600",
        ),
        (
            "time-limit-zero",
            ["--time-limit", "0"],
            "`--time-limit` must be a number of seconds > 0 and <= 3,600",
        ),
        (
            "time-limit-huge",
            ["--time-limit", "1e999"],
            "`--time-limit` must be a number of seconds > 0 and <= 3,600",
        ),
        ("workers-zero", ["--workers", "0"], "`--workers` must be an integer in [1, 64]; got 0."),
        ("workers-huge", ["--workers", "100000"], "`--workers` must be an integer in [1, 64]"),
        (
            "compare-with-out",
            ["--compare", "fifo,fast", "--out", "{d}/out.json"],
            "`--out` must be absent with",
        ),
        ("compare-with-policy", ["--compare", "fifo", "--policy", "full"], "`--policy` must be absent with"),
        ("compare-empty", ["--compare", ",,"], "`--compare` must be at least one policy name"),
        ("compare-unknown", ["--compare", "fifo,best"], "`--compare` must be a comma-separated list"),
    ]
    cases += [
        Case(f"plan-{name}", ["plan", "{d}/s.json", *extra], good, message)
        for name, extra, message in options
    ]
    return cases


def _validate_cases() -> list[Case]:
    grid = [[None] * 4 for _ in range(8)]
    good = {"s.json": SCENARIO}
    plans = [
        ("not-json", b"{grid", "`plan` must be valid JSON"),
        ("latin-1", '{"grid": [], "scenario": "ä"}'.encode("latin-1"), "`plan` must be UTF-8 text"),
        ("list", b"[]", "`(top level)` must be a plan object with a `grid`"),
        ("no-grid", b"{}", "`grid` must be present"),
        ("grid-string", json.dumps({"grid": "x"}).encode(), "`grid` must be a list; got 'str'."),
        ("row-number", json.dumps({"grid": [1]}).encode(), "`grid[0]` must be a list; got 'int'."),
        (
            "cell-list",
            json.dumps({"grid": [[["train"]]]}).encode(),
            "`grid[0][0]` must be a job id (a string) or null",
        ),
        (
            "cell-number",
            json.dumps({"grid": [[3]]}).encode(),
            "`grid[0][0]` must be a job id (a string) or null",
        ),
        ("duplicate-key", b'{"grid": [], "grid": []}', "`grid` must be given once in its object"),
        (
            "metrics-text",
            json.dumps({"grid": grid, "metrics": {"objective": "high"}}).encode(),
            "`metrics.objective` must be a number; got 'high'.",
        ),
        ("metrics-list", json.dumps({"grid": grid, "metrics": [1]}).encode(), "`metrics` must be an object"),
    ]
    cases = [
        Case(
            f"validate-plan-{name}",
            ["validate", "{d}/s.json", "{d}/p.json"],
            {**good, "p.json": content},
            message,
        )
        for name, content, message in plans
    ]
    cases.append(
        Case(
            "validate-plan-directory",
            ["validate", "{d}/s.json", "{d}/p.json"],
            {**good, "p.json": Dir()},
            "`plan` must be a regular file",
        )
    )
    return cases


def _bench_and_demo_cases() -> list[Case]:
    bench = [
        (
            "time-limit-negative",
            ["--time-limit", "-1"],
            "`--time-limit` must be a number of seconds > 0 and <= 3,600",
        ),
        (
            "time-limit-nan",
            ["--time-limit", "nan"],
            "`--time-limit` must be a number of seconds > 0 and <= 3,600",
        ),
        ("sample-zero", ["--sample", "0"], "`--sample` must be an integer in [1, 1,000]; got 0."),
        ("sample-negative", ["--sample", "-3"], "`--sample` must be an integer in [1, 1,000]"),
        ("runs-zero", ["--runs", "0"], "`--runs` must be an integer in [1, 10,000]; got 0."),
        ("png-a-file", ["--png", "{d}/file"], "`--png` must be a directory"),
        ("png-proc", ["--png", "/proc/gpuplan-bench"], "`--png` must be a path where files can be created"),
        ("sizes-text", ["--scale", "--sizes", "8,x"], "`--sizes` must be comma-separated integers"),
        ("sizes-huge", ["--scale", "--sizes", "8,1048576"], "`--sizes` must be cluster sizes from 1 to 4096"),
        ("sizes-zero", ["--scale", "--sizes", "0"], "`--sizes` must be cluster sizes from 1 to 4096"),
        ("scenarios-missing", ["--scenarios", "{d}/none", "--no-full"], "`--scenarios` must be a folder"),
        ("scenarios-a-file", ["--scenarios", "{d}/file", "--no-full"], "`--scenarios` must be a folder"),
        (
            "scenarios-bad-file",
            ["--scenarios", "{d}/bench", "--no-full", "--runs", "1"],
            "`jobs` must be present",
        ),
        ("shapes-unknown", ["--sample", "1", "--shapes", "nope"], "`--shapes` must be names from"),
    ]
    layout: Layout = {"file": b"x", "bench": Dir({"1-good.json": SCENARIO, "2-bad.json": b'{"gpus": 8}'})}
    cases = [Case(f"bench-{name}", ["bench", *extra], layout, message) for name, extra, message in bench]
    demo = [
        (
            "time-limit-nan",
            ["--time-limit", "nan"],
            "`--time-limit` must be a number of seconds > 0 and <= 3,600",
        ),
        ("png-suffix", ["--png", "{d}/g.txt"], "`--png` must be a file name ending in one of"),
        ("scenario-latin-1", ["--scenario", "{d}/s.json"], "`scenario` must be UTF-8 text"),
    ]
    latin = {"s.json": SCENARIO.replace(b'"small"', '"smäll"'.encode("latin-1"))}
    cases += [Case(f"demo-{name}", ["demo", *extra], latin, message) for name, extra, message in demo]
    # The store names its field ``db``; the command line names it by its flag.
    db = ["status", "--db", "mysql://user@host/db"]
    cases.append(Case("status-db-mysql", db, {}, "`--db` must be a database URL: sqlite:///PATH"))
    return cases


def _traffic_cases() -> list[Case]:
    at = ["--at", "2024-01-03 00:00"]
    realtime = ["forecast", "realtime", "--traffic", "{d}/t.csv"]
    files = [
        (
            "latin-1",
            "hour,requests\n2024-01-01 00:00,5\n# é\n".encode("latin-1"),
            "`traffic` must be UTF-8 text",
        ),
        ("empty", b"", "`traffic` must be a CSV file with a header row"),
        ("no-header", HOURLY.split("\n", 1)[1].encode(), "`header` must be `hour,requests` (hourly counts"),
        ("philly-layout", b"hour,active,total\n2017-10-03 00:00:00,312.53,420.00\n", "or `timestamp,...`"),
        ("time-value", b"time,value\n2024-01-01 00:00,5\n", "`header` must be `hour,requests`"),
        ("header-only", b"hour,requests\n", "`requests` must be at least one hourly row"),
        (
            "negative",
            b"hour,requests\n2024-01-01 00:00,-5\n",
            "line 2: `requests` must be a non-negative number",
        ),
        ("nan", b"hour,requests\n2024-01-01 00:00,nan\n", "line 2: `requests` must be a non-negative number"),
        (
            "huge",
            b"hour,requests\n2024-01-01 00:00,1e300\n",
            "line 2: `requests` must be a non-negative number",
        ),
        ("bad-hour", b"hour,requests\nyesterday,5\n", "line 2: `hour` must be a timestamp"),
        (
            "day-first-dates",
            b"hour,requests\n01/02/2024 00:00,5\n13/02/2024 01:00,6\n",
            "line 2: `hour` must be",
        ),
        ("servegen-hour-24", b"hour,requests\nday00_h24,5\n", "line 2: `hour` must be a timestamp"),
        (
            "servegen-huge-day",
            b"hour,requests\nday00_h00,5\nday99999999999999999999_h00,5\n",
            "line 3: `hour`",
        ),
        (
            "centuries-apart",
            b"hour,requests\n1700-01-01 00:00,5\n2200-01-01 00:00,5\n",
            "`hours` must be a series of at most 17,520 hours",
        ),
        (
            "decades-apart",
            b"hour,requests\n1990-01-01 00:00,5\n2024-01-01 00:00,5\n",
            "`hours` must be a series of at most 17,520 hours",
        ),
        (
            "ragged",
            b"hour,requests\n2024-01-01 00:00,5,6,7\n",
            "`traffic` must be a CSV file whose rows have",
        ),
        ("ragged-later", HOURLY.encode() + b"2024-01-03 00:00,5,6\n", "Expected 2 fields in line 50, saw 3"),
        (
            "repeated-column",
            b"hour,requests,requests\n2024-01-01 00:00,5,6\n",
            "`requests` must be a column named once",
        ),
        ("gzip-garbage", gzip.compress(b"x")[:5], "`traffic` must be"),
    ]
    cases = [
        Case(f"traffic-{name}", [*realtime, *at], {"t.csv": content}, message)
        for name, content, message in files
    ]
    cases.append(
        Case(
            "traffic-gz-truncated",
            ["forecast", "realtime", "--traffic", "{d}/t.csv.gz", *at],
            {"t.csv.gz": gzip.compress(HOURLY.encode())[:-12]},
            "`traffic` must be a gzip file",
        )
    )
    good = {"t.csv": HOURLY.encode()}
    options = [
        ("headroom-nan", ["--headroom", "nan"], "`--headroom` must be a finite number in [0, 10]; got nan."),
        ("headroom-negative", ["--headroom", "-1"], "`--headroom` must be a finite number in [0, 10]"),
        ("headroom-inf", ["--headroom", "inf"], "`--headroom` must be a finite number in [0, 10]"),
        ("hours-zero", ["--hours", "0"], "`--hours` must be an integer in [1, 672]"),
        ("hours-huge", ["--hours", "100000"], "`--hours` must be an integer in [1, 672]"),
        (
            "capacity-zero",
            ["--requests-per-gpu-hour", "0"],
            "`--requests-per-gpu-hour` must be a finite number",
        ),
        (
            "capacity-nan",
            ["--requests-per-gpu-hour", "nan"],
            "`--requests-per-gpu-hour` must be a finite number",
        ),
        (
            "capacity-tiny",
            ["--requests-per-gpu-hour", "1e-300"],
            "`requests_per_gpu_hour` must be large enough",
        ),
        ("swap-cap-negative", ["--swap-cap", "-1"], "`--swap-cap` must be an integer in [0, 8,192]"),
        ("column-unknown", ["--column", "total"], "`--column` must be a column after the first"),
        ("column-first", ["--column", "hour"], "`--column` must be a column after the first"),
    ]
    cases += [
        Case(f"realtime-{name}", [*realtime, *at, *extra], good, message) for name, extra, message in options
    ]
    for name, value in (
        ("nat", "NaT"),
        ("words", "soon"),
        ("empty", ""),
        ("before-history", "2000-01-01"),
        ("year-9999", "9999-12-31"),
        ("year-12345", "+12345-01-01"),
    ):
        cases.append(Case(f"realtime-at-{name}", [*realtime, "--at", value], good, "`--at` must be"))
    backtest = ["backtest", "--traffic", "{d}/t.csv"]
    cases += [
        Case("backtest-short", backtest, good, "hours"),
        Case("backtest-swap-cap", [*backtest, "--swap-cap", "-2"], good, "`--swap-cap` must be an integer"),
        Case("backtest-png-a-file", [*backtest, "--png", "{d}/t.csv"], good, "`--png` must be a directory"),
        Case(
            "backtest-second-file-bad",
            ["backtest", "--traffic", "{d}/t.csv", "--traffic", "{d}/u.csv", "--png", "{d}/plots"],
            {**good, "u.csv": b"time,value\n"},
            "`header` must be",
        ),
    ]
    return cases


def _spec_cases() -> list[Case]:
    forecast = ["forecast", "job", "{d}/job.yaml", "--models", "{d}/models"]
    specs = [
        ("latin-1", "kind: training\nvariant: lora_sft\n# é\n".encode("latin-1"), "`JOB` must be UTF-8 text"),
        ("list", b"- kind: training\n", "`(top level)` must be a mapping of feature names to values"),
        ("scalar", b"training\n", "`(top level)` must be a mapping of feature names to values"),
        ("empty", b"", "`(top level)` must be a mapping of feature names to values"),
        ("no-kind", b"variant: lora_sft\n", "`kind` must be training or quantization; got None."),
        ("kind-realtime", b"kind: realtime\n", "`kind` must be training or quantization; got 'realtime'."),
        ("duplicate-key", SPEC + b"epochs: 3\n", "appears twice"),
        ("alias", b"kind: training\nepochs: &e 3\nlora_rank: *e\n", "aliases (*name) are not accepted"),
        ("nested-value", SPEC.replace(b"epochs: 2", b"epochs: [2]"), "`epochs` must be a single value"),
        ("nan-value", SPEC.replace(b"epochs: 2", b"epochs: .nan"), "`epochs` must be a finite number"),
        (
            "huge-value",
            SPEC.replace(b"epochs: 2", b"epochs: 1e300"),
            "`epochs` must be a number in [0.01, 100]",
        ),
        ("unknown-feature", SPEC + b"colour: red\n", "`colour` must be a training feature"),
    ]
    cases = [
        Case(f"spec-{name}", forecast, {"job.yaml": content}, message) for name, content, message in specs
    ]
    cases.append(
        Case(
            "spec-json-duplicate",
            ["forecast", "job", "{d}/job.json", "--models", "{d}/models"],
            {"job.json": b'{"kind": "training", "kind": "quantization"}'},
            "`kind` must be given once in its object",
        )
    )
    cases.append(Case("spec-directory", forecast, {"job.yaml": Dir()}, "`JOB` must be a regular file"))
    # The spec is valid; the models folder is not.
    models = [
        ("old-pickle", Dir({"training_estimator.pkl": b"\x80\x04K\x07."}), "which is never loaded"),
        ("pickle", Dir({"training_estimator.json": b"\x80\x04K\x07."}), "It is a pickle"),
        ("garbage", Dir({"training_estimator.json": b"not json"}), "It is not a JSON model document"),
        ("stale", Dir({"training_estimator.json": b'{"rows": 1}'}), "retrain with `gpuplan train`"),
        (
            "wrong-object",
            Dir({"training_estimator.json": b'{"format_version": 2, "type": "int"}'}),
            "holds a 'int'",
        ),
        ("a-file", b"x", "`--models` must be a directory holding training_estimator.json"),
        ("empty", Dir(), "Run `gpuplan train` first"),
    ]
    cases += [
        Case(f"models-{name}", forecast, {"job.yaml": SPEC, "models": folder}, message)
        for name, folder, message in models
    ]
    return cases


@pytest.fixture(scope="module")
def small_history(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A valid history just large enough for the job-count checks (no fitting happens)."""
    path = tmp_path_factory.mktemp("history") / "h.csv"
    write_history(generate_history(seed=5, training_jobs=80, quantization_jobs=0), path)
    return path.read_bytes()


OLD_MODELS = Dir({"training_estimator.pkl": b"old model", "training_estimator.json": b"{}"})


def _set_cell(history: bytes, column: str, value: bytes) -> bytes:
    """``history`` with ``column`` of its first job set to ``value``."""
    lines = history.split(b"\n")
    if len(lines) < 3:
        return history
    index = lines[0].split(b",").index(column.encode())
    cells = lines[1].split(b",")
    cells[index] = value
    return b"\n".join([lines[0], b",".join(cells), *lines[2:]])


def _zero_length(history: bytes) -> bytes:
    """``history`` whose first job (completed) ends when it starts."""
    lines = history.split(b"\n")
    if len(lines) < 3:
        return history
    header = lines[0].split(b",")
    cells = lines[1].split(b",")
    cells[header.index(b"end_time")] = cells[header.index(b"start_time")]
    cells[header.index(b"outcome")] = b"completed"
    return b"\n".join([lines[0], b",".join(cells), *lines[2:]])


def _train_cases(history: bytes) -> list[Case]:
    header = history.split(b"\n", 1)[0] + b"\n"
    lines = history.split(b"\n")
    train = ["train", "--history", "{d}/h.csv", "--models", "{d}/models"]
    histories = [
        (
            "latin-1",
            history.replace(b"lora_sft", "lörä_sft".encode("latin-1"), 1),
            "`--history` must be UTF-8 text",
        ),
        ("empty", b"", "`--history` must be a CSV file with a header row"),
        ("header-only", header, "`history` must be at least 63 completed training jobs"),
        ("too-few-jobs", b"\n".join(lines[:31]) + b"\n", "completed training jobs among 30 jobs"),
        (
            "no-common-column",
            history.replace(b"submit_time", b"submitted", 1),
            "`submit_time` must be in the header",
        ),
        ("ragged", header + b"1,2,3\n" + b",".join([b"x"] * 60) + b"\n", "`--history` must be"),
        ("a-directory", Dir(), "`--history` must be a regular file"),
        ("zero-length-run", _zero_length(history), "`end_time` must be after start_time for a completed job"),
        ("gpus-nan", _set_cell(history, "gpus", b"nan"), "`gpus` must be an integer >= 1"),
        (
            "time-garbage",
            _set_cell(history, "submit_time", b"soon"),
            "`submit_time` must be an ISO 8601 timestamp",
        ),
        ("gzip-named-garbage", b"plain text", "`--history` must be"),
    ]
    cases = []
    for name, content, message in histories:
        target = "h.csv.gz" if name == "gzip-named-garbage" else "h.csv"
        argv = [a.replace("h.csv", target) for a in train]
        cases.append(Case(f"train-history-{name}", argv, {target: content, "models": OLD_MODELS}, message))
    good = {"h.csv": history}
    models = [
        ("a-file", {"models": b"x"}, "{d}/models", "`--models` must be a directory"),
        ("proc", {}, "/proc/gpuplan-models", "`--models` must be a path where files can be created"),
        ("under-a-file", {}, "{d}/h.csv/models", "`--models` must be a writable directory; got"),
    ]
    cases += [
        Case(
            f"train-models-{name}",
            ["train", "--history", "{d}/h.csv", "--models", target],
            {**good, **layout},
            msg,
        )
        for name, layout, target, msg in models
    ]
    cases.append(
        Case(
            "train-second-traffic-bad",
            [*train, "--traffic", "{d}/good.csv", "{d}/bad.csv"],
            {**good, "models": OLD_MODELS, "good.csv": HOURLY.encode(), "bad.csv": b"\xff\xfe"},
            "`traffic` must be UTF-8 text",
        )
    )
    cases.append(
        Case(
            "train-column-missing",
            [*train, "--traffic", "{d}/good.csv", "--column", "total"],
            {**good, "models": OLD_MODELS, "good.csv": HOURLY.encode()},
            "`--column` must be a column after the first",
        )
    )
    return cases


def _simulate_cases() -> list[Case]:
    header = b"id,submit_hour,kind,priority,gpus,actual_hours,forecast_hours\n"
    layout: Layout = {
        "file": b"x",
        "latin.csv": header + "\u00e4,0,training,50,4,3,3\n".encode("latin-1"),
        "gpus.csv": header + b"a,0,training,50,4,3,3\nb,1,training,50,6,3,3\n",
        "short.csv": b"hour,requests\n2024-01-01T00:00,5\n2024-01-01T01:00,6\n",
    }
    simulate = [
        ("days-zero", ["--days", "0"], "`--days` must be an integer in [1, 28]; got 0."),
        ("gpus-huge", ["--gpus", "100000"], "`--gpus` must be an integer in [1, 4,096]"),
        ("cycle-seven", ["--cycle-minutes", "7"], "`--cycle-minutes` must be a divisor of 60"),
        ("seed-negative", ["--seed", "-1"], "`--seed` must be an integer in [0,"),
        ("review-zero", ["--review-every", "0"], "`--review-every` must be an integer in [1, 168]"),
        ("policy-unknown", ["--policy", "fast,lottery"], "`--policy` must be a comma-separated list"),
        ("png-a-file", ["--png", "{d}/file"], "`--png` must be a directory"),
        ("workload-missing", ["--workload", "{d}/none.csv"], "`--workload` must be a readable file"),
        ("workload-latin-1", ["--workload", "{d}/latin.csv"], "`--workload` must be UTF-8 text"),
        (
            "workload-gpus",
            ["--workload", "{d}/gpus.csv"],
            "`gpus` must be a power of two (1, 2, 4, 8, ...); got '6'. Broken at row 2 (line 3).",
        ),
        (
            "traffic-short",
            ["--traffic", "{d}/short.csv"],
            "`--traffic` must be a series of at least 504 hours",
        ),
    ]
    return [
        Case(f"simulate-{name}", ["simulate", *extra], layout, message) for name, extra, message in simulate
    ]


TABLE = (
    _plan_cases()
    + _validate_cases()
    + _bench_and_demo_cases()
    + _traffic_cases()
    + _spec_cases()
    + _simulate_cases()
)


def _expand(argv: list[str], root: Path) -> list[str]:
    return [arg.replace("{d}", str(root)) for arg in argv]


def _assert_refused(case: Case, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _lay_out(root, case.layout)
    before = _snapshot(root)
    result = run_cli(capsys, _expand(case.argv, root))
    assert result.code == 2, (result.code, result.err)
    assert "Traceback" not in result.err
    assert case.message in result.err, result.err
    assert "error:" in result.err
    assert _snapshot(root) == before, "something was written"


@pytest.mark.parametrize("case", TABLE, ids=[case.id for case in TABLE])
def test_hostile_input_exits_2_and_writes_nothing(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _assert_refused(case, tmp_path, capsys)


# The ids only; each case is built again around the real history in the test.
TRAIN_IDS = [case.id for case in _train_cases(b"header\n")]


@pytest.mark.parametrize("index", range(len(TRAIN_IDS)), ids=TRAIN_IDS)
def test_hostile_train_input_leaves_the_models_folder_unchanged(
    index: int, small_history: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _assert_refused(_train_cases(small_history)[index], tmp_path, capsys)


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    from contract.files import atomic_write

    target = tmp_path / "out.json"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_write(target, "--out") as stream:
        stream.write(b"half")
        raise RuntimeError("disk on fire")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_accepted_encodings_give_the_same_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A BOM and CRLF line ends are accepted and change nothing."""
    outputs = []
    for name, content in (
        ("plain.json", json.dumps(small_doc(), indent=1).encode()),
        ("bom-crlf.json", b"\xef\xbb\xbf" + json.dumps(small_doc(), indent=1).replace("\n", "\r\n").encode()),
    ):
        (tmp_path / name).write_bytes(content)
        result = run_cli(capsys, ["plan", str(tmp_path / name), "--policy", "fifo"])
        assert result.code == 0, result.err
        outputs.append(json.loads(result.out)["grid"])
    assert outputs[0] == outputs[1]


# --- generated input ----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
FUZZ = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _mutations() -> st.SearchStrategy[dict[str, Any]]:
    """The contract's example with one field (top level or inside a job) set to any JSON value."""
    doc = small_doc(running=[{"id": "train", "gpus": [0, 1, 2, 3], "remaining": 1}], down=[{"gpu": 1}])

    def mutate(where: tuple[str, ...], value: object) -> dict[str, Any]:
        changed = copy.deepcopy(doc)
        target: Any = changed
        for key in where[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(where[-1])] = value
        else:
            target[where[-1]] = value
        return changed

    places = (
        [(key,) for key in doc]
        + [("jobs", str(i), key) for i, job in enumerate(doc["jobs"]) for key in job]
        + [("running", "0", key) for key in doc["running"][0]]
        + [("down", "0", "gpu"), ("down", "0", "end")]
    )
    return st.builds(mutate, st.sampled_from(places), json_values)


def _plan_or_refuse(capsys: pytest.CaptureFixture[str], root: Path, content: bytes, suffix: str) -> None:
    scenario = root / f"s{suffix}"
    out = root / "out.json"
    scenario.write_bytes(content)
    out.unlink(missing_ok=True)
    result = run_cli(capsys, ["plan", str(scenario), "--policy", "fast", "--out", str(out)])
    assert result.code in (0, 2), result.err
    assert "Traceback" not in result.err
    if result.code == 2:
        assert result.err.startswith("gpuplan plan: error: ") and not out.exists()
    else:
        assert json.loads(out.read_text())["policy"] == "fast"


@FUZZ
@given(doc=_mutations())
def test_any_json_value_in_any_scenario_field_is_planned_or_refused(
    doc: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _plan_or_refuse(capsys, tmp_path, json.dumps(doc).encode(), ".json")


@FUZZ
@given(document=json_values)
def test_any_json_document_is_planned_or_refused(
    document: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _plan_or_refuse(capsys, tmp_path, json.dumps(document).encode(), ".json")


@FUZZ
@given(content=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_as_scenario_yaml_or_json_are_refused_cleanly(
    content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _plan_or_refuse(capsys, tmp_path, content, ".yaml")
    _plan_or_refuse(capsys, tmp_path, content, ".json")


@FUZZ
@given(
    document=st.dictionaries(
        st.sampled_from(["kind", "variant", "epochs", "lora_rank", "x"]), json_values, max_size=5
    )
)
def test_any_job_spec_is_refused_cleanly_before_models_are_read(
    document: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(document))
    result = run_cli(capsys, ["forecast", "job", str(spec), "--models", str(tmp_path / "none")])
    assert result.code == 2 and "Traceback" not in result.err
    assert result.err.startswith("gpuplan forecast: error: ")


@FUZZ
@given(content=st.text(alphabet='hour,requests:0123456789-. \n\r"', max_size=300))
def test_any_csv_text_as_traffic_is_forecast_or_refused(
    content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traffic = tmp_path / "t.csv"
    traffic.write_text(content)
    result = run_cli(
        capsys, ["forecast", "realtime", "--traffic", str(traffic), "--at", "2024-01-03", "--json"]
    )
    assert result.code in (0, 2), result.err
    assert "Traceback" not in result.err


def test_every_reader_has_a_case() -> None:
    """The table reaches each reader and each path option the issue names."""
    ids = {case.id.split("-")[0] for case in TABLE}
    assert {"scenario", "yaml", "validate", "plan", "bench", "demo", "traffic", "realtime", "backtest"} <= ids
    assert {"spec", "models"} <= ids
