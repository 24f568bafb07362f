"""The faces of teams: ``status`` and ``/v1/status`` per team, ``report teams``, the quota note on
a submit, ``submit --team`` and the spec's ``team``, and the dashboard coloured by team, on
SQLite and PostgreSQL; a config without teams shows none of it."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from contract.errors import InputError
from contract.records import ApiToken, Job, JobEstimate, JobState, Scope
from contract.scenario import JobKind, Pool, Team
from gpuplan.app.core.config import ServiceConfig, load_config
from gpuplan.app.core.job_models import model_key
from gpuplan.app.jobs.submit import checked_spec
from gpuplan.app.views.dashboard import grid_rows
from gpuplan.app.views.teams import NO_TEAM_COLOUR, TEAM_COLOURS, beyond_quota, team_report, team_status
from scheduler.lns import MIN_BUDGET_MS
from tests.http_fixtures import T0, Served, served_api
from tests.service_fixtures import _in_tmp_path, models_dir, run_cli

__all__ = ["_in_tmp_path", "models_dir"]

HOUR = timedelta(hours=1)
POOLS = (Pool("h100", "h100", 8), Pool("a100", "a100", 8, 8))
TEAMS = (
    Team("ml", quota={"h100": 4, "a100": 4}, weight=2),
    Team("vision", quota={"h100": 4}),
    Team("ops"),
)


def _job(job_id: str, team: str | None, gpus: int, **more: Any) -> Job:
    return Job(
        job_id,
        JobKind.TRAINING,
        10.0,
        {},
        more.pop("submitted_at", T0 - 30 * HOUR),
        estimate=JobEstimate(gpus, 2.0, 3.0),
        team=team,
        gpus=gpus,
        **more,
    )


# ---------------------------------------------------------------------------------------
# The views, pure


def test_a_teams_status_counts_its_use_loans_and_share_per_model() -> None:
    """vision holds 8 h100 GPUs (4 beyond its quota): they are ml's 4 idle h100 GPUs, lent;
    ml's queued job waits; the finished job's 16 GPU-hours, a day old, are ml's use."""
    jobs = [
        _job("big", "vision", 8, state=JobState.RUNNING, first_gpu=0, started_at=T0 - HOUR),
        _job("own", "ml", 2, state=JobState.RUNNING, first_gpu=8, started_at=T0 - HOUR),
        _job("stray", None, 2, state=JobState.RUNNING, first_gpu=12, started_at=T0 - HOUR),
        _job("wait", "ml", 4),
        _job(
            "old",
            "ml",
            8,
            state=JobState.DONE,
            first_gpu=8,
            started_at=T0 - 26 * HOUR,
            ended_at=T0 - 24 * HOUR,
        ),
    ]
    rows = {
        row["team"]: row for row in team_status(TEAMS, 7.0, pools=POOLS, cluster_gpus=16, jobs=jobs, now=T0)
    }
    ml, vision = rows["ml"], rows["vision"]
    assert ml["quota"] == {"h100": 4, "a100": 4} and ml["in_use"] == {"h100": 0, "a100": 2}
    assert vision["in_use"] == {"h100": 8, "a100": 0} and vision["borrowed"] == {"h100": 4, "a100": 0}
    assert ml["lent"] == {"h100": 4, "a100": 0}  # a100: the stray's 2 GPUs are the 4 unowned ones'
    assert ml["borrowed"] == {"h100": 0, "a100": 0} and ml["queued"] == {"jobs": 1, "gpus": 4}
    # Use: ml 16 GPU-hours a day old and 2 this hour, vision 8 this hour, all a little decayed.
    assert 16 < ml["share"]["gpu_hours"] < 18 and 7.9 < vision["share"]["gpu_hours"] < 8
    assert ml["share"]["weight"] == 0.5 and rows["ops"]["share"]["weight"] == 0.25
    assert ml["share"]["used"] + vision["share"]["used"] == pytest.approx(1, abs=1e-3)
    # Both used more than their shares (ml about 69% of 50%, vision 31% of 25%): weighed below
    # 1, ml lowest; ops used nothing: 2.
    assert ml["share"]["factor"] < vision["share"]["factor"] < 1 < rows["ops"]["share"]["factor"] == 2


