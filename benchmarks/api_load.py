"""The HTTP API under load: concurrent clients submitting jobs and reading the status.

    python -m benchmarks.api_load [--clients 50] [--jobs 1000] [--models models] [--floor]
                                  [--team-status] [--rate SUBMITS_PER_S] [--seed S] [--history N]

A throwaway PostgreSQL server (tests/pg.py, Debian's postgresql package) holds a fresh
database; ``gpuplan daemon --http`` serves it from its own process (the demo cluster: 16
GPUs, two real-time apps, its seeded queue). ``--clients`` clients, each with its own
keep-alive connection (all on one event loop, :class:`_Connection`) and a ``read,submit``
token of its own team, submit ``--jobs`` batch-inference jobs in all (1-4 GPUs, 1-6 hours);
after each submit the client reads ``GET /v1/status`` (the whole queue; with ``--team-status``,
``GET /v1/status?team=`` its own team's).

Checks: every 201's job appears in that client's next status read, and, read back from
the database after the run, every accepted job is stored exactly once and no refused one
at all. Prints the median, p99 and max latency of submits and of status reads (also without
the first round: the first ``--clients`` answers of each), and how the
submits were grouped (one stored submit run per batch) and answered (warm starts), and the
daemon's processor time per submit and its status read, beyond what it spends idle.

By default each client asks again as soon as its read is answered (a closed loop): the
latency is then about the clients over the throughput, whatever the server's own answer takes.
``--rate R`` offers the submits instead (an open loop): each client's submits arrive as a
Poisson process of ``R / clients`` a second (seeded by ``--seed``), and each latency counts
from the moment the submit was due, so a client held up by a slow answer counts its wait (no
coordinated omission).

``--history N``: N finished jobs stored before the load, as a service that has run for months
keeps them (the jobs table holds every job ever submitted).

``--floor``: the same clients against a FastAPI server on uvicorn whose two routes answer
constants (:func:`floor_app`), no database: the part of the latency that is not gpuplan's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.served import free_port, latency_row, start_daemon, wait_for_cycle
from gpuplan.table import format_table
from storage.factory import open_store
from tests.pg import PgServer


@dataclass
class Tally:
    submit_ms: list[float] = field(default_factory=list)
    read_ms: list[float] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    refused: list[tuple[str, int]] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)  # a 201 whose job the next status lacked
    check_seen: bool = True


class _Connection:
    """One keep-alive HTTP/1.1 connection, written and read by hand.

    The load must come from a client lighter than the server it measures: on these two cores,
    fifty threads of a full HTTP client library hold the interpreter's lock long enough to put
    100-300 ms into the p99 of a server that answers in under a millisecond. Fifty of these on
    one event loop add a few milliseconds.
    """

    # uvicorn closes a keep-alive connection idle for 5 s; an open loop's client can be idle longer
    REOPEN_AFTER_IDLE_S = 4.0

    def __init__(self, port: int, head: bytes) -> None:
        self.port, self.head = port, head
        self.writer: asyncio.StreamWriter | None = None
        self.last_used = 0.0

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self.writer is None or time.monotonic() - self.last_used > self.REOPEN_AFTER_IDLE_S:
            self.close()
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            return await self._exchange(method, path, body)
        finally:
            self.last_used = time.monotonic()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    async def _exchange(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        assert self.writer is not None
        lines = f"{method} {path} HTTP/1.1\r\n".encode() + self.head
        if body is not None:
            lines += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        self.writer.write(lines + b"\r\n" + (body or b""))
        status = int((await self.reader.readuntil(b"\r\n")).split(b" ", 2)[1])
        length = 0
        while (line := await self.reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)


async def _client(
    port: int,
    token: str,
    team: str,
    jobs: list[int],
    tally: Tally,
    *,
    status_path: str,
    due: list[float] | None = None,
) -> None:
    """``due``: the moment (``time.perf_counter``) each submit is due, for an open loop; None
    asks again as soon as the last read is answered."""
    head = f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n".encode()
    connection = _Connection(port, head)
    try:
        for k, n in enumerate(jobs):
            job_id = f"{team}-job-{n}"
            spec = {"id": job_id, "kind": "batch_inference", "gpus": (1, 2, 4)[n % 3], "hours": 1 + n % 6}
            spec["priority"] = 10 + n % 80
            if due is None:
                started = time.perf_counter()
            else:
                started = due[k]
                await asyncio.sleep(max(0.0, started - time.perf_counter()))
            code, _ = await connection.request("POST", "/v1/jobs", json.dumps(spec).encode())
            tally.submit_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            _, status = await connection.request("GET", status_path.format(team=team))
            tally.read_ms.append((time.perf_counter() - started) * 1000)
            if code == 201:
                tally.accepted.append(job_id)
                if tally.check_seen and f'"job":"{job_id}"'.encode() not in status:  # compact JSON
                    tally.unseen.append(job_id)
            else:
                tally.refused.append((job_id, code))
    finally:
        connection.close()


async def _load(
    port: int,
    tokens: list[str],
    teams: list[str],
    jobs: int,
    tally: Tally,
    *,
    status_path: str = "/v1/status",
    rate: float | None = None,
    seed: int = 0,
) -> float:
    """Every client's submits and reads, concurrently; the wall time in seconds. ``status_path``:
    the status each client reads (``{team}``: its own team's name); ``rate``: the submits a
    second offered in all (an open loop, :func:`_arrivals`), None for a closed loop."""
    clients = len(teams)
    shares = [list(range(c, jobs, clients)) for c in range(clients)]
    started = time.perf_counter()
    due = [
        None if rate is None else _arrivals(started, len(share), rate / clients, seed * clients + c)
        for c, share in enumerate(shares)
    ]
    await asyncio.gather(
        *(
            _client(port, tokens[c], teams[c], shares[c], tally, status_path=status_path, due=due[c])
            for c in range(clients)
        )
    )
    return time.perf_counter() - started


def _arrivals(start: float, n: int, rate: float, seed: int) -> list[float]:
    """``n`` moments of a Poisson process of ``rate`` a second from ``start``."""
    draw = random.Random(seed)
    moments, at = [], start
    for _ in range(n):
        at += draw.expovariate(rate)
        moments.append(at)
    return moments


IDLE_S = 5.0


def _cpu_s(pid: int) -> float:
    """The processor time (user and system) the process ``pid`` has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measured(pid: int, load: Callable[[], float], tally: Tally) -> tuple[float, float]:
    """``load()``'s wall seconds, and the processor time in ms that the server ``pid`` spent per
    submit and its status read beyond what it spends idle (measured over :data:`IDLE_S` first:
    an open loop at a low rate runs long enough for the idle part to count). The processor
    time bounds the throughput whatever else shares the machine."""
    before = _cpu_s(pid)
    time.sleep(IDLE_S)
    idle_per_s = (_cpu_s(pid) - before) / IDLE_S
    before = _cpu_s(pid)
    wall_s = load()
    busy_s = _cpu_s(pid) - before - idle_per_s * wall_s
    return wall_s, busy_s * 1000 / max(1, len(tally.submit_ms))


def floor_app() -> Any:
    """The two routes the clients call, answering constants (``--floor``): what FastAPI on
    uvicorn, the client and the machine cost before gpuplan does anything."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/v1/jobs", status_code=201)
    async def submit(spec: dict[str, Any]) -> dict[str, Any]:
        return {"job": spec.get("id"), "gpus": spec.get("gpus"), "planned_start": None}

    @app.get("/v1/status")
    async def status() -> dict[str, Any]:
        return {"queue": [], "running": []}

    return app


def _floor(args: argparse.Namespace) -> int:
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "benchmarks.api_load:floor_app", "--factory"]
    command += ["--port", str(port), "--loop", "uvloop", "--http", "httptools", "--log-level", "warning"]
    server = subprocess.Popen(command)
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the floor's server did not start")
            time.sleep(0.1)
        tally = Tally(check_seen=False)
        teams = [f"team{c}" for c in range(args.clients)]
        wall_s, cpu_ms = _measured(
            server.pid,
            lambda: uvloop.run(
                _load(port, ["-"] * args.clients, teams, args.jobs, tally, rate=args.rate, seed=args.seed)
            ),
            tally,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    sys.stdout.write(_summary(args, "a no-op FastAPI server", wall_s, cpu_ms, tally) + "\n")
    return 0 if not tally.refused else 1


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _summary(args: argparse.Namespace, server: str, wall_s: float, cpu_ms: float, tally: Tally) -> str:
    read = "GET /v1/status?team=" if args.team_status else "GET /v1/status"
    rows = [latency_row("POST /v1/jobs", tally.submit_ms), latency_row(read, tally.read_ms)]
    # without the first round (the first as many answers as there are clients): its jobs go
    # into a plan with room, where each insertion searches
    first = args.clients
    rows += [
        latency_row(f"POST, after the first {first}", tally.submit_ms[first:]),
        latency_row(f"GET, after the first {first}", tally.read_ms[first:]),
    ]
    offered = "each asking again once answered" if args.rate is None else f"{args.rate:g} submits/s offered"
    return (
        f"{args.clients} clients ({offered}), {args.jobs} submits on {server} in {wall_s:.1f} s "
        f"({len(tally.submit_ms) / wall_s:.0f} submits/s; the server's processor time beyond its "
        f"idle: {cpu_ms:.2f} ms per submit and its status read)\n"
        + format_table(["request", "calls", "median ms", "p99 ms", "max ms"], rows)
    )


def _store_history(pg: PgServer, database: str, jobs: int) -> None:
    """``jobs`` finished jobs, a month old, written straight into the jobs table."""
    with pg.admin(database) as connection:
        connection.execute(
            "INSERT INTO jobs (id, kind, priority, spec, submitted_at, state, ended_at, outcome) "
            "SELECT 'history-' || n, 'batch_inference', 10, '{}'::json, now() - interval '30 days', "
            "'done', now() - interval '29 days', 'completed' FROM generate_series(1, %s) AS n",
            (jobs,),
        )
        connection.execute("ANALYZE jobs")


def _gpuplan(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "gpuplan", *argv], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"gpuplan {' '.join(argv[:2])} failed: {done.stderr.strip()}")
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--models", type=Path, default=Path("models"))
    parser.add_argument(
        "--floor", action="store_true", help="the same clients against a no-op FastAPI server"
    )
    parser.add_argument(
        "--team-status",
        action="store_true",
        help="each client reads its own team's status (?team=), not the whole queue's",
    )
    parser.add_argument(
        "--rate",
        type=float,
        help="submits a second offered in all, as Poisson arrivals (an open loop); "
        "default: each client asks again once answered",
    )
    parser.add_argument("--seed", type=int, default=0, help="the arrivals' seed (with --rate)")
    parser.add_argument(
        "--history", type=int, default=0, help="finished jobs stored before the load (default 0)"
    )
    args = parser.parse_args(argv)
    if args.rate is not None and args.rate <= 0:
        parser.error(f"--rate: expected a positive number of submits a second, got {args.rate:g}")
    if args.floor:
        return _floor(args)
    pg = PgServer.start()
    try:
        name = pg.create_database()
        db = pg.database_url(name)
        port = free_port()
        _gpuplan("daemon", "--once", "--db", db, "--models", str(args.models))
        if args.history:
            _store_history(pg, name, args.history)
        teams = [f"team{c}" for c in range(args.clients)]
        tokens = [
            _gpuplan("token", "create", "--team", t, "--scopes", "read,submit", "--db", db).strip()
            for t in teams
        ]
        with tempfile.TemporaryDirectory() as folder:
            log_path = Path(folder) / "daemon.log"
            daemon = start_daemon(db, args.models, port, log_path)
            try:
                base = f"http://127.0.0.1:{port}"
                wait_for_cycle(base, daemon, log_path)
                began = datetime.now(UTC)
                tally = Tally()
                status_path = "/v1/status?team={team}" if args.team_status else "/v1/status"
                wall_s, cpu_ms = _measured(
                    daemon.pid,
                    lambda: uvloop.run(
                        _load(
                            port,
                            tokens,
                            teams,
                            args.jobs,
                            tally,
                            status_path=status_path,
                            rate=args.rate,
                            seed=args.seed,
                        )
                    ),
                    tally,
                )
            finally:
                daemon.terminate()
                daemon.wait(timeout=60)
        store = open_store(db)
        try:
            stored = Counter(job.id for job in store.jobs() if job.team in set(teams))
            # one submit run per batch: how the submits were grouped, and how many were warm starts
            batches = [r for r in store.runs(mode="submit", limit=100_000) if r.created_at >= began]
        finally:
            store.close()
    finally:
        pg.stop()
    twice = [job for job, n in stored.items() if n > 1]
    missing = [job for job in tally.accepted if job not in stored]
    extra = [job for job in stored if job not in set(tally.accepted)]
    sys.stdout.write(
        _summary(args, "gpuplan's daemon, PostgreSQL", wall_s, cpu_ms, tally) + "\n"
        f"201: {len(tally.accepted)}; refused: {len(tally.refused)} {Counter(c for _, c in tally.refused)}; "
        f"stored once: {len(stored) - len(twice)}, twice or more: {len(twice)}, accepted but missing: "
        f"{len(missing)}, stored but not accepted: {len(extra)}; 201 not in the next status: "
        f"{len(tally.unseen)}\n"
        f"batches (submit runs): {len(batches)}, "
        f"{len(tally.accepted) / max(1, len(batches)):.1f} submits each; "
        f"warm starts: {sum('warm_from' in r.extra for r in batches)}\n"
    )
    return 0 if not (twice or missing or extra or tally.unseen or tally.refused) else 1


if __name__ == "__main__":
    raise SystemExit(main())
