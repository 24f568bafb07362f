"""Hostile traffic files, job specs, histories and simulation options (issue 13): refused with
exit 2 and nothing written, the models folder byte for byte as it was
(:func:`tests.hostile.assert_refused`)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.hostile import HOURLY, SPEC, Case, Dir, Layout, assert_refused
from training_data.history import generate_history, write_history


def _traffic_file_cases() -> list[Case]:
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
    return [
        Case(f"traffic-{name}", [*realtime, *at], {"t.csv": content}, message)
        for name, content, message in files
    ]


def _traffic_cases() -> list[Case]:
    at = ["--at", "2024-01-03 00:00"]
    realtime = ["forecast", "realtime", "--traffic", "{d}/t.csv"]
    cases: list[Case] = []
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


TABLE = _traffic_file_cases() + _traffic_cases() + _spec_cases() + _simulate_cases()


@pytest.mark.parametrize("case", TABLE, ids=[case.id for case in TABLE])
def test_hostile_input_exits_2_and_writes_nothing(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_refused(case, tmp_path, capsys)


TRAIN_IDS = [case.id for case in _train_cases(b"header\n")]


@pytest.mark.parametrize("index", range(len(TRAIN_IDS)), ids=TRAIN_IDS)
def test_hostile_train_input_leaves_the_models_folder_unchanged(
    index: int, small_history: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_refused(_train_cases(small_history)[index], tmp_path, capsys)


def test_every_reader_has_a_case() -> None:
    """The table reaches each reader and each path option the issue names."""
    ids = {case.id.split("-")[0] for case in TABLE}
    assert {"traffic", "realtime", "backtest", "spec", "models"} <= ids