def test_lent_gpus_are_shared_by_idle_quota_in_whole_gpus() -> None:
    """Work of no team holds all 8 GPUs of a model that ml (quota 5) and vision (quota 3) own:
    each lends its whole quota, and the counts add up to what is held beyond the quotas."""
    teams = (Team("ml", quota={"default": 5}), Team("vision", quota={"default": 3}))
    stray = _job("stray", None, 8, state=JobState.RUNNING, first_gpu=0, started_at=T0 - HOUR)
    rows = team_status(teams, 7.0, pools=(), cluster_gpus=8, jobs=[stray], now=T0)
    assert [(r["lent"], r["in_use"]) for r in rows] == [
        ({"default": 5}, {"default": 0}),
        ({"default": 3}, {"default": 0}),
    ]
    half = _job("half", None, 4, state=JobState.RUNNING, first_gpu=0, started_at=T0 - HOUR)
    rows = team_status(teams, 7.0, pools=(), cluster_gpus=8, jobs=[half], now=T0)
    assert (
        sum(r["lent"]["default"] for r in rows) == 4 and rows[0]["lent"]["default"] == 3
    )  # 2.5 -> 3, 1.5 -> 1


def test_the_teams_report_counts_gpu_hours_inside_the_window_against_the_quota() -> None:
    since, until = T0 - 10 * HOUR, T0
    jobs = [
        # 4 GPUs from 12 hours ago to 6 hours ago: 4 of its hours lie in the window.
        _job(
            "a", "ml", 4, state=JobState.DONE, first_gpu=0, started_at=T0 - 12 * HOUR, ended_at=T0 - 6 * HOUR
        ),
        _job("b", "vision", 2, state=JobState.RUNNING, first_gpu=8, started_at=T0 - 2 * HOUR),
        _job("c", "ml", 8, first_gpu=None),  # queued: no hours
    ]
    report = team_report(TEAMS, jobs, pools=POOLS, cluster_gpus=16, since=since, until=until)
    rows = {(r.team, r.gpu_model): r for r in report.rows}
    assert len(report.rows) == 6 and report.hours == 10
    assert rows["ml", "h100"].gpu_hours == 16 and rows["ml", "h100"].entitled_gpu_hours == 40
    assert rows["ml", "h100"].of_entitlement == 0.4 and rows["ml", "h100"].share_of_model == 0.2
    assert rows["vision", "a100"].gpu_hours == 4 and rows["vision", "a100"].of_entitlement is None
    assert rows["ops", "h100"].gpu_hours == 0


def test_a_job_beyond_what_is_left_of_its_quota_is_told_it_runs_on_borrowed_gpus() -> None:
    running = [_job("own", "ml", 2, state=JobState.RUNNING, first_gpu=0, started_at=T0)]
    assert beyond_quota(TEAMS, _job("wide", "ml", 4), running, pools=POOLS) is None  # a100 has 4 left
    note = beyond_quota(TEAMS, _job("wider", "ml", 8), running, pools=POOLS)
    assert (
        note is not None
        and "8 GPUs are beyond what is left of team ml's quota (a100 4 of 4 free, h100 2 of 4 free)" in note
    )
    only_h100 = Job(
        "w",
        JobKind.TRAINING,
        1.0,
        {},
        T0,
        estimate=JobEstimate(4, 1, 2, by_model={model_key("h100"): (1, 2)}),
        team="ml",
    )
    note = beyond_quota(TEAMS, only_h100, running, pools=POOLS)
    assert note is not None and "(h100 2 of 4 free)" in note and "P90 end" in note
    assert beyond_quota(TEAMS, _job("fits", "ml", 2), running, pools=POOLS) is None
    assert beyond_quota(TEAMS, _job("free", None, 16), running, pools=POOLS) is None


