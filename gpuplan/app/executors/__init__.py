"""The executors, side by side, and the registry the config picks one from by name.

``memory`` keeps the commits (tests, the simulation); ``jsonl`` appends them to the
config's ``commits_file``; ``slurm`` runs them on the config's Slurm partition (and
reads the cluster back: a :class:`Reconciler`). A new executor is a module here and one entry in
:data:`EXECUTORS`: a function of the config that builds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from contract.errors import InputError
from gpuplan.app.executors.base import Executor, Reconciler, amendment_lines, commit_lines
from gpuplan.app.executors.jsonl import JsonLinesExecutor
from gpuplan.app.executors.memory import InMemoryExecutor
from gpuplan.app.executors.slurm import SlurmExecutor

if TYPE_CHECKING:
    from gpuplan.app.config import ServiceConfig

__all__ = [
    "EXECUTORS",
    "Executor",
    "InMemoryExecutor",
    "JsonLinesExecutor",
    "Reconciler",
    "SlurmExecutor",
    "amendment_lines",
    "commit_lines",
    "make_executor",
]


def _jsonl(config: ServiceConfig) -> Executor:
    if config.commits_file is None:
        raise InputError("executor", "memory when commits_file is null", "jsonl")
    return JsonLinesExecutor(config.commits_file)


#: Executor name -> how to build it from the service config.
EXECUTORS: dict[str, Callable[[ServiceConfig], Executor]] = {
    "memory": lambda _config: InMemoryExecutor(),
    "jsonl": _jsonl,
    "slurm": SlurmExecutor.from_config,
}


def make_executor(config: ServiceConfig) -> Executor:
    """The executor the config names (by default ``jsonl`` when it has a commits file, else ``memory``)."""
    name = config.executor_name
    if name not in EXECUTORS:
        raise InputError("executor", f"one of {sorted(EXECUTORS)}", name)
    return EXECUTORS[name](config)
