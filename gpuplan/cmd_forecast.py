"""``gpuplan forecast {job,realtime}``: one sub-subcommand per forecaster."""

from __future__ import annotations

import argparse
import importlib

TARGETS: dict[str, tuple[str, str]] = {
    "job": ("gpuplan.cmd_forecast_job", "predict a batch job's GPUs and hours (P50, P90)"),
    "realtime": ("gpuplan.cmd_forecast_realtime", "forecast a real-time app's hourly demand"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="target", required=True, metavar="TARGET")
    for name, (module_name, help_text) in TARGETS.items():
        module = importlib.import_module(module_name)
        target_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(target_parser)
        target_parser.set_defaults(run=module.run)


def run(args: argparse.Namespace) -> int:  # pragma: no cover - argparse dispatches to the target
    raise AssertionError(f"no runner bound for forecast target {args.target!r}")