def test_the_grid_colours_each_batch_cell_by_its_team_and_only_with_teams() -> None:
    times = [T0 + t * HOUR for t in range(2)]
    grid: list[list[str | None]] = [["a", "b"], ["chat", None]]
    teams = {"a": ("ml", TEAM_COLOURS[0])}
    rows, _ = grid_rows(grid, [0, 0], times, running={"a"}, realtime={"chat"}, teams=teams)
    assert [c.colour for c in rows[0].cells] == [TEAM_COLOURS[0], NO_TEAM_COLOUR]
    assert (
        "team ml" in rows[0].cells[0].title and rows[1].cells[0].colour is None
    )  # real-time: its own colour
    plain, _ = grid_rows(grid, [0, 0], times, running={"a"}, realtime={"chat"})
    assert all(c.colour is None for row in plain for c in row.cells)


# ---------------------------------------------------------------------------------------
# Served, on SQLite and PostgreSQL


def _team_config(tmp_path: Path, models: Path, teams: bool = True) -> Path:
    path = tmp_path / "config.yaml"
    document: dict[str, Any] = {
        "cluster": {"pools": [{"name": p.name, "gpu_model": p.gpu_model, "gpus": p.gpus} for p in POOLS]},
        "apps": [],
        "demo_queue": False,
        "models_dir": str(models),
        "plan_budget_ms": MIN_BUDGET_MS,
        "plan_wall_clock": False,
        "review_every_hours": None,
    }
    if teams:
        document["teams"] = [
            {"name": "ml", "quota": {"h100": 4, "a100": 4}, "weight": 2},
            {"name": "vision", "quota": {"h100": 4}},
            {"name": "ops"},
        ]
        document["fair_share"] = {"half_life_days": 7}
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture
def teamed(db_url: str, tmp_path: Path, models_dir: Path) -> Iterator[tuple[httpx.Client, Served, Path, str]]:
    config_path = _team_config(tmp_path, models_dir)
    config: ServiceConfig = load_config(config_path)
    with served_api(db_url, models_dir, config) as (client, service):
        yield client, service, config_path, db_url


def _spec(job_id: str, gpus: int, **more: object) -> dict[str, object]:
    return {"id": job_id, "kind": "batch_inference", "priority": 40, "gpus": gpus, "hours": 3, **more}


