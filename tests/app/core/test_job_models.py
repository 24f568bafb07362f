"""Jobs name the GPU models they may run on (``gpu_models``), forecast on each, and the plan
places each where its hours are best (docs/pools.md, "What a job may say")."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.errors import InputError
from contract.records import JobEstimate
from contract.scenario import Pool
from contract.scenario_io import parse_scenario
from features.gpu_models import GPU_SPECS, known_model, speed
from gpuplan.app.core.config import load_config
from gpuplan.app.core.forecasters import Forecasters
from gpuplan.app.core.job_models import allowed_models, estimate_on_pools, job_pools, stated_on_models
from gpuplan.app.core.models import load_job_estimator
from gpuplan.app.jobs.submit import check_spec
from scheduler.check import check_plan
from scheduler.lns import MIN_BUDGET_MS
from storage.factory import open_store
from tests.forecasting.test_training_estimator import SPEC_13B_FULL
from tests.http_fixtures import served_api
from tests.service_fixtures import _in_tmp_path, models_dir, run_cli

__all__ = ["_in_tmp_path", "models_dir"]

T0 = datetime(2026, 11, 30, 10, 5, tzinfo=UTC)
POOLS = (Pool("h100", "h100", 8, 0), Pool("a100", "a100", 8, 8))
EXAMPLE = Path(__file__).parents[3] / "training_data"


def _training(**changes: object) -> dict[str, Any]:
    spec = yaml.safe_load((EXAMPLE / "example_job_training.yaml").read_text())
    return {"id": "train-1", **spec, **changes}


def _full_13b(**changes: object) -> dict[str, Any]:
    """A 13B full fine-tune with ZeRO-3: on 4 GPUs its states need 52 GB each, more than a
    40 GB A100 holds and less than an 80 GB H100 does."""
    full = {**SPEC_13B_FULL, "micro_batch_size": 1, "dataset_tokens_million": 400, "epochs": 1}
    return {"id": "train-1", "kind": "training", **full, **changes}


# --- the model table and the per-model hours ------------------------------------------------


def test_short_names_resolve_to_the_datasheet_and_unknown_ones_do_not() -> None:
    assert known_model("H100") == "h100-80gb" and known_model("a100") == "a100-40gb"
    assert known_model("a100-80gb") == "a100-80gb" and known_model("l40s") == "l40s-48gb"
    assert known_model("mi300x") is None


def test_stated_hours_are_on_the_reference_model_and_move_by_the_kinds_speed_ratio() -> None:
    stated = JobEstimate(gpus=2, hours_p50=4.0, hours_p90=5.0)
    models = {"h100-80gb": 8, "a100-40gb": 8, "mi300x": 8}
    moved = stated_on_models(stated, "batch_inference", models, "h100-80gb")  # type: ignore[arg-type]
    assert moved.by_model is not None and moved.by_model["h100-80gb"] == (4.0, 5.0)
    ratio = GPU_SPECS["h100-80gb"].hbm_tb_per_s / GPU_SPECS["a100-40gb"].hbm_tb_per_s
    assert moved.by_model["a100-40gb"] == pytest.approx((4.0 * ratio, 5.0 * ratio))
    assert moved.by_model["mi300x"] == (4.0, 5.0)  # a model the datasheet does not know: as stated
    training = stated_on_models(stated, "training", models, "a100-40gb")  # type: ignore[arg-type]
    assert training.by_model is not None
    assert training.by_model["h100-80gb"][0] == pytest.approx(4.0 * speed("training", "a100-40gb") / 989.0)  # type: ignore[arg-type]


def test_hours_stated_per_model_are_the_jobs_hours_there_and_nowhere_else(tmp_path: Path) -> None:
    spec = check_spec(
        {"id": "b", "kind": "batch_inference", "gpus": 2, "hours": {"a100": 6, "h100-80gb": 3}}, source="s"
    )
    estimate = estimate_on_pools(spec, Forecasters(tmp_path), POOLS, source="s")
    # the cluster's order, the reference model's hours as the headline
    assert estimate.by_model == {"h100-80gb": (3.0, 3.0), "a100-40gb": (6.0, 6.0)}
    assert (estimate.hours_p50, estimate.hours_p90) == (3.0, 3.0)
    only = estimate_on_pools({**spec, "hours": {"a100": 6}}, Forecasters(tmp_path), POOLS, source="s")
    assert [pool.name for pool, _ in job_pools(only, POOLS)] == ["a100"]
    one_pool = estimate_on_pools(spec, Forecasters(tmp_path), POOLS[1:], source="s")
    assert one_pool == JobEstimate(2, 6.0, 6.0)


@pytest.mark.parametrize(
    ("hours", "pools", "message"),
    [
        (
            {"l40s": 2},
            POOLS,
            "`hours` must be hours on a GPU model of the cluster's pools the job may run on",
        ),
        ({"h100": 2}, (), "`hours` must be a number of hours on a cluster without cluster.pools"),
        ({"mi300x": 2}, POOLS, "`hours` must be GPU models gpuplan knows as its keys"),
        ({"h100": 0}, POOLS, "`hours.h100` must be a number of hours in (0, "),
        ({}, POOLS, "`hours` must be a number of hours, or a mapping of GPU model -> hours"),
    ],
)
def test_bad_hours_per_model_are_one_line_naming_the_field(
    tmp_path: Path, hours: object, pools: tuple, message: str
) -> None:
    with pytest.raises(InputError) as refused:
        spec = check_spec({"id": "b", "kind": "batch_inference", "gpus": 2, "hours": hours}, source="s")
        estimate_on_pools(spec, Forecasters(tmp_path), pools, source="s")
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_training_job_is_forecast_on_each_model_at_one_gpu_count(models_dir: Path) -> None:
    forecasters = Forecasters(models_dir)
    estimate = estimate_on_pools(_training(), forecasters, POOLS, source="spec")
    assert estimate.by_model is not None and set(estimate.by_model) == {"h100-80gb", "a100-40gb"}
    h100, a100 = estimate.by_model["h100-80gb"], estimate.by_model["a100-40gb"]
    assert a100[0] > h100[0] and a100[1] >= a100[0]  # slower on the older model
    assert (estimate.hours_p50, estimate.hours_p90) == h100  # the first pool's hours lead
    # On its own count, each model's hours are the estimator's for the spec on that model.
    estimator = load_job_estimator(models_dir, "training")
    features = {k: v for k, v in _training().items() if k not in {"id", "kind"}}
    alone = estimator.forecast_spec({**features, "gpu_type": "h100-80gb", "gpu_memory_gb": 80}, source="s")
    if int(alone.gpus.p50) == estimate.gpus:
        assert h100 == pytest.approx((alone.duration_hours.p50, alone.duration_hours.p90))
    one_pool = estimate_on_pools(_training(), forecasters, POOLS[:1], source="spec")
    assert one_pool.by_model is None  # one pool: the spec's own forecast, as before


def test_a_full_fine_tune_too_big_for_a_40gb_a100_at_its_gpu_count_runs_only_on_h100(
    models_dir: Path,
) -> None:
    estimate = estimate_on_pools(_full_13b(), Forecasters(models_dir), POOLS, source="spec")
    assert estimate.by_model is not None and list(estimate.by_model) == ["h100-80gb"]
    assert [pool.name for pool, _ in job_pools(estimate, POOLS)] == ["h100"]


def test_a_job_that_fits_on_none_of_its_models_is_refused_naming_each(models_dir: Path) -> None:
    huge = _full_13b(params_billion=400, num_layers=126, hidden_size=16384, seq_len_tokens=32768)
    huge.update(mean_sample_tokens=16000, micro_batch_size=4, gradient_checkpointing=False)
    with pytest.raises(InputError) as refused:
        estimate_on_pools(huge, Forecasters(models_dir), POOLS, source="spec")
    text = str(refused.value)
    assert text.startswith("spec: `gpu_models` must be GPU models of the cluster that can hold the job")
    assert "h100-80gb: " in text and "a100-40gb: " in text and "GB per GPU even on 4,096 GPUs" in text


@pytest.mark.parametrize(
    ("value", "pools", "message"),
    [
        ([], POOLS, "`gpu_models` must be 'any' or a list of at least one GPU model; got 'an empty list'"),
        (["mi300x"], POOLS, "`gpu_models[0]` must be a GPU model gpuplan knows: one of ["),
        ("h100", POOLS, "`gpu_models` must be 'any' or a list of GPU models; got 'h100'"),
        (["l40s"], POOLS, "`gpu_models` must be a list naming a GPU model of the cluster's pools"),
        (["h100"], (), "`gpu_models` must be absent or 'any' on a cluster without cluster.pools"),
    ],
)
def test_a_bad_gpu_models_is_one_line_naming_the_field(value: object, pools: tuple, message: str) -> None:
    with pytest.raises(InputError) as refused:
        allowed_models({"gpu_models": value}, pools, source="spec")
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_list_keeps_the_models_it_names_in_the_clusters_order() -> None:
    assert allowed_models({"gpu_models": ["a100-40gb", "l40s"]}, POOLS, source="s") == {"a100-40gb": 8}
    assert list(allowed_models({}, POOLS, source="s")) == ["h100-80gb", "a100-40gb"]


# --- the daemon: a pooled config, jobs placed where their hours are best ---------------------


def _pooled_config(tmp_path: Path) -> Path:
    """The A100s first: the reference pool, where a plan blind to the models would start."""
    pools = [{"name": p.name, "gpu_model": p.gpu_model, "gpus": p.gpus} for p in reversed(POOLS)]
    path = tmp_path / "config.yaml"
    document = {
        "cluster": {"pools": pools},
        "apps": [],
        "plan_budget_ms": MIN_BUDGET_MS,
        "plan_wall_clock": False,
        "review_every_hours": None,
    }
    path.write_text(yaml.safe_dump(document))
    return path


def _submit(
    tmp_path: Path, config: Path, db: str, spec: dict[str, Any], *, at: datetime, models: Path
) -> Any:
    path = tmp_path / f"{spec['id']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return run_cli("submit", path, "--config", config, "--db", db, "--models", models, "--at", at.isoformat())


def _plan(tmp_path: Path, config: Path, db: str, models: Path, at: datetime) -> dict[str, set[str]]:
    """One daemon cycle at ``at``: the pools each job's GPUs lie in, over the whole plan."""
    ran = run_cli(
        "daemon", "--once", "--config", config, "--db", db, "--models", models, "--at", at.isoformat()
    )
    assert ran.code == 0, ran.err
    out = tmp_path / f"export-{at:%H}"
    assert run_cli("export", "latest", "--db", db, "--out", out).code == 0
    scenario = json.loads((out / "scenario.json").read_text())
    grid = json.loads((out / "plan.json").read_text())["grid"]
    instance = parse_scenario(scenario, source="exported")
    assert check_plan(instance, grid) == []
    held: dict[str, set[str]] = {}
    for gpu, row in enumerate(grid):
        for cell in row:
            if cell is not None:
                held.setdefault(cell, set()).add(instance.pool_of_gpu(gpu).name)
    return held


