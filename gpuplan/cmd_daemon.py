"""``gpuplan daemon``: its options, checked, handed to daemon.py (the composition root) to run the
service on the head node, or one cycle with ``--once``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path

from contract.errors import InputError
from gpuplan.options import add_at, add_db, at_of, open_db


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` (then 127.0.0.1), the port in [1, 65535]."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError("--http", "HOST:PORT or PORT, the port in [1, 65535]", text)
    return host, int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_db(parser)
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="YAML: cluster, apps, periods (default: demo)"
    )
    parser.add_argument("--once", action="store_true", help="run one plan cycle and exit")
    add_at(parser, "with --once: the cycle's clock")
    parser.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics on this port"
    )
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve the HTTP API and dashboard on HOST:PORT (PORT alone: 127.0.0.1; default off)",
    )
    parser.add_argument("--models", type=Path, help="models folder (default: the config's, ./models)")
    parser.add_argument("--print-commits", action="store_true", help="print each commit as it happens")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="the log on stderr: text lines (default) or JSON lines (time, level, logger, message)",
    )
    parser.add_argument(
        "--demo-speed",
        type=float,
        metavar="N",
        help="the demo cluster (no --config) on a clock N times as fast, e.g. 60: a simulated hour "
        "a minute (without it the live demo runs in real time)",
    )


#: What the daemon logs at INFO without -v: its start and stop, the one line per cycle, the cluster's
#: GPU map (once and on change), the access log.
DEFAULT_INFO = ("gpuplan.daemon", "gpuplan.cycle", "gpuplan.cluster", "gpuplan.http", "uvicorn.access")


class JsonLines(logging.Formatter):
    """One JSON object a record: ``time`` (UTC ISO), ``level``, ``logger``, ``message`` (and
    ``exception`` with its traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


def configure_logging(log_format: str, *, defaults: bool) -> None:
    """The daemon's log: with ``defaults`` (a live daemon without -v), INFO for
    :data:`DEFAULT_INFO` (the rest at WARNING); JSON lines with ``--log-format json``."""
    if defaults:
        for name in DEFAULT_INFO:
            logging.getLogger(name).setLevel(logging.INFO)
    if log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonLines())


def run(args: argparse.Namespace) -> int:
    import daemon

    configure_logging(args.log_format, defaults=not (getattr(args, "verbose", False) or args.once))
    if args.at is not None and not args.once:
        raise InputError("--at", "used with --once (a live daemon runs on the wall clock)", args.at)
    if args.metrics_port is not None and not 1 <= args.metrics_port <= 65535:
        raise InputError("--metrics-port", "a TCP port in [1, 65535]", args.metrics_port)
    if args.demo_speed is not None:
        from gpuplan.app.lab.demo import checked_demo_speed

        if args.config is not None or args.once:
            raise InputError(
                "--demo-speed", "used with the live demo (no --config, no --once)", args.demo_speed
            )
        checked_demo_speed(args.demo_speed)
    http = None if args.http is None else listen_address(args.http)
    if http is not None and args.once:
        raise InputError("--http", "used without --once (it serves while the daemon runs)", args.http)
    start = daemon.Start(
        config_file=args.config,
        models=args.models,
        now=at_of(args),
        once=args.once,
        print_commits=args.print_commits,
        # The live demo runs on the simulated cluster: its jobs end, its traffic arrives.
        demo_speed=(args.demo_speed or 1.0) if args.config is None and not args.once else None,
        metrics_port=args.metrics_port,
        http=http,
    )
    return daemon.main(start, lambda: open_db(args, create=True), sys.stdout, sys.stderr)
