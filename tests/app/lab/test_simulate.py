"""The simulated week on a small cluster: legal commits, actual durations, served <= needed,
the same seed the same week; and the errors a workload or traffic file gets."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from contract.errors import InputError
from contract.records import Assignment, Commit
from forecasting.realtime_training import BUNDLED_TRAFFIC_DIR
from gpuplan.app.lab.simulate import (
    STEP,
    PolicyRun,
    Setup,
    SimOptions,
    SimPolicy,
    SimulationReport,
    follow_plan,
    hourly,
    load_realtime,
    prepare,
    run_policy,
    simulate,
    week_grid,
)
from gpuplan.app.lab.simulate.setup import RT_PRIORITY, app_priority
from gpuplan.app.lab.workload import draw_workload, held_out_split, job_pool, read_workload
from scheduler.check import check_plan
from tests.service_fixtures import run_cli
from training_data.arrivals import load_pattern
from training_data.history import bundled_history_path, load_history

HEADER = "id,submit_hour,kind,priority,gpus,actual_hours,forecast_hours"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    """One simulated day at 16 GPUs on the default workload and the bundled traffic."""
    return prepare(days=1, gpus=16, work_dir=tmp_path_factory.mktemp("simulate"), seed=3)


@pytest.fixture(scope="module")
def report(setup: Setup) -> SimulationReport:
    return simulate(setup, list(SimPolicy), SimOptions())


def _commits(run: PolicyRun) -> list[tuple[datetime, tuple[Assignment, ...]]]:
    return [(c.hour, c.assignments) for c in run.commits]


def test_every_hour_is_committed_once_and_legal(setup: Setup, report: SimulationReport) -> None:
    for policy, run in report.runs.items():
        hours = [c.hour for c in run.commits]
        assert hours == [setup.start + h * STEP for h in range(setup.hours)], policy
        instance, grid = week_grid(setup, run)
        assert check_plan(instance, grid) == [], policy
        for commit in run.commits:
            for assignment in commit.assignments:
                if assignment.job in run.gpus:  # a batch job: one aligned power-of-two block
                    first, size = assignment.gpus[0], len(assignment.gpus)
                    assert size & (size - 1) == 0 and first % size == 0, (policy, assignment)
                    assert assignment.gpus == tuple(range(first, first + size)), (policy, assignment)


def test_jobs_hold_their_gpus_for_their_actual_durations(setup: Setup, report: SimulationReport) -> None:
    by_id = {job.id: job for job in setup.jobs}
    for policy, run in report.runs.items():
        assert run.started, policy
        held = run.committed_hours(setup)
        for job_id, start in run.started.items():
            job = by_id[job_id]
            assert start >= setup.start + timedelta(hours=job.submit_hour), (policy, job_id)
            # the hours its actual run touches, up to the end (a start at :30, by an amendment,
            # counts that hour)
            begin = (start - setup.start) / STEP
            end = min(begin + job.actual_hours, setup.hours)
            expected = math.ceil(end - 1e-9) - math.floor(begin)
            assert held[job_id] == expected, (policy, job_id, job.actual_hours, held[job_id])


def test_real_time_served_never_exceeds_what_the_traffic_needed(
    setup: Setup, report: SimulationReport
) -> None:
    for policy, run in report.runs.items():
        per_hour = hourly(setup, run)
        assert np.all(per_hour.rt_served <= per_hour.rt_demand), policy
        assert np.all(per_hour.rt_served <= per_hour.rt_held), policy
        metrics = report.metrics[policy]
        assert 0.0 <= metrics.rt_served <= 1.0
        assert metrics.rt_unmet_gpu_hours == per_hour.rt_demand.sum() - per_hour.rt_served.sum()
        assert 0.0 < metrics.utilization <= 1.0


def test_amendments_add_to_their_hour_and_promises_come_from_the_plan_at_submit(
    setup: Setup, report: SimulationReport
) -> None:
    fast = report.runs[SimPolicy.FAST]
    commits = {c.hour: {a.job: set(a.gpus) for a in c.assignments} for c in fast.commits}
    actual = {job.id: timedelta(hours=job.actual_hours) for job in setup.jobs}
    handed_over = 0
    for amendment in fast.amendments:
        assert amendment.made_at == amendment.hour + timedelta(minutes=30)
        held = commits[amendment.hour]
        for a in amendment.assignments:
            # Additions only: GPUs nobody holds in that hour, or whose batch job has ended by then.
            for job, gpus in held.items():
                if set(a.gpus) & gpus:
                    assert job in fast.started and fast.started[job] + actual[job] <= amendment.made_at
                    handed_over += 1
    assert handed_over > 0  # this week has jobs that end before :30 with work waiting for their GPUs
    # Only the fast policy amends; the others commit once an hour and nothing more.
    for policy, run in report.runs.items():
        assert run.amendments == [] or policy is SimPolicy.FAST
    for policy, run in report.runs.items():
        metrics = report.metrics[policy]
        assert 0.0 <= metrics.promise_kept <= 1.0
        # Judged: the promised jobs that started, or whose promise fell due before the end.
        judged = [
            job
            for job, promised in run.promised.items()
            if job in run.started or promised + timedelta(hours=1) < setup.end
        ]
        assert metrics.promised == len(judged) <= len(run.promised)
        for job in setup.jobs:
            promised = run.promised.get(job.id)
            if promised is not None:  # promised at the first cycle after its submission
                assert promised >= setup.start + timedelta(hours=job.submit_hour) - STEP
    off = run_policy(setup, SimPolicy.FAST, SimOptions(amend=False))
    assert off.amendments == []


def test_the_fast_policy_promises_later_than_its_plan_where_work_will_arrive_ahead(
    setup: Setup, report: SimulationReport
) -> None:
    """Each promise is made from the plan's start at submit: the fast policy's is that start
    or later (moved by the arrivals that outrank the job), the baselines' is that start."""
    for policy, run in report.runs.items():
        assert run.promised.keys() == run.planned.keys(), policy
        leads = [(run.promised[job] - run.planned[job]) / STEP for job in run.promised]
        assert all(lead >= 0 for lead in leads), policy
        if policy is SimPolicy.FAST:
            assert any(lead > 0 for lead in leads)
        else:
            assert run.promised == run.planned, policy
        metrics = report.metrics[policy]
        assert metrics.promise_lead_h_p50 == float(np.percentile(leads, 50))
        assert metrics.promise_lead_h_p90 == float(np.percentile(leads, 90))
        # Judged against the plan's start, the same rule: a later promise keeps at least as many.
        judged = [
            job
            for job, planned in run.planned.items()
            if job in run.started or planned + timedelta(hours=1) < setup.end
        ]
        kept = [job for job in judged if job in run.started and run.started[job] <= run.planned[job] + STEP]
        assert metrics.plan_kept == len(kept) / len(judged)