def test_a_job_twice_as_fast_on_h100_lands_there_and_one_that_names_a100_lands_on_a100(
    tmp_path: Path, models_dir: Path
) -> None:
    config = _pooled_config(tmp_path)
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    assert _plan(tmp_path, config, db, models_dir, T0) == {}
    fast = {"id": "bulk", "kind": "batch_inference", "priority": 5, "gpus": 4, "hours": 3}
    assert _submit(tmp_path, config, db, fast, at=T0, models=models_dir).code == 0
    pinned = {**fast, "id": "pinned", "gpu_models": ["a100"]}
    assert _submit(tmp_path, config, db, pinned, at=T0, models=models_dir).code == 0
    store = open_store(db)
    try:
        bulk = store.job("bulk")
        assert bulk is not None and bulk.estimate is not None and bulk.estimate.by_model is not None
        h100, a100 = bulk.estimate.by_model["h100-80gb"], bulk.estimate.by_model["a100-40gb"]
        assert a100 == (3.0, 3.0) and a100[0] >= 2 * h100[0]  # stated on A100s; HBM 3.35 vs 1.555 TB/s
    finally:
        store.close()
    held = _plan(tmp_path, config, db, models_dir, T0 + timedelta(hours=1))
    assert held["bulk"] == {"h100"} and held["pinned"] == {"a100"}


