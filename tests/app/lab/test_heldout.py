"""The wider generator and its frozen held-out split: disjoint from tuning, legal, hard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.scenario_io import parse_scenario
from gpuplan.app.lab.bench import HELDOUT_DIR, heldout_instances
from gpuplan.app.lab.synthetic import HELDOUT_PER_SHAPE, TUNING_SEEDS, WIDE_SHAPES, generate
from gpuplan.cli import main
from scheduler.check import check_plan
from scheduler.policies import PolicyName, SolveOptions, plan


def _heldout_files() -> list[Path]:
    return sorted(HELDOUT_DIR.glob("*.json"))


def test_every_wide_shape_has_its_heldout_files_from_seeds_outside_tuning() -> None:
    seen: dict[str, list[int]] = {}
    for path in _heldout_files():
        shape, _, seed = path.stem.rpartition("-")
        assert shape in WIDE_SHAPES, path.name
        assert int(seed) not in TUNING_SEEDS, path.name
        assert json.loads(path.read_text())["name"] == shape
        seen.setdefault(shape, []).append(int(seed))
    assert {shape: len(seeds) for shape, seeds in seen.items()} == dict.fromkeys(
        WIDE_SHAPES, HELDOUT_PER_SHAPE
    )


def test_no_heldout_scenario_is_one_the_tuning_split_draws() -> None:
    heldout = {path.read_text() for path in _heldout_files()}
    docs = {json.dumps(json.loads(text), sort_keys=True) for text in heldout}
    for shape in WIDE_SHAPES.values():
        for seed in TUNING_SEEDS[:30]:
            assert json.dumps(generate(shape, seed), sort_keys=True) not in docs, (shape.name, seed)


@pytest.mark.parametrize("name", sorted(WIDE_SHAPES))
def test_wide_shapes_draw_legal_scenarios_of_the_promised_ranges(name: str) -> None:
    shape = WIDE_SHAPES[name]
    caps, decays, penalties = set(), set(), set()
    for seed in range(1, 9):
        doc = generate(shape, seed)
        instance = parse_scenario(doc, source=f"{name} {seed}")
        assert generate(shape, seed) == doc  # the same seed, the same document
        caps |= {job.swap_cap for job in instance.realtime_jobs}
        decays.add(instance.decay)
        penalties.add(instance.rt_penalty)
        assert 0.85 <= instance.decay <= 0.99 and 5 <= instance.rt_penalty <= 10
        assert instance.running_realtime, "services run at step 0"
        fast = plan(instance, PolicyName.FAST, SolveOptions(wall_clock=False))
        assert check_plan(instance, fast.grid) == []
    assert caps <= {1, 2, 3, 4} and len(caps) >= 2
    assert len(decays) > 1 and len(penalties) > 1


def test_an_inherited_replan_continues_the_earlier_plans_committed_hours() -> None:
    shape = WIDE_SHAPES["inherited-mixed"]
    instance = parse_scenario(generate(shape, 4), source="inherited")
    arrivals = [job for job in instance.queued_jobs if job.id.startswith("new-")]
    assert 1 <= len(arrivals) <= 3
    started_by_plan = [r for r in instance.running_batch.values() if r.remaining_steps > 0]
    assert started_by_plan and all(len(r.gpus) > 0 for r in instance.running_realtime.values())


def test_bench_sample_reads_the_heldout_split(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "--sample", "1", "--heldout", "--shapes", "wide-contention", "--time-limit", "2"]
    assert main([*args, "--runs", "2", "--cycle-budget-ms", "250", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    (instance,) = heldout_instances(["wide-contention"], 1)
    assert row["shape"] == instance.name == "wide-contention"
    assert row["fast_ge_fifos"] and row["cycle_ge_pb"]
    assert row["fast_moves"] >= row["demand_changes"] or row["fast_cov"] < 1
    assert not row["full_moves_more"]  # at the hot path's value, the full mode moves no more