def test_the_same_setup_simulates_the_same_week(setup: Setup, report: SimulationReport) -> None:
    for policy in (SimPolicy.FAST, SimPolicy.COMMIT_ALL):
        again = run_policy(setup, policy, SimOptions())
        assert _commits(again) == _commits(report.runs[policy])
        assert again.started == report.runs[policy].started


def test_the_same_seed_draws_the_same_jobs(setup: Setup) -> None:
    _, later = held_out_split(load_history(bundled_history_path()))
    pool = job_pool(later, setup.models_dir, source="bundled")
    draw = {"hours": 48, "cluster_gpus": 16, "free_gpus": 10.0}
    first = draw_workload(pool, load_pattern(), seed=11, **draw)  # type: ignore[arg-type]
    assert first == draw_workload(pool, load_pattern(), seed=11, **draw)  # type: ignore[arg-type]
    assert first != draw_workload(pool, load_pattern(), seed=12, **draw)  # type: ignore[arg-type]
    assert all(job.gpus is None and job.features for job in first)  # the estimators decide
    assert any(job.submit_hour < 0 for job in first)  # the day's backlog
    assert all(job.actual_hours <= 48 for job in first)


def test_a_committed_plan_is_followed_as_reality_allows() -> None:
    hour = datetime(2025, 1, 6, 5, tzinfo=UTC)
    # Plan: job a ends after step 0 and b takes its block at step 1; the app grows 2 -> 4.
    grid = [
        ["a", "b", "b"],
        ["a", "b", "b"],
        ["rt", "rt", "rt"],
        ["rt", "rt", "rt"],
        [None, "rt", "rt"],
        [None, "rt", "rt"],
        [None, None, "c"],
        [None, None, None],
    ]
    previous = Commit(hour - STEP, 1, (Assignment("a", (0, 1)), Assignment("rt", (2, 3))))
    # a overran: it keeps GPUs 0-1, so b cannot start; the app grows within its cap of 1.
    commit = follow_plan(
        grid, 1, hour, previous=previous, running={"a": (0, 1)}, queued={"b", "c"}, swap_caps={"rt": 1}
    )
    assert commit.assignments == (Assignment("a", (0, 1)), Assignment("rt", (2, 3, 5)))
    # a ended on time: b starts on its planned block and c waits for its planned step.
    commit = follow_plan(grid, 1, hour, previous=previous, running={}, queued={"b", "c"}, swap_caps={"rt": 2})
    assert commit.assignments == (Assignment("b", (0, 1)), Assignment("rt", (2, 3, 4, 5)))


