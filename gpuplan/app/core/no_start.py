"""Why a plan run gives a queued job no start in its horizon, in an operator's words (``gpuplan
status``): the job's size against the GPUs the run left to batch work."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from contract.records import PlanRun


@dataclass(frozen=True)
class _RunFacts:
    """What :func:`no_start_reason` reads of a run, worked out once per run (a status lists
    every queued job of one run)."""

    run: PlanRun
    sizes: Mapping[str, int]  # each batch job's GPUs, as the run planned it
    hours: str
    most_free_up: int  # the most GPUs up and free of real-time work at one step
    most_free: int  # the same, down GPUs counted as up

    @classmethod
    def of(cls, run: PlanRun) -> _RunFacts:
        jobs = run.scenario.get("jobs", [])
        horizon = len(run.grid[0]) if run.grid else 0
        realtime = {job["id"] for job in jobs if job.get("kind") == "realtime"}
        down = {
            (int(window["gpu"]), step)
            for window in run.scenario.get("down", [])
            for step in range(int(window.get("start", 0)), int(window.get("end", horizon)))
        }

        def most_free(count_down: bool) -> int:
            return max(
                (
                    sum(
                        1
                        for gpu, row in enumerate(run.grid)
                        if row[step] not in realtime and not (count_down and (gpu, step) in down)
                    )
                    for step in range(horizon)
                ),
                default=0,
            )

        return cls(
            run,
            {job["id"]: int(job["gpus"]) for job in jobs if job.get("kind") != "realtime"},
            f"{horizon * int(run.scenario.get('step_minutes', 60)) / 60:g} h",
            most_free(count_down=True),
            most_free(count_down=False),
        )


_last_facts: list[_RunFacts] = []  # the last run's, kept while that run is asked about


def _facts(run: PlanRun) -> _RunFacts:
    if _last_facts and _last_facts[0].run is run:
        return _last_facts[0]
    facts = _RunFacts.of(run)
    _last_facts[:] = [facts]
    return facts


def no_start_inputs(run: PlanRun, job_id: str) -> tuple[object, ...]:
    """What :func:`no_start_reason` reads of ``run`` for ``job_id`` (beside its ``gpus``): two
    runs with the same give it the same reason."""
    facts = _facts(run)
    return (
        facts.sizes.get(job_id),
        facts.most_free_up,
        facts.most_free,
        facts.hours,
        run.scenario.get("gpus", 0),
    )


def no_start_reason(run: PlanRun, job_id: str, gpus: int | None) -> str:
    """Why ``run`` gives ``job_id`` no start in its horizon, in an operator's words.

    A job the run left out is explained by its estimated ``gpus`` (None: not estimated yet).
    A job the run planned is set against what the run left to batch work: at each step, the GPUs
    that are up and hold no real-time app. Too few of them, even at the best step, is the
    job's own size (or, if they would do with every GPU up, the GPUs that are down);
    enough of them means other batch work holds them.
    """
    facts = _facts(run)
    planned = facts.sizes.get(job_id)
    if planned is None:  # the run left it out
        cluster_gpus = int(run.scenario.get("gpus", 0))
        if gpus is None:
            return "no estimate yet: its forecast failed (the daemon's log says why)"
        if gpus > cluster_gpus:
            return f"needs {gpus} GPUs; the cluster has {cluster_gpus}"
        return "submitted after the last plan run"
    free, within = facts.most_free_up, f"in the next {facts.hours}"
    if planned > free:
        if planned <= facts.most_free:
            return f"GPUs down: needs {planned} GPUs; at most {free} are up and free at once {within}"
        return f"needs {planned} GPUs; at most {free} are free at once {within}"
    return "waits behind higher-priority work"
