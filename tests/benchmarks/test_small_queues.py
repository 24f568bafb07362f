"""The small-queue families of issue 50: their frozen held-out split, their ranges, the floors."""

from __future__ import annotations

import json

import pytest

from benchmarks.small_queues import (
    FAMILIES,
    HELDOUT_DIR,
    HELDOUT_SEEDS,
    SEVEN_HELDOUT_SEEDS,
    SEVEN_WIDE_HELDOUT_SEEDS,
    TUNING_SEEDS,
    WIDE_HELDOUT_DIGEST,
    WIDE_HELDOUT_SEEDS,
    heldout_loaded,
    main,
    scenario,
    wide_heldout_digest,
    wide_heldout_documents,
)
from contract.scenario_io import parse_scenario
from gpuplan.app.lab import synthetic
from gpuplan.app.lab.synthetic import CALIBRATED_SHAPES
from scheduler.policies import PolicyName, SolveOptions, plan


def test_the_heldout_split_is_frozen_from_seeds_outside_tuning() -> None:
    counts: dict[str, int] = {}
    for path in sorted(HELDOUT_DIR.glob("*.json")):
        family, _, seed = path.stem.rpartition("-")
        assert json.loads(path.read_text())["name"] == path.stem
        assert int(seed) not in TUNING_SEEDS, path.name
        if family.startswith("seven-"):
            assert family.removeprefix("seven-") in CALIBRATED_SHAPES and int(seed) in SEVEN_HELDOUT_SEEDS
        else:
            assert family in FAMILIES and int(seed) in HELDOUT_SEEDS
        counts[family] = counts.get(family, 0) + 1
    assert counts == {
        **dict.fromkeys(FAMILIES, len(HELDOUT_SEEDS)),
        **{f"seven-{name}": len(SEVEN_HELDOUT_SEEDS) for name in CALIBRATED_SHAPES},
    }
    heldout = {json.dumps({**doc, "name": ""}, sort_keys=True) for doc in heldout_loaded(list(FAMILIES))}
    for family in FAMILIES:
        for tuning_seed in TUNING_SEEDS[:40]:
            assert json.dumps({**scenario(family, tuning_seed), "name": ""}, sort_keys=True) not in heldout


def test_the_wide_heldout_split_is_frozen_and_apart_from_tuning_and_the_small_split() -> None:
    seeds = set(WIDE_HELDOUT_SEEDS)
    assert len(seeds) == 300
    assert not seeds & set(TUNING_SEEDS) and not seeds & set(HELDOUT_SEEDS)
    seven = set(SEVEN_WIDE_HELDOUT_SEEDS)
    assert not seven & set(synthetic.TUNING_SEEDS) and not seven & set(SEVEN_HELDOUT_SEEDS)
    assert max(seven) < synthetic.HELDOUT_FIRST_SEED  # nor the wide shapes' frozen split
    # a change to the generator would change the split: the digest pins its documents
    assert wide_heldout_digest() == WIDE_HELDOUT_DIGEST
    names = [doc["name"] for doc in wide_heldout_documents([*FAMILIES, "seven"])]
    assert len(names) == len(set(names)) == 2 * 300 + len(CALIBRATED_SHAPES) * len(seven)
    small = {json.dumps({**doc, "name": ""}, sort_keys=True) for doc in heldout_loaded(list(FAMILIES))}
    for doc in wide_heldout_documents(list(FAMILIES)):
        assert json.dumps({**doc, "name": ""}, sort_keys=True) not in small


@pytest.mark.parametrize("first_seed", [4_990, 5_001, 50_001])
def test_tuning_refuses_seeds_of_either_heldout_split(first_seed: int) -> None:
    with pytest.raises(SystemExit):
        main(["--split", "tuning", "--first-seed", str(first_seed), "--per-family", "20", "--runs", "0"])


def test_long_tight_draws_small_queues_of_long_jobs_under_tight_services() -> None:
    durations: list[int] = []
    for seed in range(1, 41):
        instance = parse_scenario(scenario("long-tight", seed), source="long-tight")
        assert instance.gpus == 8 and len(instance.realtime_jobs) == 3
        assert 4 <= len(instance.queued_jobs) <= 6
        peaks = [max(job.demand) for job in instance.realtime_jobs]
        assert 6 <= sum(peaks) <= 8
        for job, peak in zip(instance.realtime_jobs, peaks, strict=True):
            assert max(1, peak // 2) <= job.swap_cap <= max(1, (peak + 1) // 2)
        durations += [job.duration_steps for job in instance.queued_jobs]
        assert 0.85 <= instance.decay <= 0.99 and 5 <= instance.rt_penalty <= 10
    assert min(durations) >= 2 and max(durations) <= 36
    assert sum(d >= 12 for d in durations) > len(durations) / 2  # most of them long


def test_mixed_half_draws_eight_jobs_around_two_services_at_half_the_cluster() -> None:
    for seed in range(1, 41):
        instance = parse_scenario(scenario("mixed-half", seed), source="mixed-half")
        assert instance.gpus == 8 and len(instance.realtime_jobs) == 2
        assert 7 <= len(instance.queued_jobs) <= 9
        assert 3 <= sum(max(job.demand) for job in instance.realtime_jobs) <= 5


def test_an_unknown_family_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="family must be one of long-tight, mixed-half; got 'wide'"):
        scenario("wide", 1)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_hot_path_is_legal_and_never_below_the_baselines_on_the_families(family: str) -> None:
    floors = (PolicyName.FIFO, PolicyName.FIFO_BACKFILL, PolicyName.PRIORITY_BACKFILL)
    for seed in range(1, 9):
        instance = parse_scenario(scenario(family, seed), source=f"{family}-{seed}")
        best_floor = max(plan(instance, name).metrics.objective for name in floors)
        for budget_ms in (1.0, 2.0):
            # plan() checks the grid against the contract before it returns (IllegalPlanError)
            hot = plan(instance, PolicyName.FAST, SolveOptions(budget_ms=budget_ms, wall_clock=False))
            assert hot.metrics.objective >= best_floor - 1e-6, (family, seed, budget_ms)