def _csv(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            ("a,0,training,50,4,3.5,3", "b,1.5,training,50,6,2,2"),
            "`gpus` must be a power of two (1, 2, 4, 8, ...); got '6'. Broken at row 2 (line 3).",
        ),
        (("a,-1,training,50,4,3.5,3",), "`submit_hour` must be a number of hours >= 0"),
        (("a,0,inference,50,4,3.5,3",), "`kind` must be one of training, batch_inference, quantization"),
        (("a,0,training,50,4,3.5,3", "a,1,training,50,4,3.5,3"), "`id` must be a unique, non-empty job id"),
        (("a,0,training,0,4,3.5,3",), "`priority` must be a number > 0; got '0'. Broken at row 1 (line 2)."),
        (("a,0,training,50,4,soon,3",), "`actual_hours` must be a number of hours > 0; got 'soon'."),
        (("a,0,training,50,32,3,3",), "`gpus` must be at most the cluster's 16 GPUs (--gpus)"),
        (
            ("a,0,batch_inference,50,4,3,",),
            "`forecast_hours` must be given for a batch_inference job",
        ),
    ],
)
def test_workload_rows_that_break_the_format_are_named(
    tmp_path: Path, rows: tuple[str, ...], message: str
) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        read_workload(_csv(tmp_path, *rows), cluster_gpus=16)


def test_feature_columns_are_checked_by_the_estimator_schema(tmp_path: Path) -> None:
    header = "id,submit_hour,kind,priority,gpus,actual_hours,params_billion,algorithm,calibration_samples,calibration_seq_len_tokens,gpu_type"
    path = _csv(
        tmp_path,
        "q1,0,quantization,40,1,0.5,7,gptq,128,2048,h100-80gb",
        "q2,2,quantization,40,1,0.5,7,awq,128,512,tpu-v5",
        header=header,
    )
    with pytest.raises(InputError, match=re.escape("`gpu_type` must be one of")) as error:
        read_workload(path, cluster_gpus=16)
    assert "row 2 (line 3)" in str(error.value)
    assert "row 1" not in str(error.value)


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    path = _csv(tmp_path, "a,0,training,50,4", header="id,submit_hour,kind,priority,gpus")
    with pytest.raises(InputError, match=re.escape("Missing: actual_hours.")):
        read_workload(path, cluster_gpus=16)


