"""The outbox: every commit and amendment is delivered to the executor until it acknowledges it.

A commit and its pending delivery are stored in one transaction (``Store.record_run(...,
deliver_to=executor.name)``); :func:`deliver_pending` then hands each pending commit to the
executor, oldest first, and records the answer. It runs after every commit, at start-up and
at every cycle, so a commit whose delivery died with the process (kill -9, a power cut, an
executor that was down) is re-sent when the service is back. Executors are idempotent by
the commit's key (hour and ``seq``), so a commit that was done but not yet acknowledged
changes nothing the second time.

A delivery that fails stops the round: a later hour is not sent before an earlier one.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from contract.records import Amendment, Commit

if TYPE_CHECKING:
    from gpuplan.app.adapters.executors import Executor
    from storage.store import Store

log = logging.getLogger(__name__)

#: A fault point for the crash tests: the process stops at the named spot (``before-delivery``:
#: the commit is stored, the executor has not been called; ``before-acknowledgement``: the
#: executor has done it, the store does not know yet) and waits there to be killed, after
#: creating the file ``GPUPLAN_FAULT_MARKER`` names.
FAULT_PAUSE = "GPUPLAN_FAULT_PAUSE"
FAULT_MARKER = "GPUPLAN_FAULT_MARKER"
FAULT_POINTS = ("before-delivery", "before-acknowledgement")


def _fault_point(name: str) -> None:
    if os.environ.get(FAULT_PAUSE) != name:
        return
    log.warning("fault point %s: waiting to be killed", name)
    marker = os.environ.get(FAULT_MARKER)
    if marker:
        Path(marker).write_text(f"{os.getpid()} {name}\n", encoding="utf-8")
    while True:
        time.sleep(1.0)


def _named(item: Commit | Amendment) -> str:
    return f"the {'commit' if isinstance(item, Commit) else 'amendment'} {item.key}"


def deliver_pending(store: Store, executor: Executor, now: datetime) -> int:
    """Hand ``executor`` every commit and amendment it has not acknowledged, oldest first; returns how many it
    acknowledged. A failure is recorded with the delivery (attempts, last error) and ends the round."""
    acknowledged = 0
    for delivery in store.pending_deliveries(executor.name):
        _fault_point("before-delivery")
        item = delivery.item
        try:
            done = executor.deliver(item) if isinstance(item, Commit) else executor.amend(item)
        except Exception as error:  # any executor failure: the delivery stays pending
            log.exception("executor %s failed on %s", executor.name, _named(item))
            store.record_delivery(
                delivery, at=now, acknowledged=False, error=f"{type(error).__name__}: {error}"
            )
            return acknowledged
        _fault_point("before-acknowledgement")
        recorded = store.record_delivery(
            delivery, at=now, acknowledged=done, error=None if done else "not acknowledged"
        )
        if not done:
            log.warning("executor %s did not acknowledge %s", executor.name, _named(item))
            return acknowledged
        if recorded.attempts > 1:
            log.info(
                "%s acknowledged by %s after %d attempts", _named(item), executor.name, recorded.attempts
            )
        acknowledged += 1
    return acknowledged
