"""Generated hostile input (Hypothesis) for the scenario, plan, job-spec and traffic readers, and
the writes a failure must not leave behind (issue 13); the tables of hand-written cases are in
tests/cli/test_hostile_scenarios.py and tests/cli/test_hostile_files.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile import run_cli
from tests.strategies import small_doc


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