def test_a_series_too_short_for_the_days_and_two_weeks_of_history_is_refused() -> None:
    short = BUNDLED_TRAFFIC_DIR / "servegen_m-large_hourly.csv"  # 336 hours
    with pytest.raises(
        InputError,
        match=re.escape(
            "`traffic` must be a series of at least 360 hours (1 simulated days plus two weeks "
            "of history for the demand profile); got '336 hours'."
        ),
    ):
        load_realtime([short], days=1, gpus=16)


def test_the_bundled_series_too_short_are_left_out() -> None:
    series = load_realtime([], days=1, gpus=16)
    assert {s.app.id for s in series} == {
        "alibaba_dlrm_alive_hourly",
        "alibaba_genai_lora_hourly",
        "philly_active_nodes_hourly",
    }
    for s in series:
        assert s.history_hours >= 2 * 168
        assert s.hours[s.history_hours] == np.datetime64("2025-01-06T00", "h")
        assert int(s.demand_gpus[: s.history_hours].max()) == 2  # 40% of 16 GPUs over three apps


def test_the_command_prints_json_and_draws_the_plots(tmp_path: Path) -> None:
    jobs = _csv(
        tmp_path,
        "t1,0,training,60,4,5.5,5",
        "b1,0.2,batch_inference,30,2,2,3",
        "t2,1.7,training,80,8,3,4",
        "q1,3,quantization,40,1,0.4,1",
        "late,30,training,50,2,3,3",  # after the simulated day: never submitted
    )
    result = run_cli(
        "simulate",
        "--days",
        1,
        "--gpus",
        16,
        "--policy",
        "fast,fifo",
        "--workload",
        jobs,
        "--json",
        "--png",
        tmp_path / "png",
    )
    assert result.code == 0, result.err
    policies = json.loads(result.out)["policies"]
    assert set(policies) == {"fast", "fifo"}
    keys = {"utilization", "value", "rt_served", "rt_unmet_gpu_hours", "wait_p50_h", "wait_p99_h"}
    keys |= {"completed", "cycle_ms_p50", "cycle_ms_p99", "rt_moves"}
    keys |= {"rt_unmet_gpu_hours_worst_hour", "amendments_per_day", "promise_kept"}
    keys |= {"promise_delay_h_p50", "promise_delay_h_p90", "plan_kept", "promise_lead_h_p50"}
    keys |= {"promise_lead_h_p90", "promise_ms_p50", "promise_ms_p99", "rt_moves_per_day"}
    for metrics in policies.values():
        assert keys <= set(metrics)
        assert isinstance(metrics["rt_moves"], int) and metrics["rt_moves"] >= 0
        assert 0 <= metrics["rt_moves_per_day"] <= metrics["rt_moves"]  # one day: the swaps among them
        assert metrics["completed"] == 4  # every job submitted in the day ran to its end
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == [
        "simulate-p90-busiest-day.png",
        "simulate-p90-realtime.png",
        "simulate-p90-utilization.png",
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ("--policy", "fast,lottery"),
            "`--policy` must be a comma-separated list of fast, fifo, priority-backfill, commit-all",
        ),
        (
            ("--column", "active"),
            "`--column` must be a column of the --traffic files, given with --traffic; got 'active'",
        ),
    ],
)
def test_the_command_names_a_bad_option(options: tuple[str, str], message: str) -> None:
    result = run_cli("simulate", "--days", 1, *options)
    assert result.code == 2
    assert message in result.err


def test_a_series_whose_count_column_has_another_name_is_read_with_column(tmp_path: Path) -> None:
    # The bundled Philly series under Philly's own header, `hour,active,total`: refused as it
    # is, read with its count column named.
    bundled = (BUNDLED_TRAFFIC_DIR / "philly_active_nodes_hourly.csv").read_text().splitlines()
    philly = tmp_path / "philly.csv"
    philly.write_text("\n".join(["hour,active,total"] + [f"{row},420" for row in bundled[1:]]) + "\n")
    with pytest.raises(InputError, match=re.escape("`header` must be `hour,requests`")):
        load_realtime([philly], days=1, gpus=16)
    (series,) = load_realtime([philly], days=1, gpus=16, column="active")
    (same,) = load_realtime([BUNDLED_TRAFFIC_DIR / "philly_active_nodes_hourly.csv"], days=1, gpus=16)
    assert series.app.id == "philly"
    assert np.array_equal(series.requests, same.requests)
    assert np.array_equal(series.demand_gpus, same.demand_gpus)


