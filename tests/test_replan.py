"""SharedReplan: concurrent submits share one replan, and each answer's plan has seen its job."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from gpuplan.app.replan import SharedReplan

CALLERS = 12


def _wait_until(condition: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_submits_that_arrive_during_a_replan_share_the_next_one_and_each_sees_its_job() -> None:
    stored: set[int] = set()
    plans: list[frozenset[int]] = []
    release = threading.Event()

    def plan() -> Any:
        if not plans:
            release.wait(10)  # the first replan is slow: everyone else arrives meanwhile
        seen = frozenset(stored)
        plans.append(seen)
        return seen

    replan = SharedReplan(plan)  # type: ignore[arg-type]
    answers: dict[int, Any] = {}

    def submit(n: int) -> None:
        stored.add(n)  # the job is stored before the replan is asked for
        answers[n] = replan()

    first = threading.Thread(target=submit, args=(0,))
    first.start()
    _wait_until(lambda: replan._running)
    others = [threading.Thread(target=submit, args=(n,)) for n in range(1, CALLERS)]
    for thread in others:
        thread.start()
    _wait_until(lambda: replan._asked == CALLERS)
    release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert len(plans) == 2  # one in flight, one for all who came during it
    assert all(n in answers[n] for n in range(CALLERS))


def test_a_failing_replan_fails_every_submit_it_covered_and_the_next_one_runs_again() -> None:
    calls = []

    def plan() -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database down")
        return "run"

    replan = SharedReplan(plan)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="database down"):
        replan()
    assert replan() == "run" and len(calls) == 2