def test_the_api_and_the_command_line_show_each_team_and_refuse_a_team_not_in_the_config(
    teamed: tuple[httpx.Client, Served, Path, str], tmp_path: Path
) -> None:
    client, service, config, db = teamed
    # ml's 8 GPUs: beyond its 4 on each model, answered with the reason; vision's 2 fit its quota.
    wide = client.post("/v1/jobs", json=_spec("ml-wide", 8), headers=service.auth("ml"))
    assert wide.status_code == 201, wide.text
    assert (
        "8 GPUs are beyond what is left of team ml's quota (a100 4 of 4 free, h100 4 of 4 free)"
        in wide.json()["reason"]
    )
    small = client.post("/v1/jobs", json=_spec("v-small", 2), headers=service.auth("vision"))
    assert small.status_code == 201 and "beyond" not in small.json()["reason"]
    service.cycle(T0 + HOUR)  # both start: nobody else waits
    assert {j.id for j in service.store.jobs([JobState.RUNNING])} == {"ml-wide", "v-small"}

    document = client.get("/v1/status", headers=service.auth("admin")).json()
    teams = {row["team"]: row for row in document["teams"]}
    assert list(teams) == ["ml", "vision", "ops"]
    ml, vision = teams["ml"], teams["vision"]
    model = next(p["pool"] for p in document["pools"] if p["batch"] >= 8)  # where ml-wide runs
    assert ml["in_use"][model] == 8 and ml["borrowed"][model] == 4
    assert vision["in_use"]["h100"] + vision["in_use"]["a100"] == 2
    lent = sum(t["lent"][model] for t in teams.values())
    unowned = 8 - sum(t["quota"][model] for t in teams.values())
    assert lent == max(0, 4 - unowned)  # what ml holds beyond its quota and beyond the unowned GPUs
    # The served clock stays at T0, before the jobs' start: nobody has used anything yet.
    assert {t["share"]["factor"] for t in teams.values()} == {1.0}
    # ?team= keeps that team's row (beside its jobs).
    own = client.get("/v1/status?team=ml", headers=service.auth("reader")).json()
    assert [row["team"] for row in own["teams"]] == ["ml"] and own["teams"][0] == ml
    assert [
        r["team"] for r in client.get("/v1/status?team=vision", headers=service.auth("admin")).json()["teams"]
    ] == ["vision"]

    # The command line's status is the API's (its time aside).
    at = (T0 + 3 * HOUR).isoformat()
    shown = run_cli("status", "--db", db, "--config", config, "--at", at, "--json")
    assert shown.code == 0, shown.err
    later = json.loads(shown.out)["teams"]
    assert [{**t, "share": None} for t in later] == [{**t, "share": None} for t in document["teams"]]
    # Hours on, ml has used 8 GPUs' hours since its start and vision 2 GPUs': ml weighs below
    # 1, ops (none) 2.
    started = service.store.job("ml-wide").started_at  # type: ignore[union-attr]
    assert started is not None
    ran = (T0 + 3 * HOUR - started) / HOUR
    assert 8 * ran * 0.99 < later[0]["share"]["gpu_hours"] < 8 * ran
    assert 2 * ran * 0.99 < later[1]["share"]["gpu_hours"] < 2 * ran
    assert later[0]["share"]["factor"] < 1 < later[2]["share"]["factor"] == 2
    text = run_cli("status", "--db", db, "--config", config, "--at", at)
    assert text.code == 0 and "teams (use decayed with a 7-day half-life):" in text.out, text.err
    quota_header = text.out.split("team  ", 2)[2].splitlines()[0].split()
    assert quota_header == ["gpu_model", "quota", "in", "use", "lent", "borrowed"]
    assert "teams" not in json.loads(run_cli("status", "--db", db, "--at", at, "--json").out)

    # submit --team, the spec's team, and the refusals: one line, nothing stored.
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(_spec("cli-1", 1)))
    made = run_cli(
        "submit", spec_file, "--db", db, "--config", config, "--at", at, "--team", "vision", "--json"
    )
    assert made.code == 0, made.err
    assert service.store.job("cli-1").team == "vision"  # type: ignore[union-attr]
    for argv, message in (
        (
            ("--team", "nobody"),
            "`--team` must be one of the config's teams ['ml', 'vision', 'ops']; got 'nobody'.",
        ),
        (("--team", "ml", "--models", "x"), None),
    ):
        spec_file.write_text(
            yaml.safe_dump(_spec("cli-2", 1, team="vision") if message is None else _spec("cli-2", 1))
        )
        bad = run_cli("submit", spec_file, "--db", db, "--config", config, "--at", at, *argv)
        assert bad.code == 2 and len(bad.err.strip().splitlines()) == 1, bad.err
        assert (message or "`--team` must be the spec's team ('vision') or absent; got 'ml'.") in bad.err
        assert service.store.job("cli-2") is None
    spec_file.write_text(yaml.safe_dump(_spec("cli-3", 1, team="nobody")))
    bad = run_cli("submit", spec_file, "--db", db, "--config", config, "--at", at)
    assert (
        bad.code == 2
        and "`team` must be one of the config's teams ['ml', 'vision', 'ops']; got 'nobody'." in bad.err
    )
    assert service.store.job("cli-3") is None
    other = client.post("/v1/jobs", json=_spec("api-x", 1, team="vision"), headers=service.auth("ml"))
    assert other.status_code == 422 and other.json()["errors"] == [
        {"field": "team", "expected": "the token's team ('ml') or absent", "received": "vision"}
    ]
    assert service.store.job("api-x") is None

    # report teams: table, CSV, JSON, PNG over a window.
    since, until = T0.isoformat(), (T0 + 3 * HOUR).isoformat()
    window = ("--db", db, "--config", config, "--since", since, "--until", until)
    rows = json.loads(run_cli("report", "teams", *window, "--json").out)
    by = {(r["team"], r["gpu_model"]): r for r in rows}
    assert by["ml", model]["gpu_hours"] == pytest.approx(8 * ran, abs=1e-3)  # from its start on
    assert by["ml", model]["entitled_gpu_hours"] == 4 * 3
    assert by["ml", model]["of_entitlement"] == pytest.approx(8 * ran / 12, abs=1e-3)
    assert sum(r["gpu_hours"] for r in rows if r["team"] == "vision") == pytest.approx(2 * ran, abs=1e-3)
    table = run_cli("report", "teams", *window, "--png", tmp_path / "teams.png")
    assert table.code == 0 and "GPU-hours per team and GPU model against entitlement" in table.out, table.err
    assert (tmp_path / "teams.png").stat().st_size > 10_000
    listed = list(csv.DictReader(io.StringIO(run_cli("report", "teams", *window, "--csv").out)))
    assert [(r["team"], r["gpu_model"]) for r in listed] == [(r["team"], r["gpu_model"]) for r in rows]
    backwards = run_cli("report", "teams", "--db", db, "--config", config, "--since", until, "--until", since)
    assert backwards.code == 2 and "`--until` must be a time after since" in backwards.err

    # The same report over HTTP, as the other /v1/reports/*: its JSON rows, its CSV, the refusal.
    auth, query = service.auth("reader"), {"since": since, "until": until}
    answer = client.get("/v1/reports/teams", params=query, headers=auth)
    assert answer.status_code == 200 and answer.json() == rows, answer.text
    as_csv = client.get("/v1/reports/teams", params={**query, "format": "csv"}, headers=auth)
    assert as_csv.headers["content-type"].startswith("text/csv")
    assert list(csv.DictReader(io.StringIO(as_csv.text))) == listed
    wrong = client.get("/v1/reports/teams", params={"since": until, "until": since}, headers=auth)
    assert wrong.status_code == 422 and [e["field"] for e in wrong.json()["errors"]] == ["until"]
    assert client.get("/v1/reports/teams", params=query).status_code == 401  # a token is asked for


