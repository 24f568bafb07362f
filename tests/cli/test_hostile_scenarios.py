"""Hostile scenario files and path options for `plan`, `validate`, `bench` and `demo` (issue 13).

Each case runs the real command line in-process and requires: exit 2, a message on stderr
naming the problem, no traceback and nothing written anywhere under the case's folder
(:func:`tests.hostile.assert_refused`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile import (
    SCENARIO,
    Case,
    Dir,
    Fifo,
    Layout,
    Link,
    Sparse,
    assert_refused,
    scenario_with,
    with_job,
)
from tests.strategies import small_doc


def _scenario_byte_cases() -> list[Case]:
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
        ("gpus-2^20", scenario_with(gpus=2**20), "`gpus` must be an integer <= 4096; got 1048576."),
        ("gpus-2^70", scenario_with(gpus=2**70), "`gpus` must be an integer within 64 bits"),
        ("gpus-zero", scenario_with(gpus=0), "`gpus` must be an integer >= 1; got 0."),
        ("gpus-float", scenario_with(gpus=8.0), "`gpus` must be an integer; got 8.0."),
        ("gpus-string", scenario_with(gpus="8"), "`gpus` must be an integer; got '8'."),
        ("gpus-bool", scenario_with(gpus=True), "`gpus` must be an integer; got True."),
        ("horizon-huge", scenario_with(horizon=10**6), "`horizon` must be an integer <= 672"),
        (
            "grid-too-large",
            scenario_with(gpus=4096, horizon=672, jobs=[]),
            "`horizon` must be at most 168 steps for 4096 GPUs (GPUs x steps <= 688,128); got 672.",
        ),
        ("step-minutes-huge", scenario_with(step_minutes=10**9), "`step_minutes` must be an integer <= 1440"),
        ("decay-zero", scenario_with(decay=0), "`decay` must be a number > 0"),
        ("rt-penalty-huge", scenario_with(rt_penalty=1e300), "`rt_penalty` must be a number in [0, 1000]"),
        (
            "priority-huge",
            with_job(0, priority=1.7e308),
            "`jobs[0].priority` must be a number in (0, 1e+06]",
        ),
        ("priority-negative", with_job(0, priority=-1), "`jobs[0].priority` must be a number > 0"),
        ("duration-zero", with_job(0, duration=0), "`jobs[0].duration` must be an integer >= 1"),
        (
            "demand-huge",
            with_job(1, demand=[1, 2, 2, 10**9]),
            "`jobs[1].demand[3]` must be an integer <= 4096",
        ),
        ("demand-float", with_job(1, demand=[1, 2, 2, 0.5]), "`jobs[1].demand[3]` must be an integer"),
        ("demand-short", with_job(1, demand=[1]), "`jobs[1].demand` must be a list of 4 integers"),
        ("swap-cap-huge", with_job(1, swap_cap=2**40), "`jobs[1].swap_cap` must be an integer <= 8192"),
        ("jobs-object", scenario_with(jobs={"a": 1}), "`jobs` must be a list; got 'dict'."),
        ("job-not-object", scenario_with(jobs=[3]), "`jobs[0]` must be an object; got 'int'."),
        ("unknown-key", scenario_with(colour="red"), "`colour` must be one of the keys"),
        (
            "remaining-past-duration",
            scenario_with(running=[{"id": "train", "gpus": [0, 1, 2, 3], "remaining": 3}]),
            "`running[0].remaining` must be at most the job's duration (2 steps); got 3.",
        ),
        (
            "running-unknown-id",
            scenario_with(running=[{"id": "ghost", "gpus": [0]}]),
            "`running[0].id` must be the id of a job listed in `jobs`",
        ),
        (
            "down-gpu-outside",
            scenario_with(down=[{"gpu": 99}]),
            "`down[0].gpu` must be an integer <= 7; got 99.",
        ),
        ("name-empty", scenario_with(name=""), "`name` must be a non-empty string"),
        ("name-number", scenario_with(name=7), "`name` must be a non-empty string; got 7."),
    ]
    return [
        Case(f"scenario-{name}", plan, {"s.json": content}, message)
        for name, content, message in scenario_bytes
    ]


def _plan_cases() -> list[Case]:
    plan = ["plan", "{d}/s.json", "--out", "{d}/out.json"]
    cases: list[Case] = []
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


TABLE = _scenario_byte_cases() + _plan_cases() + _validate_cases() + _bench_and_demo_cases()


@pytest.mark.parametrize("case", TABLE, ids=[case.id for case in TABLE])
def test_hostile_input_exits_2_and_writes_nothing(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_refused(case, tmp_path, capsys)


def test_every_reader_has_a_case() -> None:
    """The table reaches each reader and each path option the issue names."""
    ids = {case.id.split("-")[0] for case in TABLE}
    assert {"scenario", "yaml", "validate", "plan", "bench", "demo"} <= ids
