"""Submitting a job and reporting it done: the per-request use cases.

``submit`` validates a spec, forecasts it (GPUs, P50 and P90 hours), queues it and
answers with the job's planned start and GPUs from an immediate fast-mode replan (the
hot path; stored, never committed). ``finish`` marks a job done, appends it to the job
history the forecasters retrain on, and frees its GPUs at the next cycle. ``cancel``
takes a queued job out of the queue, or stops a running one through the executor; either
way it ends ``cancelled``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from contract.errors import InputError
from contract.records import ApiToken, Cluster, Job, JobEstimate, JobState, PlanRun, RunMode, Scope
from contract.scenario import JobKind, Pool
from contract.scenario_io import MAX_PRIORITY
from features.gpu_models import known_model, model_names
from gpuplan.app.core.bridge import STEP, planned_place
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.core.forecasters import SPEC_KEYS, Forecasters, kind_and_features
from gpuplan.app.core.job_models import check_gpu_models, estimate_on_pools, job_pools, with_model_features
from gpuplan.app.core.models import MODEL_FILES
from gpuplan.app.core.ports import HeldQueue
from gpuplan.app.core.slurm_settings import BatchSection, read_section
from gpuplan.app.core.tokens import require, require_priority
from gpuplan.app.cycle.finish import MAX_HOURS
from gpuplan.app.cycle.tick import plan_cycle, require_cluster
from gpuplan.app.jobs.promises import promised_starts
from gpuplan.app.views.status import placement_reason, pool_name
from gpuplan.app.views.teams import beyond_quota
from storage.store import Store

JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


@dataclass(frozen=True)
class SubmitResult:
    job: str
    gpus: int
    hours_p50: float
    hours_p90: float
    planned_start: datetime | None
    first_gpu: int | None
    reason: str
    #: The start promised (the plan's, moved by the work expected to arrive ahead of the job).
    promised_start: datetime | None = None
    #: On a cluster of several pools, the pool of the planned block (None: not planned);
    #: ``pooled`` False: one pool, and the answer has no ``pool``.
    pool: str | None = None
    pooled: bool = False

    def as_dict(self) -> dict[str, object]:
        answer: dict[str, object] = {
            "job": self.job,
            "gpus": self.gpus,
            "hours_p50": round(self.hours_p50, 4),
            "hours_p90": round(self.hours_p90, 4),
            "planned_start": None if self.planned_start is None else self.planned_start.isoformat(),
            "promised_start": None if self.promised_start is None else self.promised_start.isoformat(),
            "first_gpu": self.first_gpu,
            "reason": self.reason,
        }
        if self.pooled:
            answer["pool"] = self.pool
        return answer


def check_spec(spec: object, *, source: str, default_id: str | None = None) -> dict[str, Any]:
    """The spec's common keys checked (``id``, ``kind``, ``priority``, optional ``gpus``/``hours``).

    A spec without ``id`` takes ``default_id`` when one is given.
    """
    if not isinstance(spec, Mapping):
        raise InputError("(top level)", "a mapping of job fields", type(spec).__name__, source=source)
    spec = {str(key): value for key, value in spec.items()}
    if "id" not in spec and default_id is not None:
        spec["id"] = default_id
    job_id = spec.get("id")
    if not isinstance(job_id, str) or not JOB_ID.match(job_id):
        number = isinstance(job_id, int | float) and not isinstance(job_id, bool)
        raise InputError(
            "id",
            "1-128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit",
            job_id,
            source=source,
            # YAML reads 12345 (and 0755, as 493) as a number: an id is text, quoted.
            hint=f'That is a number, not text: quote it (id: "{job_id}").' if number else None,
        )
    batch_kinds = [kind.value for kind in JobKind.batch()]
    if spec.get("kind") not in batch_kinds:
        raise InputError("kind", f"one of {batch_kinds}", spec.get("kind"), source=source)
    priority = spec.get("priority", 1)
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int | float)
        or not (math.isfinite(priority) and 0 < priority <= MAX_PRIORITY)
    ):
        raise InputError(
            "priority",
            f"a finite number in (0, {MAX_PRIORITY:g}]",
            priority,
            source=source,
            hint="That is text: write the number without quotes." if _is_number_text(priority) else None,
        )
    allowed = SPEC_KEYS | feature_names(spec["kind"])
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise InputError(
            unknown[0],
            f"one of the fields of a {spec['kind']} spec: {sorted(allowed)}",
            spec[unknown[0]],
            source=source,
            hint=f"Unknown keys: {', '.join(unknown)}.",
        )
    if "gpu_models" in spec:
        check_gpu_models(spec["gpu_models"], source=source)
    if "gpus" in spec:
        gpus = spec["gpus"]
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1 or gpus & (gpus - 1):
            raise InputError("gpus", "a power of two (1, 2, 4, 8, ...)", gpus, source=source)
    if "time_limit_hours" in spec:
        limit = spec["time_limit_hours"]
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int | float)
            or not (math.isfinite(limit) and 0 < limit <= MAX_HOURS)
        ):
            raise InputError(
                "time_limit_hours", f"a number of hours in (0, {MAX_HOURS}]", limit, source=source
            )
    if "hours" in spec:
        _check_hours(spec["hours"], source=source)
        if "gpus" not in spec:
            raise InputError(
                "gpus", "a power of two (1, 2, 4, 8, ...) when `hours` is given", "missing", source=source
            )
    elif "gpus" in spec:
        raise InputError(
            "hours",
            f"a number of hours in (0, {MAX_HOURS}] when `gpus` is given",
            "missing",
            source=source,
            hint="A spec states both `gpus` and `hours`, or neither (then they are forecast).",
        )
    elif spec["kind"] in MODEL_FILES:
        from gpuplan.app.jobs.jobspec import parse_job_spec  # pandas: loaded only for a spec to check

        # The features are checked against their schema before any model is loaded.
        parse_job_spec(kind_and_features(spec), source=source)
    else:
        raise InputError(
            "hours",
            "a number of hours (batch inference has no forecaster)",
            None,
            source=source,
            hint="Give `gpus` and `hours` for batch inference jobs.",
        )
    return spec


def _check_hours(hours: object, *, source: str) -> None:
    """A spec's ``hours``: a number of hours (on the reference model, the first pool's), or a
    mapping of GPU model -> hours on it (a cluster of pools: :mod:`gpuplan.app.core.job_models`)."""
    if isinstance(hours, Mapping):
        if not hours:
            raise InputError(
                "hours",
                "a number of hours, or a mapping of GPU model -> hours",
                "an empty mapping",
                source=source,
            )
        for model, value in hours.items():
            if not isinstance(model, str) or known_model(model) is None:
                raise InputError(
                    "hours",
                    f"GPU models gpuplan knows as its keys: one of {model_names()}",
                    model,
                    source=source,
                )
            _check_hours_number(value, field=f"hours.{model}", source=source)
        return
    _check_hours_number(hours, field="hours", source=source)


def _check_hours_number(hours: object, *, field: str, source: str) -> None:
    if (
        isinstance(hours, bool)
        or not isinstance(hours, int | float)
        or not (math.isfinite(hours) and 0 < hours <= MAX_HOURS)
    ):
        raise InputError(field, f"a number of hours in (0, {MAX_HOURS}]", hours, source=source)


def _is_number_text(value: object) -> bool:
    """``value`` is text that reads as a number (``"5"``, ``"1e6"``)."""
    if not isinstance(value, str):
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


def feature_names(kind: str) -> frozenset[str]:
    """The feature names a spec of ``kind`` may carry (none for kinds without a forecaster)."""
    from features.job_features import SCHEMAS

    schema = SCHEMAS.get(kind)  # type: ignore[call-overload]
    return frozenset(() if schema is None else schema.names)


def estimate_spec(
    spec: dict[str, Any], forecasters: Forecasters, *, source: str, pools: Sequence[Pool] = ()
) -> JobEstimate:
    """A checked spec's estimate on the cluster of ``pools`` (the config's; on several, per GPU
    model: :mod:`gpuplan.app.core.job_models`)."""
    return estimate_on_pools(spec, forecasters, pools, source=source)


class Batcher(Protocol):
    """Stores and plans a job whose spec is checked and forecast (:func:`estimated_job`), with
    the others submitted together (:class:`~gpuplan.app.jobs.batcher.SubmitBatcher`)."""

    def __call__(self, job: Job, *, source: str) -> SubmitResult: ...


def submit(
    store: Store,
    spec_document: object,
    now: datetime,
    config: ServiceConfig,
    *,
    source: str = "job spec",
    default_id: str | None = None,
    forecasters: Forecasters | None = None,
    replan: bool = True,
    token: ApiToken | None = None,
    batcher: Batcher | None = None,
    slurm_job: int | None = None,
    held: HeldQueue | None = None,
    team: str | None = None,
) -> SubmitResult:
    """Validate, forecast, queue and replan; nothing is stored when any of it is refused.

    ``replan=False`` skips the hot-path plan (the answer then has no planned start): the
    simulation submits hundreds of jobs and only the cycle's plans change what runs.
    ``batcher`` checks the job against the store, stores and plans it instead (the served API's
    :class:`~gpuplan.app.jobs.batcher.SubmitBatcher`: the submits that arrive together stored in
    one transaction and planned once); a spec with a ``slurm:`` section does not take it.
    A ``token`` (the API's caller) must hold ``submit`` and a cap at or above the job's
    priority; the job records the token's team.

    A spec with a ``slurm:`` section is submitted to the cluster ``held`` (the config's Slurm
    partition: :func:`gpuplan.app.adapters.executors.registry.slurm_partition`; None refuses such a
    spec), after every check, before it is stored; a refused ``sbatch`` raises ``SlurmError``
    and nothing is stored.
    ``slurm_job``: the Slurm job of a spec adopted from Slurm (already submitted, held).
    ``team``: the job's team from the command line (``--team``; the spec's ``team`` says the
    same), one of the config's teams; a token's job is its token's team's.
    """
    spec, section = checked_spec(
        spec_document,
        held,
        source=source,
        default_id=default_id,
        token=token,
        adopted=slurm_job is not None,
        pools=config.pools,
        team_names=[team.name for team in config.teams],
        team=team,
    )
    forecasters = forecasters or Forecasters(config.models_dir)
    if batcher is not None and section is None and slurm_job is None:
        # The batch checks its jobs against the store together (:func:`check_fits`, the ids)
        job = estimated_job(spec, now, forecasters, source=source, token=token, pools=config.pools)
        return with_quota_note(batcher(job, source=source), job, store, config)
    job = checked_job(store, spec, now, forecasters, source=source, token=token, pools=config.pools)
    if section is not None and held is not None:  # (checked_spec refuses a section with no held queue)
        submitted = held.hold(job.id, section)
        try:
            store.add_job(replace(job, spec={**spec, "slurm": {**spec["slurm"], "job_id": submitted}}))
        except BaseException:
            held.withdraw(submitted)  # nothing is left in Slurm that the store does not know
            raise
    elif slurm_job is not None:
        store.add_job(replace(job, spec={**spec, "slurm": {"job_id": slurm_job}}))
    else:
        store.add_job(job)
    run = hot_path_plan(store, now, config, forecasters) if replan else None
    if run is None:
        result = answer(run, job, pools=config.pools)
    else:
        result = answer(run, job, promise(store, run, [job], now, config).get(job.id), config.pools)
    return with_quota_note(result, job, store, config)


def with_quota_note(result: SubmitResult, job: Job, store: Store, config: ServiceConfig) -> SubmitResult:
    """``result`` with, for a job larger than what is left of its team's quota, why it may wait:
    it runs on borrowed GPUs only (:func:`gpuplan.app.views.teams.beyond_quota`)."""
    if not config.teams or job.team is None:
        return result
    note = beyond_quota(config.teams, job, store.jobs([JobState.RUNNING]), pools=config.pools)
    return result if note is None else replace(result, reason=f"{result.reason}; {note}")


def checked_spec(
    spec_document: object,
    held: HeldQueue | None,
    *,
    source: str,
    default_id: str | None = None,
    token: ApiToken | None = None,
    adopted: bool = False,
    pools: Sequence[Pool] = (),
    team_names: Sequence[str] = (),
    team: str | None = None,
) -> tuple[dict[str, Any], BatchSection | None]:
    """The checks of :func:`submit` that read nothing: the token's scope and priority cap, the
    spec, and its ``slurm:`` section, refused when no cluster takes held jobs (``held`` is None;
    ``adopted``: the spec of a job already in Slurm, whose section is not read; ``pools``: the
    cluster's, whose models fill a spec's GPU features; ``team_names``: the config's teams, one
    of which a token's team, a spec's ``team`` and ``team`` (``--team``) must be)."""
    if token is not None:
        require(token, Scope.SUBMIT)
        if team_names and token.team not in team_names:  # its jobs would plan as no team's: refused
            raise InputError(
                "team",
                f"one of the config's teams {list(team_names)}",
                token.team,
                source=f"token {token.id}",
            )
    document = with_model_features(spec_document, pools)
    spec = check_spec(document, source=source, default_id=default_id)
    if token is not None:
        require_priority(token, float(spec.get("priority", 1)))
    spec = _with_team(spec, token, team, team_names, source=source)
    if "slurm" not in spec or adopted:
        return spec, None

    section = read_section(spec["slurm"], source=source)
    if held is None:
        raise InputError(
            "slurm",
            "a section only for a cluster that Slurm runs (the daemon's config, --config, has none)",
            "a slurm section",
            source=source,
        )
    return spec, section


def _with_team(
    spec: dict[str, Any],
    token: ApiToken | None,
    team: str | None,
    team_names: Sequence[str],
    *,
    source: str,
) -> dict[str, Any]:
    """``spec`` with its ``team`` checked: the command line's (``--team``) and the spec's agree,
    a token's job is its token's team's, and the team is one of the config's."""
    given = spec.get("team")
    if given is not None and not isinstance(given, str):
        raise InputError("team", "a team's name (text)", given, source=source)
    if team is not None and given is not None and team != given:
        raise InputError("--team", f"the spec's team ({given!r}) or absent", team, source=source)
    given = given if given is not None else team
    if token is not None and given is not None and given != token.team:
        raise InputError("team", f"the token's team ({token.team!r}) or absent", given, source=source)
    if given is None or token is not None:  # a token's team is checked against the config's above
        return spec
    if given not in team_names:
        names = (
            f"one of the config's teams {list(team_names)}"
            if team_names
            else "absent (the config names no teams)"
        )
        raise InputError("--team" if team is not None else "team", names, given, source=source)
    return {**spec, "team": given}


def checked_job(
    store: Store,
    spec: dict[str, Any],
    now: datetime,
    forecasters: Forecasters,
    *,
    source: str,
    token: ApiToken | None = None,
    pools: Sequence[Pool] = (),
) -> Job:
    """A checked spec as the job to queue: its id free, its forecast made, its size one the
    cluster (of ``pools``, the config's) can hold (nothing is stored)."""

    cluster = require_cluster(store)
    if store.job(spec["id"]) is not None:  # before the forecast: a refusal costs nothing
        raise InputError("id", "an id no other job has", spec["id"], source=source)
    job = estimated_job(spec, now, forecasters, source=source, token=token, pools=pools)
    check_fits(cluster, job, now, source=source, pools=pools)
    return job


def estimated_job(
    spec: dict[str, Any],
    now: datetime,
    forecasters: Forecasters,
    *,
    source: str,
    token: ApiToken | None = None,
    pools: Sequence[Pool] = (),
) -> Job:
    """A checked spec as a job with its forecast on the cluster of ``pools`` (the config's),
    before any check against the store (its id free, :func:`check_fits`)."""
    return Job(
        id=spec["id"],
        kind=JobKind(spec["kind"]),
        priority=float(spec.get("priority", 1)),
        spec=spec,
        submitted_at=now,
        estimate=estimate_spec(spec, forecasters, source=source, pools=pools),
        team=spec.get("team", None if token is None else token.team),
    )


def answer(
    run: PlanRun | None, job: Job, promised_start: datetime | None = None, pools: Sequence[Pool] = ()
) -> SubmitResult:
    """The submit's answer from the plan that placed ``job`` (None: no plan was made), with
    the start promised to it; on a cluster of several ``pools`` (the config's), with the pool
    of its planned block."""
    assert job.estimate is not None
    estimate = job.estimate
    pooled = len(pools) > 1
    if run is None:
        return SubmitResult(
            job.id,
            estimate.gpus,
            estimate.hours_p50,
            estimate.hours_p90,
            None,
            None,
            "queued; the next plan cycle places it",
            pooled=pooled,
        )
    planned_start, first_gpu = planned_place(run, job.id)
    reason = placement_reason(run, job.id, estimate, planned_start)
    if planned_start is not None and promised_start is not None and promised_start > planned_start:
        reason += "; " + promise_reason(job.submitted_at, planned_start, promised_start)
    return SubmitResult(
        job.id,
        estimate.gpus,
        estimate.hours_p50,
        estimate.hours_p90,
        planned_start,
        first_gpu,
        reason,
        promised_start,
        pool_name(pools, first_gpu) if pooled else None,
        pooled,
    )


def promise_reason(submitted: datetime, planned: datetime, promised: datetime) -> str:
    """Why a job is promised a start later than its planned one (gpuplan/app/jobs/promises.py): the
    share of the batch GPUs that higher-priority arrivals are expected to take while it waits,
    read back from the two leads (the promise is ``lead / (1 - load)``, to the hour)."""
    lead, promised_lead = (planned - submitted) / STEP, (promised - submitted) / STEP
    load = 1 - lead / promised_lead
    return (
        f"promised {(promised - planned) / STEP:g} h after the planned start: higher-priority jobs "
        f"submitted recently took about {load:.0%} of the batch GPUs, and those that keep arriving "
        "while it waits go ahead of it"
    )


def check_fits(cluster: Cluster, job: Job, now: datetime, *, source: str, pools: Sequence[Pool] = ()) -> None:
    """Refuse a job no aligned block of the cluster can ever hold: larger than the cluster,
    than every one of its ``pools`` (a block lies inside one), or than every block whose GPUs
    are not all down for good (a down window with no end)."""
    assert job.estimate is not None
    gpus = job.estimate.gpus
    allowed = [pool for pool, _ in job_pools(job.estimate, pools)]
    largest = max(allowed, key=lambda pool: pool.gpus, default=None)
    if largest is not None and gpus > largest.gpus and (gpus <= cluster.gpus or len(allowed) < len(pools)):
        which = "pool" if len(allowed) == len(pools) else "pool of its gpu_models"
        raise InputError(
            "gpus",
            f"at most {largest.gpus}, the GPUs of the largest {which} ({largest.name})",
            gpus,
            source=source,
            hint=f"A job runs inside one pool of the cluster's {[pool.name for pool in pools]}"
            + ("." if len(allowed) == len(pools) else f"; it may run on {[pool.name for pool in allowed]}."),
        )
    if gpus > cluster.gpus:
        raise InputError(
            "gpus",
            f"at most the cluster's {cluster.gpus} GPUs",
            gpus,
            source=source,
            hint="The forecast needs a larger cluster; give `gpus` (and `hours`) to override.",
        )
    gone = {w.gpu for w in cluster.down if w.end is None and w.start <= now}
    if all(gone & set(range(first, first + gpus)) for first in range(0, cluster.gpus, gpus)):
        size = cluster.gpus
        while size and all(gone & set(range(a, a + size)) for a in range(0, cluster.gpus, size)):
            size //= 2
        down = ", ".join(map(str, sorted(gone)))
        which = f"GPU {down} is" if len(gone) == 1 else f"GPUs {down} are"
        raise InputError(
            "gpus",
            f"at most {size}: the largest aligned block of GPUs that are not down for good",
            gpus,
            source=source,
            hint=f"{which} down with no end in the cluster's configuration.",
        )


#: How a submitter names a job's outcome (``gpuplan done --outcome``), and the history's names.


def planned_starts(run: PlanRun, job_ids: Sequence[str]) -> dict[str, datetime]:
    """The starts ``run`` plans for ``job_ids`` (a job it does not place has none)."""
    starts = {}
    for job_id in job_ids:
        start, _ = planned_place(run, job_id)
        if start is not None:
            starts[job_id] = start
    return starts


def promise(
    store: Store,
    run: PlanRun,
    jobs: Sequence[Job],
    now: datetime,
    config: ServiceConfig,
    *,
    starts: Mapping[str, datetime] | None = None,
) -> dict[str, datetime]:
    """The starts promised to ``jobs`` at ``now`` from ``run`` (its planned starts, moved by
    the work expected to arrive ahead of them: :mod:`gpuplan.app.jobs.promises`; ``starts`` when
    they are made already), kept as their promises. A job the run does not place gets no
    promise; one already promised keeps its first."""

    promised = dict(starts) if starts is not None else promised_starts(store, run, jobs, now, config)
    if promised:
        store.set_promises(promised)
    return promised


def hot_path_plan(
    store: Store, now: datetime, config: ServiceConfig, forecasters: Forecasters
) -> PlanRun | None:
    """The fast-mode replan after a submission: stored (mode ``submit``), never committed."""

    return plan_cycle(store, now, config, forecasters=forecasters, mode=RunMode.SUBMIT).run