def test_a_config_without_teams_shows_no_teams_anywhere(tmp_path: Path, models_dir: Path) -> None:
    config = load_config(_team_config(tmp_path, models_dir, teams=False))
    with served_api(f"sqlite:///{tmp_path / 'plain.db'}", models_dir, config) as (client, service):
        assert "teams" not in service.context.dashboard()["status"]
        assert service.context.dashboard()["team_legend"] is None
        refused = client.get("/v1/reports/teams", headers=service.auth("reader"))
        assert refused.status_code == 422 and [e["field"] for e in refused.json()["errors"]] == ["teams"]
    plain = run_cli(
        "report", "teams", "--db", f"sqlite:///{tmp_path / 'plain.db'}", "--config", tmp_path / "config.yaml"
    )
    assert plain.code == 2 and "`--config` must be a config with a `teams:` section" in plain.err


@pytest.mark.parametrize(
    ("team", "message"),
    [
        ({"name": "a", "quota": {"l40s": 4}}, "`teams[0].quota.l40s` must be a GPU model of the cluster"),
        ({"name": "a", "quota": {"h100": -1}}, "`teams[0].quota.h100` must be an integer >= 0; got -1."),
        ({"name": "a", "weight": 0}, "`teams[0].weight` must be a number > 0; got 0."),
    ],
)
def test_a_bad_team_in_the_config_is_one_line_on_the_command_line_and_stores_nothing(
    tmp_path: Path, models_dir: Path, team: dict[str, object], message: str
) -> None:
    path = _team_config(tmp_path, models_dir)
    document = yaml.safe_load(path.read_text())
    document["teams"] = [team]
    path.write_text(yaml.safe_dump(document))
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(_spec("j", 1)))
    db = tmp_path / "never.db"
    for argv in (("status",), ("submit", spec_file)):
        bad = run_cli(*argv, "--db", f"sqlite:///{db}", "--config", path)
        assert bad.code == 2 and len(bad.err.strip().splitlines()) == 1, bad.err
        assert message in bad.err
    assert not db.exists()


