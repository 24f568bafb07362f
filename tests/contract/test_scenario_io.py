"""Bad scenarios get an InputError naming the field, the expectation and what came."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from contract.errors import InputError
from contract.scenario import JobKind
from contract.scenario_io import parse_scenario
from tests.strategies import instance_of, small_doc


def test_contract_example_parses_with_defaults() -> None:
    instance = instance_of(small_doc())
    assert instance.decay == 0.95 and instance.rt_penalty == 8.0 and instance.step_minutes == 60
    (train,) = instance.batch_jobs
    assert (train.kind, train.gpus, train.duration_steps, train.release_step, train.order) == (
        JobKind.TRAINING,
        4,
        2,
        0,
        0,
    )
    (chat,) = instance.realtime_jobs
    assert chat.demand == (1, 2, 2, 1) and chat.swap_cap == 1


def _with_job(index: int, **changes: Any) -> dict[str, Any]:
    doc = small_doc()
    doc["jobs"] = copy.deepcopy(doc["jobs"])
    doc["jobs"][index].update(changes)
    return doc


CASES = [
    (_with_job(0, gpus=3), "test: `jobs[0].gpus` must be a power of two (1, 2, 4, 8, ...); got 3."),
    (_with_job(0, gpus=16), "test: `jobs[0].gpus` must be at most the cluster's 8 GPUs; got 16."),
    (_with_job(0, priority=0), "test: `jobs[0].priority` must be a number > 0; got 0."),
    (_with_job(0, duration="2"), "test: `jobs[0].duration` must be an integer; got '2'."),
    (
        _with_job(0, kind="serving"),
        "test: `jobs[0].kind` must be one of ['training', 'batch_inference', 'quantization', 'realtime']; got 'serving'.",
    ),
    (_with_job(0, colour="red"), "test: `jobs[0].colour` must be one of the keys"),
    (
        _with_job(1, demand=[1, 2, 3]),
        "test: `jobs[1].demand` must be a list of 4 integers (one per step); got '3 values'.",
    ),
    (
        _with_job(1, demand=[1, -2, 3, 1]),
        "test: `jobs[1].demand[1]` must be an integer >= 0; got -2.",
    ),
    (
        _with_job(1, id="train"),
        "test: `jobs[1].id` must be an id used by no other job; got 'train'. Already used by jobs[0].",
    ),
    ({**small_doc(), "gpus": 0}, "test: `gpus` must be an integer >= 1; got 0."),
    (
        {k: v for k, v in small_doc().items() if k != "jobs"},
        "test: `jobs` must be present; got 'missing'.",
    ),
    (
        small_doc(running=[{"id": "ghost", "gpus": [0]}]),
        "test: `running[0].id` must be the id of a job listed in `jobs`; got 'ghost'.",
    ),
    (
        small_doc(running=[{"id": "train", "gpus": [0, 1, 2, 3]}]),
        "test: `running[0].remaining` must be present for a running batch job; got 'missing'.",
    ),
    (
        small_doc(running=[{"id": "train", "gpus": [2, 3, 4, 5], "remaining": 1}]),
        "test: `running[0].gpus` must be an aligned block of 4 GPUs [a, a+4) with a % 4 == 0; got [2, 3, 4, 5].",
    ),
    (
        small_doc(running=[{"id": "train", "gpus": [4, 5, 6, 9], "remaining": 1}]),
        "test: `running[0].gpus[3]` must be an integer <= 7; got 9.",
    ),
    (
        small_doc(
            running=[
                {"id": "train", "gpus": [4, 5, 6, 7], "remaining": 1},
                {"id": "chat", "gpus": [7]},
            ]
        ),
        "test: `running[1].gpus` must be GPUs not held by another running job (GPU 7 is train's); got [7].",
    ),
    (small_doc(down=[{"gpu": 8}]), "test: `down[0].gpu` must be an integer <= 7; got 8."),
    (
        small_doc(down=[{"gpu": 1, "start": 2, "end": 9}]),
        "test: `down[0].end` must be an integer <= 4; got 9.",
    ),
    (
        small_doc(down=[{"gpu": 1, "start": 2, "end": 2}]),
        "test: `down[0].end` must be an integer >= 3; got 2.",
    ),
    (
        small_doc(
            running=[{"id": "train", "gpus": [0, 1, 2, 3], "remaining": 2}],
            down=[{"gpu": 2, "start": 1}],
        ),
        "test: `running[train].gpus` must be GPUs that are up while the job runs (it cannot be moved); down at step 1; got [2].",
    ),
    (
        small_doc(
            running=[{"id": "chat", "gpus": [5, 6]}],
            down=[{"gpu": 5, "start": 0}, {"gpu": 6, "start": 0}],
        ),
        "test: `running[chat].gpus` must be a set the job can leave before its GPUs go down (swap_cap 1 per step); got [5, 6]. 2 of them are down by step 0.",
    ),
    ({**small_doc(), "decay": 1.5}, "test: `decay` must be a number in (0, 1]; got 1.5."),
    ({**small_doc(), "promise_slack": -1}, "test: `promise_slack` must be an integer >= 0; got -1."),
    (
        {**small_doc(), "promise_break": 1000},
        "test: `promise_break` must be a number of steps in [0, 672]; got 1000.0.",
    ),
    ([1, 2], "test: `(top level)` must be an object; got 'list'."),
]


@pytest.mark.parametrize(("doc", "message"), CASES)
def test_bad_scenarios_name_field_expected_and_got(doc: Any, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        parse_scenario(doc, source="test")


def test_order_defaults_to_position_in_file() -> None:
    doc = small_doc()
    doc["jobs"] = [
        doc["jobs"][1],
        doc["jobs"][0],
        {"id": "q", "kind": "quantization", "priority": 1, "gpus": 1, "duration": 1},
    ]
    instance = instance_of(doc)
    assert [(j.id, j.order) for j in instance.batch_jobs] == [("train", 1), ("q", 2)]