def test_a_workload_on_another_priority_scale_does_not_outbid_the_apps(tmp_path: Path) -> None:
    # Half the jobs at priority 1,000: at the drawn workload's app priority (80), a training
    # GPU-hour is worth more than an unmet real-time one costs, and the plans starve the apps
    # (74% served). On the workload's own scale the apps sit where 80 sits in 20-90.
    rows = [f"j{i},{i * 0.5},training,{1000 if i % 2 else 1},{4 if i % 3 else 8},6,6" for i in range(40)]
    setup = prepare(days=1, gpus=16, work_dir=tmp_path, workload_path=_csv(tmp_path, *rows))
    assert [s.app.priority for s in setup.series] == pytest.approx([1 + 999 * 6 / 7] * len(setup.series))
    report = simulate(setup, [SimPolicy.FAST], SimOptions())
    assert report.as_json()["policies"]["fast"]["rt_served"] >= 0.99


def test_the_apps_priority_on_the_drawn_workloads_scale_is_unchanged() -> None:
    assert app_priority([20.0, 55.0, 90.0]) == pytest.approx(RT_PRIORITY)
    assert app_priority([50.0, 50.0]) == 50.0
    assert app_priority([1.0, 8.0]) == pytest.approx(7.0)


def test_jobs_submitted_after_the_simulated_days_are_left_out_and_said_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _csv(
        tmp_path, "early,3,training,50,4,2,2", "late,24,training,50,4,2,2", "later,30.5,training,50,4,2,2"
    )
    with caplog.at_level("WARNING", logger="gpuplan.app.lab.simulate.setup"):
        setup = prepare(days=1, gpus=16, work_dir=tmp_path, workload_path=path)
    assert [job.id for job in setup.jobs] == ["early"]
    assert (
        "2 of 3 jobs are submitted at hour 24 or later, after the 1 simulated days: left out" in caplog.text
    )


def test_the_command_prints_the_apps_priority_on_the_workloads_scale(tmp_path: Path) -> None:
    path = _csv(tmp_path, "a,1,training,1,4,2,2", "b,2,training,1000,4,2,2")
    result = run_cli("simulate", "--days", 1, "--gpus", 16, "--policy", "fifo", "--workload", path)
    assert result.code == 0, result.err
    assert "alibaba_dlrm_alive_hourly (priority 857.3, swap cap 1, " in result.out


def _cluster_config(tmp_path: Path, apps: str, gpus: int = 24) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        f"cluster: {{gpus: {gpus}}}\nplan_with: p50\npromise_penalty: 0.5\napps:\n{apps}", encoding="utf-8"
    )
    return path


TWO_APPS = (
    f"  - {{id: chat, priority: 90, swap_cap: 1, requests_per_gpu_hour: 60, headroom: 0.1,\n"
    f"     traffic: {BUNDLED_TRAFFIC_DIR / 'alibaba_genai_lora_hourly.csv'}}}\n"
    f"  - {{id: search, priority: 70, swap_cap: 1, peak_gpus: 4,\n"
    f"     traffic: {BUNDLED_TRAFFIC_DIR / 'philly_active_nodes_hourly.csv'}}}\n"
)


