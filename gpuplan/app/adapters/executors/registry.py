"""The registry the config picks an executor from by name.

A new executor is a module in this package and one entry in :data:`EXECUTORS`: a function of
the config and the store that builds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from contract.errors import InputError
from gpuplan.app.adapters.executors.jsonl import JsonLinesExecutor, default_feed
from gpuplan.app.adapters.executors.memory import InMemoryExecutor
from gpuplan.app.adapters.executors.slurm import SlurmExecutor
from gpuplan.app.core.ports import Executor

if TYPE_CHECKING:
    from gpuplan.app.core.config import ServiceConfig
    from storage.store import Store

__all__ = ["EXECUTORS", "make_executor", "slurm_partition"]


def _jsonl(config: ServiceConfig, store: Store) -> Executor:
    path = config.commits_file or default_feed(store)
    if path is None:
        raise InputError(
            "commits_file", "a file for the jsonl executor (an in-memory database has no feed)", None
        )
    return JsonLinesExecutor(path)


#: Executor name -> how to build it from the service config and its store.
EXECUTORS: dict[str, Callable[[ServiceConfig, Store], Executor]] = {
    "memory": lambda _config, _store: InMemoryExecutor(),
    "jsonl": _jsonl,
    "slurm": lambda config, _store: SlurmExecutor.from_config(config),
}


def make_executor(config: ServiceConfig, store: Store) -> Executor:
    """The executor the config names; by default ``jsonl`` on the database's own feed
    (``memory`` for an in-memory database with no ``commits_file``)."""
    name = config.executor
    if name is None:
        name = "jsonl" if config.commits_file is not None or default_feed(store) is not None else "memory"
    if name not in EXECUTORS:
        raise InputError("executor", f"one of {sorted(EXECUTORS)}", name)
    return EXECUTORS[name](config, store)


def slurm_partition(config: ServiceConfig) -> SlurmExecutor | None:
    """The partition of the config's ``slurm:`` section (None without one): where a spec with a
    ``slurm:`` section is submitted held (a ``HeldQueue``; None: such a spec is refused), and
    what ``gpuplan doctor`` asks (a ``Checkable``)."""
    return None if config.slurm is None else SlurmExecutor.from_config(config)
