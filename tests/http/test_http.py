"""The HTTP API on a real SQLite file: every endpoint and status code, scopes, teams, caps, bad bodies."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from benchmarks.served import free_port, start_daemon, wait_for_cycle
from contract.records import GpuMapReading, JobState, Outcome
from gpuplan.app.core.tokens import sha256_hex
from gpuplan.app.views.report_queries import idle_query
from gpuplan.http.server import HttpServer
from tests.http_fixtures import T0, Served, served, served_api
from tests.service_fixtures import _in_tmp_path, models_dir, run_cli

__all__ = ["_in_tmp_path", "models_dir"]

HOUR = timedelta(hours=1)
JOB = {"id": "inf-1", "kind": "batch_inference", "gpus": 2, "hours": 3, "priority": 20}


@pytest.fixture
def api(tmp_path: Path, models_dir: Path) -> Iterator[tuple[httpx.Client, Served]]:
    """The API served by uvicorn on a loopback port, and an HTTP client for it."""
    with served_api(f"sqlite:///{tmp_path / 'gpuplan.db'}", models_dir) as answer:
        yield answer


def _error(answer: httpx.Response) -> dict:
    body = answer.json()
    assert "Traceback" not in answer.text
    return body


# --- health, schema ----------------------------------------------------------------------


def test_healthz_needs_no_token_and_says_when_the_last_cycle_ran(api: tuple[httpx.Client, Served]) -> None:
    client, _ = api
    answer = client.get("/healthz")
    assert answer.status_code == 200
    assert answer.json()["alive"] is True and answer.json()["last_success_at"] == T0.isoformat()


def test_openapi_schema_is_served_under_v1_and_no_page_loads_from_a_cdn(
    api: tuple[httpx.Client, Served],
) -> None:
    client, _ = api
    schema = client.get("/v1/openapi.json").json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/status", "/v1/apps/{app}/traffic"} <= set(schema["paths"])
    assert client.get("/docs").status_code == 404 and client.get("/redoc").status_code == 404


# --- tokens and scopes -------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}])
def test_a_missing_or_wrong_token_is_401(api: tuple[httpx.Client, Served], headers: dict) -> None:
    client, service = api
    for method, path in [
        ("GET", "/v1/status"),
        ("POST", "/v1/jobs"),
        ("DELETE", "/v1/jobs/x"),
        ("GET", "/v1/runs/latest"),
    ]:
        answer = client.request(method, path, headers=headers, json=JOB if method == "POST" else None)
        assert answer.status_code == 401, (method, path)
        assert answer.headers["www-authenticate"] == "Bearer"
    assert service.store.job("inf-1") is None


def test_a_revoked_token_is_401(api: tuple[httpx.Client, Served]) -> None:
    client, service = api
    assert client.get("/v1/status", headers=service.auth("reader")).status_code == 200
    service.store.revoke_token(service.token_ids["reader"], T0)
    answer = client.get("/v1/status", headers=service.auth("reader"))
    assert answer.status_code == 401 and "revoked" in answer.json()["message"]


def test_scopes_read_cannot_submit_and_only_admin_pushes_traffic(api: tuple[httpx.Client, Served]) -> None:
    client, service = api
    assert client.post("/v1/jobs", json=JOB, headers=service.auth("reader")).status_code == 403
    assert service.store.job("inf-1") is None
    traffic = [{"hour": "2026-11-30T09:00:00Z", "requests": 5.0}]
    for role in ("reader", "ml"):
        answer = client.post("/v1/apps/chat/traffic", json=traffic, headers=service.auth(role))
        assert answer.status_code == 403, role
    app = service.store.apps()[0].id
    assert (
        client.post(f"/v1/apps/{app}/traffic", json=traffic, headers=service.auth("admin")).status_code == 200
    )


def test_tokens_are_stored_as_hashes_only(api: tuple[httpx.Client, Served]) -> None:
    _, service = api
    for role, secret in service.tokens.items():
        stored = service.store.token_by_hash(sha256_hex(secret))
        assert stored is not None and stored.id == service.token_ids[role]
        assert secret not in repr(stored)


# --- submit --------------------------------------------------------------------------------


def test_submit_answers_201_with_the_forecast_and_the_planned_start_and_records_the_team(
    api: tuple[httpx.Client, Served],
) -> None:
    client, service = api
    answer = client.post("/v1/jobs", json=JOB, headers=service.auth("ml"))
    assert answer.status_code == 201, answer.text
    body = answer.json()
    keys = {"job", "gpus", "hours_p50", "hours_p90", "planned_start", "promised_start", "first_gpu", "reason"}
    assert set(body) == keys
    assert body["job"] == "inf-1" and body["gpus"] == 2 and body["hours_p90"] == 3
    assert body["reason"]
    job = service.store.job("inf-1")
    assert job is not None and job.team == "ml" and job.state is JobState.QUEUED
    status = client.get("/v1/status", headers=service.auth("reader")).json()
    row = next(q for q in status["queue"] if q["job"] == "inf-1")
    assert row["planned_start"] == body["planned_start"] and row["team"] == "ml"
    assert [
        q["job"] for q in client.get("/v1/status?team=ml", headers=service.auth("reader")).json()["queue"]
    ] == ["inf-1"]
    view = client.get("/v1/jobs/inf-1", headers=service.auth("reader")).json()
    assert (
        view["state"] == "queued"
        and view["forecast"]["gpus"] == 2
        and view["planned_start"] == body["planned_start"]
        and view["promised_start"] == body["promised_start"]
    )
    assert job.promised_start is not None and job.promised_start.isoformat() == body["promised_start"]
    again = client.post("/v1/jobs", json=JOB, headers=service.auth("ml"))
    assert again.status_code == 422 and _error(again)["errors"][0]["field"] == "id"


def test_a_training_spec_is_forecast_like_the_command_lines(api: tuple[httpx.Client, Served]) -> None:
    import yaml

    client, service = api
    from training_data import __file__ as data_init

    spec = yaml.safe_load((Path(data_init).parent / "example_job_training.yaml").read_text())
    spec.update(id="train-api", priority=30)
    answer = client.post("/v1/jobs", json=spec, headers=service.auth("ml"))
    assert answer.status_code == 201, answer.text
    assert answer.json()["hours_p90"] >= answer.json()["hours_p50"] > 0


def test_a_priority_above_the_team_cap_is_403_naming_the_cap(api: tuple[httpx.Client, Served]) -> None:
    client, service = api
    answer = client.post("/v1/jobs", json={**JOB, "priority": 80}, headers=service.auth("ml"))
    assert answer.status_code == 403
    assert "cap of 50" in answer.json()["message"]
    assert service.store.job("inf-1") is None
    assert (
        client.post("/v1/jobs", json={**JOB, "priority": 50}, headers=service.auth("ml")).status_code == 201
    )


@pytest.mark.parametrize(
    ("body", "field", "received"),
    [
        ({**JOB, "priority": "high"}, "priority", "high"),
        ({**JOB, "priority": -1}, "priority", -1),
        ({**JOB, "kind": "video"}, "kind", "video"),
        ({k: v for k, v in JOB.items() if k != "kind"}, "kind", None),
        ({**JOB, "gpus": 3}, "gpus", 3),
        ({**JOB, "colour": "red"}, "colour", "red"),
        ({**JOB, "id": "has space"}, "id", "has space"),
        ([1, 2], "(top level)", "list"),
    ],
)
def test_a_bad_body_is_422_naming_the_field_expected_and_received_and_stores_nothing(
    api: tuple[httpx.Client, Served], body: object, field: str, received: object
) -> None:
    client, service = api
    jobs_before = len(service.store.jobs())
    answer = client.post("/v1/jobs", json=body, headers=service.auth("ml"))
    assert answer.status_code == 422, answer.text
    error = _error(answer)["errors"][0]
    assert error["field"] == field and error["expected"] and error["received"] == received
    assert len(service.store.jobs()) == jobs_before


def test_malformed_json_is_422_and_an_oversized_body_is_413(api: tuple[httpx.Client, Served]) -> None:
    client, service = api
    headers = {**service.auth("ml"), "Content-Type": "application/json"}
    assert client.post("/v1/jobs", content=b'{"kind": ', headers=headers).status_code == 422
    big = json.dumps({**JOB, "note": "x" * 70_000})
    answer = client.post("/v1/jobs", content=big.encode(), headers=headers)
    assert answer.status_code == 413 and "65536" in answer.json()["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap counts what arrives
        yield big[:40_000].encode()
        yield big[40_000:].encode()

    chunked = client.post("/v1/jobs", content=chunks(), headers=headers)
    assert chunked.status_code == 413 and "65536" in chunked.json()["message"]
    assert service.store.job("inf-1") is None
    assert client.get("/v1/nothing-here").json() == {"message": "Not Found", "errors": []}


def test_an_unexpected_failure_is_500_without_a_traceback(
    api: tuple[httpx.Client, Served], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    client, service = api

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("internal detail 42")

    monkeypatch.setattr(service.store, "commits", broken)
    with caplog.at_level(logging.ERROR, logger="gpuplan.http"):
        answer = client.get("/v1/reports/commits", headers=service.auth("reader"))
    assert answer.status_code == 500
    assert "internal detail" not in answer.text and "Traceback" not in answer.text
    assert any("internal detail 42" in (r.exc_text or "") or r.exc_info for r in caplog.records)


def test_status_shows_the_stored_gpu_map_and_the_next_one_saved_while_it_serves(
    api: tuple[httpx.Client, Served], tmp_path: Path
) -> None:
    client, service = api
    assert client.get("/v1/status", headers=service.auth("reader")).json()["gpu_map"] is None
    service.store.save_gpu_map(GpuMapReading("gpu", ("node2", "node10"), 4, T0))
    shown = client.get("/v1/status", headers=service.auth("reader")).json()["gpu_map"]
    assert shown["partition"] == "gpu" and shown["read_at"] == T0.isoformat()
    assert [(n["node"], n["first"], n["gpus"]) for n in shown["nodes"]] == [
        ("node2", 0, [0, 1, 2, 3]),
        ("node10", 4, [4, 5, 6, 7]),
    ]
    cli = run_cli("status", "--json", "--db", f"sqlite:///{tmp_path / 'gpuplan.db'}")
    assert cli.code == 0 and json.loads(cli.out)["gpu_map"] == shown  # the document of `status --json`
    # A new reading stored while the API serves (by the daemon's poll, no change this process
    # made) is in the next status, the whole one and a team's, though no job or run moved.
    service.store.save_gpu_map(GpuMapReading("gpu", ("node10",), 8, T0 + HOUR))
    for path in ("/v1/status", "/v1/status?team=ml", "/v1/status?limit=1"):
        again = client.get(path, headers=service.auth("reader")).json()["gpu_map"]
        assert again["read_at"] == (T0 + HOUR).isoformat(), path
        assert [(n["node"], n["first"], n["gpus"]) for n in again["nodes"]] == [("node10", 0, list(range(8)))]


# --- jobs: look up, cancel, teams -----------------------------------------------------------


def test_get_an_unknown_job_is_404(api: tuple[httpx.Client, Served]) -> None:
    client, service = api
    answer = client.get("/v1/jobs/nope", headers=service.auth("reader"))
    assert answer.status_code == 404 and answer.json()["errors"][0]["received"] == "nope"


def test_cancel_a_queued_job_takes_it_out_of_the_queue(api: tuple[httpx.Client, Served]) -> None:
    client, service = api
    client.post("/v1/jobs", json=JOB, headers=service.auth("ml"))
    answer = client.delete("/v1/jobs/inf-1", headers=service.auth("ml"))
    assert answer.status_code == 200
    assert answer.json()["state"] == "done" and answer.json()["outcome"] == "cancelled"
    status = client.get("/v1/status", headers=service.auth("ml")).json()
    assert "inf-1" not in [q["job"] for q in status["queue"]]
    assert service.executor.stopped == []
    again = client.delete("/v1/jobs/inf-1", headers=service.auth("ml"))
    assert again.status_code == 422
    assert client.delete("/v1/jobs/nope", headers=service.auth("ml")).status_code == 404


def test_cancel_another_teams_job_is_403_and_admin_may(api: tuple[httpx.Client, Served]) -> None:
    client, service = api
    client.post("/v1/jobs", json=JOB, headers=service.auth("ml"))
    assert client.delete("/v1/jobs/inf-1", headers=service.auth("vision")).status_code == 403
    assert client.delete("/v1/jobs/inf-1", headers=service.auth("reader")).status_code == 403
    assert service.store.job("inf-1").state is JobState.QUEUED  # type: ignore[union-attr]
    assert client.delete("/v1/jobs/inf-1", headers=service.auth("admin")).status_code == 200


def test_cancel_a_running_job_stops_it_through_the_executor_and_records_it_cancelled(
    api: tuple[httpx.Client, Served],
) -> None:
    client, service = api
    running = service.store.jobs([JobState.RUNNING])
    assert running, "the demo's first cycle starts work"
    job = running[0]
    answer = client.delete(f"/v1/jobs/{job.id}", headers=service.auth("admin"))
    assert answer.status_code == 200, answer.text
    assert service.executor.stopped == [(job.id, T0)]
    stored = service.store.job(job.id)
    assert stored is not None and stored.outcome is Outcome.CANCELLED and stored.state is JobState.DONE
    service.cycle(T0 + HOUR)
    commit = service.store.commit((T0 + HOUR).replace(minute=0))
    assert commit is not None and job.id not in {a.job for a in commit.assignments}


# --- runs, reports, traffic ------------------------------------------------------------------


def test_runs_latest_by_id_and_export(api: tuple[httpx.Client, Served]) -> None:
    client, service = api
    latest = client.get("/v1/runs/latest", headers=service.auth("reader")).json()
    assert latest["committed"] is True and latest["start"] == "2026-11-30T10:00:00+00:00"
    assert client.get(f"/v1/runs/{latest['id']}", headers=service.auth("reader")).json() == latest
    export = client.get(f"/v1/runs/{latest['id']}/export", headers=service.auth("reader")).json()
    assert set(export) == {"scenario", "plan", "run"} and len(export["plan"]["grid"]) == 16
    assert client.get("/v1/runs/999/export", headers=service.auth("reader")).status_code == 404
    bad = client.get("/v1/runs/abc", headers=service.auth("reader"))
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "run_id"


def test_reports_json_and_csv_match_the_use_cases(api: tuple[httpx.Client, Served]) -> None:
    client, service = api
    auth = service.auth("reader")
    rows = client.get("/v1/reports/idle-windows", headers=auth).json()
    expected = idle_query(service.store).windows
    assert expected is not None
    assert [(r["first_gpu"], r["gpus"], r["start"]) for r in rows] == [
        (w.first_gpu, w.gpus, w.start.isoformat()) for w in expected.rows
    ]
    csv = client.get("/v1/reports/idle-windows?format=csv", headers=auth)
    assert csv.headers["content-type"].startswith("text/csv") and csv.text.count("\n") == len(rows) + 1
    bookable = client.get("/v1/reports/idle-windows?gpus=2&hours=2&limit=3", headers=auth).json()
    assert len(bookable) <= 3 and all(r["gpus"] == 2 for r in bookable)
    for name in ("coverage-risk", "utilization", "commits"):
        answer = client.get(f"/v1/reports/{name}", headers=auth)
        assert answer.status_code == 200, (name, answer.text)
        assert isinstance(answer.json(), list)
    assert client.get("/v1/reports/commits?team=nobody", headers=auth).json() == []
    missing = client.get("/v1/reports/idle-windows?gpus=2", headers=auth)
    assert missing.status_code == 422 and missing.json()["errors"][0]["field"] == "hours"
    since = client.get("/v1/reports/utilization?since=2027-01-01", headers=auth)
    assert since.status_code == 422 and since.json()["errors"][0]["field"] == "since"
    bad_q = client.get("/v1/reports/coverage-risk?quantile=2", headers=auth)
    assert bad_q.status_code == 422 and bad_q.json()["errors"][0]["field"] == "quantile"


def test_a_push_of_the_hour_in_progress_above_its_gpus_re_plans_at_once(
    api: tuple[httpx.Client, Served],
) -> None:
    client, service = api
    app = service.store.apps()[0].id
    hour = T0.replace(minute=0)  # the clock stands at T0, 5 minutes into the hour
    before = service.store.commit(hour)
    response = client.post(
        f"/v1/apps/{app}/traffic",
        json=[{"hour": hour.isoformat(), "requests": 1e9}],
        headers=service.auth("admin"),
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["hours"] == 0 and answer["observed_minutes"] == 5.0 and answer["replanned"] is True
    assert service.store.traffic(app, hour, hour + HOUR) == []  # not a finished hour
    assert service.store.commit(hour) == before  # amended, if at all, by additions only
    if answer["amendment"] is not None:
        assert answer["amendment"]["hour"] == hour.isoformat()
        held = {gpu for a in before.assignments for gpu in a.gpus} if before else set()
        assert not held & {gpu for gpus in answer["amendment"]["additions"].values() for gpu in gpus}


def test_reports_and_the_dashboard_are_served_from_memory_until_a_change(
    api: tuple[httpx.Client, Served],
) -> None:
    client, service = api
    reads = service.context.reads
    auth = service.auth("reader")
    first = client.get("/v1/reports/idle-windows", headers=auth).json()
    builds = reads.builds
    assert client.get("/v1/reports/idle-windows", headers=auth).json() == first
    assert reads.builds == builds  # from memory
    answer = client.post("/v1/jobs", json=JOB, headers=service.auth("ml"))
    assert answer.status_code == 201
    after = client.get("/v1/reports/idle-windows", headers=auth).json()
    assert reads.builds == builds + 1  # the submit's plan is the latest run now
    assert after != first or answer.json()["planned_start"] is None
    assert client.get("/v1/reports/idle-windows?format=csv", headers=auth).status_code == 200
    assert reads.builds == builds + 2  # another query: an entry of its own


def test_utilization_keeps_one_teams_jobs_with_the_team_filter(api: tuple[httpx.Client, Served]) -> None:
    client, service = api
    urgent = {"id": "ops-1", "kind": "batch_inference", "gpus": 1, "hours": 1, "priority": 100_000}
    answer = client.post("/v1/jobs", json=urgent, headers=service.auth("admin")).json()
    assert answer["planned_start"] is not None
    for _ in range(3):  # the cycles up to the hour it was planned in
        if service.store.job("ops-1").state is not JobState.QUEUED:  # type: ignore[union-attr]
            break
        service.cycle(service.store.commits()[-1].hour + HOUR + timedelta(minutes=5))
    assert service.store.job("ops-1").state is not JobState.QUEUED  # type: ignore[union-attr]
    auth = service.auth("reader")
    everyone = client.get("/v1/reports/utilization", headers=auth).json()
    ops = client.get("/v1/reports/utilization?team=ops", headers=auth).json()
    nobody = client.get("/v1/reports/utilization?team=nobody", headers=auth).json()
    held = ("training", "batch_inference", "quantization", "realtime", "other")
    assert [r["hour"] for r in ops] == [r["hour"] for r in everyone] == [r["hour"] for r in nobody]
    assert all(sum(r[k] for k in held) == 0 for r in nobody)
    assert [sum(r[k] for k in held) for r in ops] == [0] * (len(ops) - 1) + [1]  # ops-1's hour
    assert sum(everyone[-1][k] for k in held) > 1
    assert all(r["idle"] + r["down"] + sum(r[k] for k in held) == 16 for r in (*ops, *nobody))


def test_traffic_push_is_idempotent_per_hour_and_checks_every_row_first(
    api: tuple[httpx.Client, Served],
) -> None:
    client, service = api
    app = service.store.apps()[0].id
    auth = service.auth("admin")
    hours = [{"hour": f"2026-11-29T0{h}:00:00Z", "requests": 100.0 + h} for h in range(3)]
    finished = {"app": app, "hours": 3, "observed_minutes": None, "replanned": False, "amendment": None}
    assert client.post(f"/v1/apps/{app}/traffic", json=hours, headers=auth).json() == finished
    hours[1]["requests"] = 7.0
    client.post(f"/v1/apps/{app}/traffic", json=hours, headers=auth)
    first = datetime(2026, 11, 29, tzinfo=UTC)
    stored = service.store.traffic(app, first, first + 3 * HOUR)
    assert [row.requests for row in stored] == [100.0, 7.0, 102.0]
    kept = {row.hour: row.requests for row in service.store.traffic(app)}
    bad = [
        {"hour": "2026-11-28T00:00:00Z", "requests": 1.0},
        {"hour": "2026-11-28T01:30:00Z", "requests": 1.0},
    ]
    answer = client.post(f"/v1/apps/{app}/traffic", json=bad, headers=auth)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "[1].hour"
    assert {row.hour: row.requests for row in service.store.traffic(app)} == kept
    negative = client.post(
        f"/v1/apps/{app}/traffic", json=[{"hour": "2026-11-28T00:00:00Z", "requests": -1}], headers=auth
    )
    assert negative.status_code == 422 and negative.json()["errors"][0]["field"] == "[0].requests"
    extra = client.post(
        f"/v1/apps/{app}/traffic",
        json=[{"hour": "2026-11-28T00:00:00Z", "requests": 1, "x": 1}],
        headers=auth,
    )
    assert extra.status_code == 422 and extra.json()["errors"][0]["field"] == "[0].x"
    assert client.post("/v1/apps/nope/traffic", json=hours, headers=auth).status_code == 404


# --- the command line's tokens ---------------------------------------------------------------


def test_token_create_prints_once_list_hides_it_revoke_ends_it(tmp_path: Path, models_dir: Path) -> None:
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    assert run_cli("daemon", "--once", "--db", db, "--models", models_dir, "--at", T0.isoformat()).code == 0
    made = run_cli(
        "token", "create", "--team", "ml", "--scopes", "read,submit", "--max-priority", "40", "--db", db
    )
    assert made.code == 0, made.err
    secret = made.out.strip()
    assert len(secret) >= 40 and "shown once" in made.err
    listed = run_cli("token", "list", "--db", db, "--json")
    rows = json.loads(listed.out)
    assert (
        rows[0]["team"] == "ml" and rows[0]["scopes"] == ["read", "submit"] and rows[0]["max_priority"] == 40
    )
    assert secret not in listed.out and sha256_hex(secret) not in listed.out
    assert run_cli("token", "revoke", rows[0]["id"], "--db", db).code == 0
    assert json.loads(run_cli("token", "list", "--db", db, "--json").out)[0]["revoked_at"] is not None
    bad = run_cli("token", "create", "--team", "ml", "--scopes", "read,write", "--db", db)
    assert bad.code == 2 and "`--scopes` must be" in bad.err
    assert run_cli("token", "revoke", "nope", "--db", db).code == 2


# --- served by uvicorn -----------------------------------------------------------------------


def test_the_access_log_never_shows_a_token(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with served(f"sqlite:///{tmp_path / 'gpuplan.db'}", models_dir) as service:
        server = HttpServer(service.context, "127.0.0.1", 0).start()
        try:
            base = f"http://127.0.0.1:{server.bound_port}"
            with caplog.at_level(logging.INFO):
                assert httpx.get(f"{base}/v1/status", headers=service.auth("reader")).status_code == 200
                assert (
                    httpx.get(
                        f"{base}/v1/status", headers={"Authorization": "Bearer leaked-secret"}
                    ).status_code
                    == 401
                )
                # uvicorn writes the access record before the response's status line, so both
                # are in caplog once the client holds the two answers: no wait is needed.
                access = [r for r in caplog.records if r.name == "uvicorn.access"]
                assert [r.getMessage().rsplit(" ", 1)[-1] for r in access] == ["200", "401"]
        finally:
            server.stop()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "/v1/status" in text
    assert service.tokens["reader"] not in text and "leaked-secret" not in text


def test_gpuplan_daemon_http_serves_the_api_from_the_daemon_process(tmp_path: Path, models_dir: Path) -> None:
    db = f"sqlite:///{tmp_path / 'gpuplan.db'}"
    port = free_port()
    # The database, a token, then the daemon with --http on a fresh process.
    assert run_cli("daemon", "--once", "--db", db, "--models", models_dir).code == 0
    secret = run_cli("token", "create", "--team", "ml", "--scopes", "read,submit", "--db", db).out.strip()
    log_path = tmp_path / "daemon.log"
    daemon = start_daemon(db, models_dir, port, log_path, verbose=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_cycle(base, daemon, log_path)
        auth = {"Authorization": f"Bearer {secret}"}
        answer = httpx.post(f"{base}/v1/jobs", json=JOB, headers=auth)
        assert answer.status_code == 201, answer.text
        status = httpx.get(f"{base}/v1/status", headers=auth).json()
        assert "inf-1" in [q["job"] for q in status["queue"]]
        assert httpx.get(f"{base}/v1/status").status_code == 401
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    assert daemon.returncode == 0, log_path.read_text()
    log_text = log_path.read_text()
    assert '"POST /v1/jobs HTTP/1.1" 201' in log_text and secret not in log_text


@pytest.mark.parametrize("value", ["0", "host:99999", "a:b", "127.0.0.1:"])
def test_a_bad_http_address_exits_2(tmp_path: Path, value: str) -> None:
    result = run_cli("daemon", "--http", value, "--db", f"sqlite:///{tmp_path / 'x.db'}")
    assert result.code == 2 and "`--http` must be" in result.err