def test_a_daemon_config_gives_the_simulation_its_cluster_apps_and_plan_terms(tmp_path: Path) -> None:
    jobs = _csv(tmp_path, "t1,0,training,60,4,5.5,5", "q1,3,quantization,40,1,0.4,1")
    config = _cluster_config(tmp_path, TWO_APPS)
    result = run_cli(
        "simulate", "--config", config, "--days", 1, "--policy", "fast", "--workload", jobs, "--json"
    )
    assert result.code == 0, result.err
    cluster = json.loads(result.out)["cluster"]
    assert cluster["gpus"] == 24
    philly = load_realtime([BUNDLED_TRAFFIC_DIR / "philly_active_nodes_hourly.csv"], days=1, gpus=24)[0]
    history_peak = float(philly.requests[: philly.history_hours].max())
    assert cluster["apps"] == [
        {"id": "chat", "priority": 90.0, "swap_cap": 1, "requests_per_gpu_hour": 60.0, "headroom": 0.1},
        # no requests_per_gpu_hour: derived as the daemon does, the history's peak over peak_gpus
        {
            "id": "search",
            "priority": 70.0,
            "swap_cap": 1,
            "requests_per_gpu_hour": pytest.approx(history_peak / 4),
            "headroom": 0.0,
        },
    ]
    # Without the config the same workload runs on the defaults: 64 GPUs, the apps on the
    # workload's priority scale, each named after its file.
    default = run_cli("simulate", "--days", 1, "--policy", "fast", "--workload", jobs, "--json")
    assert default.code == 0, default.err
    defaults = json.loads(default.out)["cluster"]
    assert defaults["gpus"] == 64
    assert {app["id"] for app in defaults["apps"]}.isdisjoint({"chat", "search"})
    assert {app["priority"] for app in defaults["apps"]} != {90.0, 70.0}


def test_the_config_s_plan_terms_reach_the_printed_run(tmp_path: Path) -> None:
    jobs = _csv(tmp_path, "t1,0,training,60,4,5.5,5")
    config = _cluster_config(tmp_path, TWO_APPS, gpus=16)
    result = run_cli("simulate", "--config", config, "--days", 1, "--policy", "fifo", "--workload", jobs)
    assert result.code == 0, result.err
    assert "16 GPUs, 1 simulated day, plans with P50 job durations" in result.out
    assert "promise penalty 0.5" in result.out
    assert "chat (priority 90, swap cap 1" in result.out


@pytest.mark.parametrize(
    ("apps", "extra", "message"),
    [
        (
            "  - {id: chat, priority: 90, requests_per_gpu_hour: 60}\n",
            (),
            "`apps[0].traffic` must be an hourly traffic CSV for the simulation to replay",
        ),
        (
            "  - {id: chat, priority: -3, requests_per_gpu_hour: 60}\n",
            (),
            "`apps[0].priority` must be a number in",
        ),
        (TWO_APPS, ("--gpus", "32"), "`--gpus` must be left out beside --config"),
    ],
)
def test_a_bad_config_is_one_line_naming_the_field(
    tmp_path: Path, apps: str, extra: tuple[str, ...], message: str
) -> None:
    result = run_cli("simulate", "--config", _cluster_config(tmp_path, apps), "--days", 1, *extra)
    assert result.code == 2
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.err


def test_moves_per_day_count_gpus_swapped_not_the_changes_in_how_many_an_app_holds() -> None:
    from gpuplan.app.lab.simulate.measures import swap_moves

    assert swap_moves([0b0011, 0b0111, 0b1111, 0b0011]) == 0  # grows and shrinks: the curve's own
    assert swap_moves([0b0011, 0b0110]) == 2  # GPU 0 out, GPU 2 in: a replica moved for nothing
    assert swap_moves([0b0011, 0b1110, 0b1110]) == 2  # grows by one and swaps one


def test_on_an_uncontested_cluster_the_apps_gpus_do_not_move_between_commits(tmp_path: Path) -> None:
    jobs = _csv(tmp_path, "q1,3,quantization,40,1,0.4,1")  # one small job: nothing contends
    result = run_cli("simulate", "--days", 1, "--gpus", 24, "--policy", "fast", "--workload", jobs, "--json")
    assert result.code == 0, result.err
    fast = json.loads(result.out)["policies"]["fast"]
    assert fast["rt_served"] == 1.0
    assert fast["rt_moves_per_day"] == 0  # the apps only grow and shrink with their curves
