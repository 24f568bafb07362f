"""The ``gpuplan`` command line.

Each subcommand lives in its own ``cmd_*`` module with ``add_arguments(parser)``
and ``run(args) -> int``; this file only wires them. Those modules import heavy
libraries inside ``run`` so that every command starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from contract.errors import InputError, StoreError
from contract.files import describe_os_error
from gpuplan.app.core.slurm_settings import SlurmError
from gpuplan.options import FIELD_FLAGS

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("gpuplan.cmd_plan", "plan a scenario with one policy (or compare several)"),
    "validate": ("gpuplan.cmd_validate", "check a plan file against a scenario"),
    "demo": ("gpuplan.cmd_demo", "plan the bundled scenario with every policy and compare"),
    "bench": (
        "gpuplan.cmd_bench",
        "the seven benchmark scenarios: FIFO vs fast vs full, and a scaling sweep",
    ),
    "train": ("gpuplan.cmd_train", "retrain the job and real-time demand forecasters"),
    "forecast": ("gpuplan.cmd_forecast", "forecast one job's needs or a real-time app's demand"),
    "backtest": ("gpuplan.cmd_backtest", "day-ahead backtest of the real-time demand profile"),
    "daemon": ("gpuplan.cmd_daemon", "run the service: plan every 30 minutes, commit the current hour"),
    "submit": ("gpuplan.cmd_submit", "queue a job and answer with its planned start"),
    "done": ("gpuplan.cmd_done", "report a job finished"),
    "status": ("gpuplan.cmd_status", "what runs now, the queue, the last plan run"),
    "ingest": ("gpuplan.cmd_ingest", "store an app's hourly traffic (the daemon recalibrates on it)"),
    "export": ("gpuplan.cmd_export", "write a stored run as scenario.json and plan.json"),
    "prune": ("gpuplan.cmd_prune", "delete plan runs older than N days (commits and history stay)"),
    "simulate": (
        "gpuplan.cmd_simulate",
        "a simulated week of the daemon's cycle against FIFO, priority-backfill and commit-all",
    ),
    "token": ("gpuplan.cmd_token", "API tokens: create (printed once), list, revoke"),
    "init": (
        "gpuplan.cmd_init",
        "write a commented config and create the database (a head node's first step)",
    ),
    "doctor": ("gpuplan.cmd_doctor", "check the config, database, models, executor, Prometheus and clock"),
    "db": ("gpuplan.cmd_db", "the database: schema version, upgrade, backup and restore"),
    "report": (
        "gpuplan.cmd_report",
        "reports from the stored plans: idle windows, coverage risk, utilization, commits",
    ),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported (all of them when None)."""
    # The docstring's first line, without its reStructuredText quoting.
    parser = argparse.ArgumentParser(prog="gpuplan", description=__doc__.splitlines()[0].replace("``", ""))
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    parser.add_argument("--version", action="version", version=f"gpuplan {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if command in (None, name):
            module = importlib.import_module(module_name)
            module.add_arguments(command_parser)
            command_parser.set_defaults(run=module.run)
            _verbose_after(command_parser)
    return parser


def _verbose_after(parser: argparse.ArgumentParser) -> None:
    """``-v`` after the command too (``gpuplan status -v``, ``gpuplan report commits -v``): on
    the command's parser and each of its subcommands'. Not given there, it leaves the value
    before the command as it is."""
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log progress to stderr"
    )
    for action in parser._actions:  # argparse keeps its subcommands' parsers here only
        if isinstance(action, argparse._SubParsersAction):
            for subcommand in action.choices.values():
                _verbose_after(subcommand)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuplan")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


#: The exit code of a command stopped by Ctrl-C: the shell's 128 + SIGINT.
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in arguments if not a.startswith("-")), None)
    name = f"gpuplan {chosen}" if chosen in COMMANDS else "gpuplan"
    try:
        return _run(arguments, chosen, name)
    except KeyboardInterrupt:
        # Ctrl-C is the user's choice, not a bug: one line, no traceback. Every file is
        # written all-or-nothing and every database change in one transaction, so nothing
        # is left half-written.
        print(f"{name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader closed our stdout (`gpuplan report ... | head -1`): it has what it wanted.
        _silence_stdout()
        return 0


def _run(arguments: list[str], chosen: str | None, name: str) -> int:
    parser = build_parser(chosen if chosen in COMMANDS else None)
    args = parser.parse_args(arguments)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # Bad input and file-system failures are the user's to fix: one line, exit 2. Anything
    # else is a bug in gpuplan and keeps its traceback, so that it is seen and fixed.
    # A use case's error names its own field; the command shows the flag that carried it.
    command_module = sys.modules[args.run.__module__]
    flags = FIELD_FLAGS | getattr(command_module, "FLAGS", {})
    try:
        code: int = args.run(args)
        sys.stdout.flush()  # a closed stdout shows here, while the answer above still applies
    except BrokenPipeError:
        raise
    except InputError as error:
        print(f"{name}: error: {error.renamed(flags)}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"{name}: error: {describe_os_error(error)}", file=sys.stderr)
        return 2
    except (StoreError, SlurmError) as error:  # the database or Slurm is unreachable or refused: exit 1
        print(f"{name}: error: {error}", file=sys.stderr)
        return 1
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush finds no broken pipe."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's buffer)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)