def test_jobs_that_fit_in_memory_only_on_h100_never_land_on_a100(tmp_path: Path, models_dir: Path) -> None:
    config = _pooled_config(tmp_path)
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    _plan(tmp_path, config, db, models_dir, T0)
    for k in range(3):  # 4 GPUs each: two fill the H100s, the third waits rather than go to the A100s
        answer = _submit(
            tmp_path, config, db, _full_13b(id=f"big-{k}", priority=10 + k), at=T0, models=models_dir
        )
        assert answer.code == 0, answer.err
    for hour in (1, 2):  # the second cycle plans over the first's running jobs
        held = _plan(tmp_path, config, db, models_dir, T0 + timedelta(hours=hour))
        big = {job: pools for job, pools in held.items() if job.startswith("big-")}
        assert big and all(pools == {"h100"} for pools in big.values()), held


# --- bad input through the command line and the API: one line, nothing stored -------------


BAD = [
    ({"gpu_models": []}, "gpu_models", "an empty list"),
    ({"gpu_models": ["mi300x"]}, "gpu_models[0]", "mi300x"),
    ({"gpu_models": ["l40s", "h200"]}, "gpu_models", ["l40s", "h200"]),
    ({"gpus": 16, "gpu_models": ["a100"]}, "gpus", 16),
]