@pytest.mark.browser
def test_the_dashboard_in_chromium_colours_work_by_team_with_a_legend(
    teamed: tuple[httpx.Client, Served, Path, str], tmp_path: Path
) -> None:
    client, service, _, _ = teamed
    assert client.post("/v1/jobs", json=_spec("ml-a", 4), headers=service.auth("ml")).status_code == 201
    assert client.post("/v1/jobs", json=_spec("v-a", 2), headers=service.auth("vision")).status_code == 201
    service.cycle(T0 + HOUR)
    with signed_in_page(str(client.base_url).rstrip("/"), service.tokens["ml"]) as page:
        legend = page.eval_on_selector_all(
            "#team-legend .cell",
            "cells => cells.map(c => [c.dataset.team, getComputedStyle(c).backgroundColor])",
        )
        rgb = [_rgb(colour) for colour in (*TEAM_COLOURS[:3], NO_TEAM_COLOUR)]
        assert legend == [
            [name, colour] for name, colour in zip(["ml", "vision", "ops", "no team"], rgb, strict=True)
        ]
        # Each running job's cells wear its team's colour; idle cells none.
        cells = page.eval_on_selector_all(
            "#grid td.run", "cells => cells.map(c => [c.innerText, getComputedStyle(c).backgroundColor])"
        )
        assert {text for text, _ in cells} == {"ml-a", "v-a"}
        assert all(colour == (rgb[0] if text == "ml-a" else rgb[1]) for text, colour in cells), cells
        assert page.locator("#grid td.idle.team").count() == 0
        shown = page.eval_on_selector_all(
            "#teams tbody tr",
            "rows => rows.map(r => [r.dataset.team, r.dataset.model, +r.querySelector('td.in-use').innerText])",
        )
        api = client.get("/v1/status", headers=service.auth("admin")).json()["teams"]
        assert shown == [[t["team"], m, t["in_use"][m]] for t in api for m in t["quota"]]
        page.screenshot(path=str(tmp_path / "teams.png"), full_page=True)


@contextmanager
def signed_in_page(base: str, token: str) -> Iterator[Any]:
    """A page of the system's headless Chromium, signed in to the dashboard at ``base``."""
    from playwright.sync_api import sync_playwright

    from benchmarks.served import launch_chromium, sign_in

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            sign_in(page, base, token)
            yield page
        finally:
            browser.close()


def _rgb(colour: str) -> str:
    red, green, blue = (int(colour[k : k + 2], 16) for k in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


def test_a_specs_team_is_its_tokens_or_the_configs_and_refused_otherwise_in_one_line() -> None:
    spec = {"id": "j", "kind": "batch_inference", "priority": 5, "gpus": 1, "hours": 1, "team": "ml"}
    token = ApiToken("t1", "0" * 64, "ml", frozenset({Scope.SUBMIT}), None, T0)
    # A token's own team passes, with teams in the config or without.
    for config_teams in ((), ("ml", "vision")):
        checked, _ = checked_spec(spec, None, source="spec", token=token, team_names=config_teams)
        assert checked["team"] == "ml"
    # From the command line, the team must be the config's.
    assert checked_spec(spec, None, source="spec", team_names=("ml",))[0]["team"] == "ml"
    for names, message in (
        ((), "spec: `team` must be absent (the config names no teams); got 'ml'."),
        (("vision",), "spec: `team` must be one of the config's teams ['vision']; got 'ml'."),
    ):
        with pytest.raises(InputError, match=re.escape(message)):
            checked_spec(spec, None, source="spec", team_names=names)
    with pytest.raises(InputError, match=re.escape("`team` must be a team's name (text); got 3.")):
        checked_spec({**spec, "team": 3}, None, source="spec", team_names=("ml",))
