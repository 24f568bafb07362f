"""Finishing a job (``gpuplan.app.cycle.finish.finish_job``): which jobs may end how, and the history row
a finished job appends, in the store's transaction (SQLite and PostgreSQL)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import yaml

from contract.errors import InputError
from contract.records import JobState, Outcome
from gpuplan.app.cycle.finish import finish_job
from storage.sql import SqlStore
from tests.storage.test_storage import TRAINING_SPEC, store
from tests.storage_children import HOUR, queued_job, sample_commit, sample_run
from training_data.history import validate_history

__all__ = ["store"]  # the fixture, shared with the storage tests


def test_finishing_a_job_appends_a_history_row_the_forecasters_accept(store: SqlStore) -> None:
    spec = yaml.safe_load(TRAINING_SPEC.read_text())
    store.add_job(queued_job("job-a", spec=spec))
    store.record_run(sample_run(), sample_commit())
    end = HOUR + timedelta(hours=5, minutes=20)
    done = finish_job(store, "job-a", end, Outcome.OK, {})
    assert (done.state, done.ended_at, done.outcome) == (JobState.DONE, end, Outcome.OK)
    assert store.job("job-a") == done

    history = validate_history(store.history(), source="store")
    (row,) = history.to_dict("records")
    assert (row["job_id"], row["kind"], row["gpus"], row["outcome"]) == ("job-a", "training", 2, "completed")
    assert row["end_time"] - row["start_time"] == timedelta(hours=5, minutes=20)
    assert row["submit_time"] == HOUR - timedelta(hours=2)
    assert {k: row[k] for k in ("variant", "params_billion", "lora_rank", "sequence_packing")} == {
        "variant": "lora_sft",
        "params_billion": 8.0,
        "lora_rank": 32,
        "sequence_packing": True,
    }
    with pytest.raises(InputError, match=re.escape("`job_id` must be a queued or running job; got 'job-a'.")):
        finish_job(store, "job-a", end, Outcome.OK, {})
    with pytest.raises(
        InputError, match=re.escape("`job_id` must be the id of a submitted job; got 'nobody'.")
    ):
        finish_job(store, "nobody", end, Outcome.OK, {})


def test_a_job_that_never_ran_ends_without_teaching_a_duration(store: SqlStore) -> None:
    spec = yaml.safe_load(TRAINING_SPEC.read_text())
    store.add_job(queued_job("job-q", spec=spec))
    with pytest.raises(
        InputError, match=re.escape("`outcome` must be 'failed' or 'cancelled' for a job that never started")
    ):
        finish_job(store, "job-q", HOUR, Outcome.OK, {})
    assert store.job("job-q") == queued_job("job-q", spec=spec)
    finish_job(store, "job-q", HOUR, Outcome.CANCELLED, {})
    (row,) = validate_history(store.history(), source="store").to_dict("records")
    assert (row["start_time"], row["end_time"], row["outcome"]) == (HOUR, HOUR, "cancelled")

    store.add_job(queued_job("job-i", kind="batch_inference"))  # not a kind the forecasters learn
    finish_job(store, "job-i", HOUR, Outcome.FAILED, {})
    assert store.job("job-i").state is JobState.DONE  # type: ignore[union-attr]
    stated = {"id": "job-s", "kind": "training", "priority": 5.0, "gpus": 2, "hours": 3.0}
    store.add_job(queued_job("job-s", spec=stated))  # stated hours, no features to learn from
    finish_job(store, "job-s", HOUR, Outcome.FAILED, {})
    assert store.job("job-s").state is JobState.DONE  # type: ignore[union-attr]
    assert list(store.history()["job_id"]) == ["job-q"]


def test_a_history_row_the_schema_refuses_leaves_the_job_running(store: SqlStore) -> None:
    store.add_job(queued_job("job-a", spec=yaml.safe_load(TRAINING_SPEC.read_text())))
    store.record_run(sample_run(), sample_commit())
    with pytest.raises(InputError, match=re.escape("`lora_rank` must be")):
        finish_job(store, "job-a", HOUR + timedelta(hours=1), Outcome.OK, {"lora_rank": -3})
    assert store.job("job-a").state is JobState.RUNNING  # type: ignore[union-attr]
    assert store.history().empty


# --- plan runs and commits ------------------------------------------------------------------
