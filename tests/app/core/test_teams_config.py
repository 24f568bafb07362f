"""The daemon's `teams:` and `fair_share:`: read by the scenario's rules, bad input refused in one
line naming the field, and the config check saying whether the quotas fit the cluster."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contract.errors import InputError
from contract.records import ApiToken, Scope
from gpuplan.app.core.config import load_config
from gpuplan.app.jobs.submit import checked_spec
from gpuplan.app.views.doctor import Verdict, quota_checks

POOLS = """cluster:
  pools:
    - {name: h100, gpu_model: h100, gpus: 32}
    - {name: a100, gpu_model: a100, gpus: 32}
"""


def config_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "gpuplan.yaml"
    path.write_text(POOLS + body)
    return path


def test_teams_and_fair_share_are_read(tmp_path: Path) -> None:
    config = load_config(
        config_file(
            tmp_path,
            "teams:\n"
            "  - {name: research, quota: {h100: 16, a100: 8}, weight: 2}\n"
            "  - {name: product, quota: {h100: 8, a100: 16}, weight: 1}\n"
            "fair_share: {half_life_days: 3}\n",
        )
    )
    assert [(t.name, dict(t.quota), t.weight) for t in config.teams] == [
        ("research", {"h100": 16, "a100": 8}, 2.0),
        ("product", {"h100": 8, "a100": 16}, 1.0),
    ]
    assert config.half_life_days == 3.0
    assert config.lending_horizon_hours is None  # off unless set
    later = load_config(config_file(tmp_path, "teams:\n  - {name: a}\nlending_horizon_hours: 12\n"))
    assert later.lending_horizon_hours == 12.0
    assert [(c.name, c.verdict, c.why) for c in quota_checks(config)] == [
        ("teams h100", Verdict.OK, "h100: quotas add up to 24 of 32 GPUs, 8 unowned (any team may use them)"),
        ("teams a100", Verdict.OK, "a100: quotas add up to 24 of 32 GPUs, 8 unowned (any team may use them)"),
    ]


def test_oversubscribed_quotas_are_a_warning(tmp_path: Path) -> None:
    config = load_config(
        config_file(tmp_path, "teams:\n  - {name: a, quota: {h100: 32}}\n  - {name: b, quota: {h100: 8}}\n")
    )
    (check,) = quota_checks(config)
    assert check.verdict is Verdict.WARN
    assert check.line() == (
        "warn teams h100: h100: quotas add up to 40 of 32 GPUs, more than the model has: "
        "a quota is guaranteed only as far as the GPUs go"
    )


def test_no_teams_no_quota_line(tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path, ""))
    assert config.teams == () and quota_checks(config) == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "teams:\n  - {name: a, quota: {l40s: 4}}\n",
            "`teams[0].quota.l40s` must be a GPU model of the cluster ['a100', 'h100']; got 'l40s'.",
        ),
        (
            "teams:\n  - {name: a, quota: {h100: -4}}\n",
            "`teams[0].quota.h100` must be an integer >= 0; got -4.",
        ),
        (
            "teams:\n  - {name: a, quota: {h100: 33}}\n",
            "`teams[0].quota.h100` must be an integer <= 32; got 33.",
        ),
        ("teams:\n  - {name: a, weight: 0}\n", "`teams[0].weight` must be a number > 0; got 0."),
        (
            "teams:\n  - {name: a}\n  - {name: a}\n",
            "`teams[1].name` must be a name used by no other team; got 'a'.",
        ),
        ("fair_share: {half_life_days: 7}\n", "`fair_share` must be absent without a `teams:` section"),
        (
            "teams:\n  - {name: a}\nfair_share: {half_life_days: -1}\n",
            "`fair_share.half_life_days` must be a number > 0; got -1.",
        ),
        (
            "teams:\n  - {name: a}\nlending_horizon_hours: -1\n",
            "`lending_horizon_hours` must be a number in [0, 8760]; got -1.",
        ),
        ("lending_horizon_hours: 4\n", "`lending_horizon_hours` must be absent without a `teams:` section"),
        (
            "teams:\n  - {name: a, forecast: {h100: [1]}}\n",
            "`teams[0].forecast` must be absent (a forecast is the plan's, not the config's)",
        ),
    ],
)
def test_bad_teams_are_refused_in_one_line_naming_the_field(tmp_path: Path, body: str, message: str) -> None:
    path = config_file(tmp_path, body)
    with pytest.raises(InputError, match=re.escape(message)) as caught:
        load_config(path)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"{path}: ")


def test_a_token_of_a_team_the_config_does_not_name_may_not_submit(tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path, "teams:\n  - {name: research, quota: {h100: 8}}\n"))
    spec = {"id": "j", "kind": "training", "priority": 5}

    def token(team: str) -> ApiToken:
        return ApiToken(
            "t1", "0" * 64, team, frozenset({Scope.SUBMIT}), None, datetime(2026, 12, 1, tzinfo=UTC)
        )

    message = "token t1: `team` must be one of the config's teams ['research']; got 'product'."
    with pytest.raises(InputError, match=re.escape(message)):
        checked_spec(
            spec, None, source="spec", token=token("product"), team_names=[t.name for t in config.teams]
        )
    with pytest.raises(InputError) as caught:  # its own team passes this check (the spec's follow)
        checked_spec(
            spec, None, source="spec", token=token("research"), team_names=[t.name for t in config.teams]
        )
    assert caught.value.field != "team"
