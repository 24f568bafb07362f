"""The executors, side by side: where a commit goes.

``memory`` keeps the commits (tests, the simulation); ``jsonl`` appends them to the
database's feed (the config's ``commits_file``, by default one beside the database: see
:func:`default_feed`); ``slurm`` runs them on the config's Slurm partition (and reads the
cluster back: a :class:`Reconciler`). The registry the config picks one from by name is
:mod:`gpuplan.app.adapters.executors.registry`; this package's ``__init__`` imports no adapter with
use cases behind it, so importing the port (:mod:`.base`) never runs the Slurm adapter.
"""

from __future__ import annotations

from gpuplan.app.adapters.executors.jsonl import JsonLinesExecutor, default_feed
from gpuplan.app.adapters.executors.memory import InMemoryExecutor
from gpuplan.app.core.ports import Executor, Reconciler, amendment_lines, commit_lines

__all__ = [
    "Executor",
    "InMemoryExecutor",
    "JsonLinesExecutor",
    "Reconciler",
    "amendment_lines",
    "commit_lines",
    "default_feed",
]