@pytest.mark.parametrize(("change", "field", "received"), BAD)
def test_a_bad_model_list_on_the_command_line_is_one_line_and_stores_nothing(
    tmp_path: Path, models_dir: Path, change: dict[str, Any], field: str, received: object
) -> None:
    config = _pooled_config(tmp_path)
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    _plan(tmp_path, config, db, models_dir, T0)
    spec = {"id": "bad", "kind": "batch_inference", "priority": 5, "gpus": 4, "hours": 3, **change}
    refused = _submit(tmp_path, config, db, spec, at=T0, models=models_dir)
    assert refused.code == 2 and len(refused.err.strip().splitlines()) == 1, refused.err
    assert f"`{field}` must be" in refused.err and repr(received) in refused.err
    store = open_store(db)
    try:
        assert store.job("bad") is None
    finally:
        store.close()


def test_a_bad_model_list_through_the_api_is_422_and_stores_nothing(tmp_path: Path, models_dir: Path) -> None:
    config = replace(load_config(_pooled_config(tmp_path)), models_dir=models_dir)
    with served_api(f"sqlite:///{tmp_path / 'gpuplan.db'}", models_dir, config) as (client, service):
        schema = client.get("/v1/openapi.json").json()["paths"]["/v1/jobs"]["post"]["requestBody"]
        assert "gpu_models" in schema["content"]["application/json"]["schema"]["properties"]
        before = len(service.store.jobs())
        for change, field, received in BAD:
            body = {"id": "bad", "kind": "batch_inference", "priority": 5, "gpus": 4, "hours": 3, **change}
            answer = client.post("/v1/jobs", json=body, headers=service.auth("ml"))
            assert answer.status_code == 422, answer.text
            error = answer.json()["errors"][0]
            # the API's errors carry a list received as its text
            assert error["field"] == field and error["received"] in (received, str(received)), error
        assert len(service.store.jobs()) == before
        good = {
            "id": "good",
            "kind": "batch_inference",
            "priority": 5,
            "gpus": 4,
            "hours": 3,
            "gpu_models": ["a100"],
        }
        assert client.post("/v1/jobs", json=good, headers=service.auth("ml")).status_code == 201
        stored = service.store.job("good")
        assert stored is not None and stored.estimate is not None and stored.estimate.by_model is not None
        assert list(stored.estimate.by_model) == ["a100-40gb"]


def test_forecast_job_on_a_pooled_config_shows_the_hours_on_each_model(
    tmp_path: Path, models_dir: Path
) -> None:
    spec = tmp_path / "big.yaml"
    spec.write_text(yaml.safe_dump({k: v for k, v in _full_13b().items() if k != "id"}))
    config = _pooled_config(tmp_path)
    shown = run_cli("forecast", "job", spec, "--config", config, "--models", models_dir)
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert any(line.startswith("    h100-80gb (pool h100): hours P50 ") for line in lines), shown.out
    assert any(
        line.startswith("    a100-40gb (pool a100): left out: does not fit on 4 GPUs: ") for line in lines
    ), shown.out
    answer = json.loads(
        run_cli("forecast", "job", spec, "--config", config, "--models", models_dir, "--json").out
    )
    assert list(answer["on_models"]["hours"]) == ["h100-80gb"] and list(answer["on_models"]["left_out"]) == [
        "a100-40gb"
    ]
    alone = json.loads(run_cli("forecast", "job", spec, "--models", models_dir, "--json").out)
    assert "on_models" not in alone and alone["hours"] == answer["hours"]  # without --config: as before


def test_on_a_pooled_cluster_a_spec_may_leave_the_gpu_features_to_its_models(
    tmp_path: Path, models_dir: Path
) -> None:
    config = _pooled_config(tmp_path)
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    _plan(tmp_path, config, db, models_dir, T0)
    bare = {k: v for k, v in _training(id="bare").items() if k not in {"gpu_type", "gpu_memory_gb"}}
    answer = _submit(tmp_path, config, db, bare, at=T0, models=models_dir)
    assert answer.code == 0, answer.err
    store = open_store(db)
    try:
        job = store.job("bare")
        assert job is not None and job.estimate is not None and job.estimate.by_model is not None
        assert set(job.estimate.by_model) == {"a100-40gb", "h100-80gb"}
        assert (job.spec["gpu_type"], job.spec["gpu_memory_gb"]) == ("a100-40gb", 40.0)  # the first pool's
    finally:
        store.close()
    # Without pools the spec must say its GPU model, as before.
    flat = tmp_path / "flat.yaml"
    flat.write_text(yaml.safe_dump({"cluster": {"gpus": 16}, "apps": []}))
    refused = _submit(tmp_path, flat, db, {**bare, "id": "b2"}, at=T0, models=models_dir)
    assert refused.code == 2 and "`gpu_type` must be one of" in refused.err, refused.err
