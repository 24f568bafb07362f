"""The plan's linear relaxation bounds every legal plan's objective, the proven optimum included,
and is reached where nothing contends."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from contract.scenario_io import parse_scenario
from scheduler.bound import relaxed_bound
from scheduler.model import SolveOptions
from scheduler.policies import PolicyName, plan
from tests.strategies import instance_of, scenarios, small_doc, solved_by_hand

#: Relative slack for GLOP's floating point against the exact scores.
SLACK = 1e-7


def _at_least(bound: float, objective: float) -> bool:
    return bound >= objective - SLACK * max(1.0, abs(objective))


@given(scenarios(max_gpus=64, max_jobs=16))
@settings(deadline=None)
def test_no_policy_scores_above_the_relaxed_bound(doc: dict[str, Any]) -> None:
    instance = parse_scenario(doc)
    bound = relaxed_bound(instance)
    for policy in (PolicyName.FAST, PolicyName.FIFO, PolicyName.PRIORITY_BACKFILL):
        objective = plan(instance, policy).metrics.objective
        assert _at_least(bound, objective), (policy, bound, objective)


@pytest.mark.parametrize(
    "instance",
    [solved_by_hand(), instance_of(small_doc()), instance_of(small_doc(gpus=4))],
    ids=["by-hand", "contract-example", "contended"],
)
def test_the_bound_is_at_least_the_proven_optimum(instance: Any) -> None:
    full = plan(instance, PolicyName.FULL, SolveOptions(time_limit_s=30, workers=1))
    assert full.status == "OPTIMAL"
    assert _at_least(relaxed_bound(instance), full.metrics.objective)


def test_the_by_hand_instance_has_a_gap_the_relaxation_cannot_close() -> None:
    # 6 GPU-steps: the big job's 4 earn 40 wherever they are; the relaxation gives the small
    # job the other 2 (its fractions fill what the big one leaves each step): 42, against the
    # optimum's 41, where the rigid 2-GPU block leaves the small job one step.
    assert relaxed_bound(solved_by_hand()) == pytest.approx(42.0)


def test_without_contention_the_bound_is_every_job_from_its_release_and_the_fast_plan_reaches_it() -> None:
    demand = [1, 2, 3, 3, 2, 1, 1, 1]
    doc = {
        "gpus": 16,
        "horizon": 8,
        "decay": 0.9,
        "jobs": [
            {"id": "a", "kind": "training", "priority": 30, "gpus": 4, "duration": 3},
            {"id": "b", "kind": "quantization", "priority": 7, "gpus": 2, "duration": 5, "release": 2},
            {"id": "c", "kind": "batch_inference", "priority": 11, "gpus": 1, "duration": 20},
            {
                "id": "chat",
                "kind": "realtime",
                "priority": 5,
                "swap_cap": 2,
                "demand": [1, 2, 3, 3, 2, 1, 1, 1],
            },
        ],
    }
    instance = instance_of(doc)
    w = instance.weights
    release = 30 * 4 * sum(w[0:3]) + 7 * 2 * sum(w[2:7]) + 11 * 1 * sum(w[0:8])
    served = 5 * sum(d * w[t] for t, d in enumerate(demand))
    assert relaxed_bound(instance) == pytest.approx(release + served)
    assert plan(instance, PolicyName.FAST).metrics.objective == pytest.approx(release + served)
