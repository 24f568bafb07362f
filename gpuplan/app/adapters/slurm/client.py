"""A thin, typed client of Slurm's commands: what gpuplan asks of ``slurmctld``, and nothing more.

Every call runs one Slurm command with a time limit and ``TZ=UTC`` (so that ``sacct``'s
times read as UTC) and answers in frozen values. A call that fails, times out or answers
what cannot be read raises :class:`SlurmError`, which names the command and carries
Slurm's own message.

What is read from where (Slurm 22.05):

- jobs: ``squeue --json`` (its ``gres_detail`` is ``scontrol show job -d``'s per-node
  ``GRES=gpu:g3:1(IDX:3)``; ``scontrol`` has no JSON output in 22.05, and JSON keeps a
  comment with spaces in one piece);
- nodes: ``sinfo --json`` (state and flags, features, GRES);
- reservations: ``scontrol show reservation --oneliner`` (no JSON in 22.05);
- completions: ``sacct -c``, which reads the ``jobcomp/filetxt`` log (accounting through
  ``slurmdbd`` is not required).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuplan.app.core.slurm_settings import SlurmError, SlurmSettings

#: Slurm's job states gpuplan tells apart (``squeue``'s ``job_state``, ``sacct``'s ``State``).
PENDING, RUNNING = "PENDING", "RUNNING"
COMPLETED, FAILED, CANCELLED, TIMEOUT = "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"
#: States after which a job holds no GPU again.
FINISHED = frozenset(
    {
        COMPLETED,
        FAILED,
        CANCELLED,
        TIMEOUT,
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
    }
)
#: Node states (``sinfo``'s state or one of its flags) in which a node takes no new work.
#: NOT_RESPONDING is not one: a resumed node shows it until its next ping, and slurmctld
#: marks a node that stays silent DOWN after ``SlurmdTimeout``.
UNAVAILABLE = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "INVAL"})
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})
_IDX = re.compile(r"\(IDX:([^)]*)\)")
_ONELINER_KEY = re.compile(r"(?:^|\s)(?=[A-Za-z][\w/:]*=)")


# -- values --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job runs: GPU indices on one node (typed GRES ``gpu:gN:1`` each), or whole nodes;
    in a cluster of pools, in its pool's ``partition`` with ``--constraint=constraint``."""

    nodes: tuple[str, ...]
    gpus: tuple[int, ...] = ()  # indices on ``nodes[0]``; empty: every GPU of every node
    gpus_per_node: int = 0  # for whole nodes
    partition: str | None = None  # None: the request's own
    constraint: str | None = None  # a node feature (the pool's model on a shared partition)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("a placement needs at least one node")
        if self.gpus and len(self.nodes) != 1:
            raise ValueError(f"exact GPUs are asked on one node; got nodes {self.nodes}")
        if not self.gpus and self.gpus_per_node < 1:
            raise ValueError("a whole-node placement needs gpus_per_node >= 1")

    @property
    def whole_nodes(self) -> bool:
        return not self.gpus

    def gres(self) -> str:
        """The ``--gres`` request: ``gpu:g3:1,gpu:g5:1``, or ``gpu:G`` per whole node."""
        if self.whole_nodes:
            return f"gpu:{self.gpus_per_node}"
        return ",".join(f"gpu:g{index}:1" for index in self.gpus)


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """One ``sbatch``: a command (``--wrap``) or a script file, named and commented."""

    name: str
    partition: str
    command: str | None = None
    script: Path | None = None
    comment: str = ""
    hold: bool = True
    placement: Placement | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_minutes: int | None = None
    output: str = "/dev/null"
    workdir: Path | None = None

    def __post_init__(self) -> None:
        if (self.command is None) == (self.script is None):
            raise ValueError("a batch request needs exactly one of a command and a script")

    def arguments(self) -> list[str]:
        partition = (self.placement.partition if self.placement else None) or self.partition
        args = ["--parsable", f"--job-name={self.name}", f"--partition={partition}"]
        args.append(f"--output={self.output}")
        if self.hold:
            args.append("--hold")
        if self.comment:
            args.append(f"--comment={self.comment}")
        if self.account:
            args.append(f"--account={self.account}")
        if self.qos:
            args.append(f"--qos={self.qos}")
        if self.time_limit_minutes is not None:
            args.append(f"--time={self.time_limit_minutes}")
        if self.workdir is not None:
            args.append(f"--chdir={self.workdir}")
        if self.placement is not None:
            args += placement_arguments(self.placement)
        if self.command is not None:
            return [*args, f"--wrap={self.command}"]
        return [*args, str(self.script)]


def placement_arguments(placement: Placement) -> list[str]:
    """``sbatch``'s options for a placement."""
    args = [f"--nodelist={','.join(placement.nodes)}", f"--nodes={len(placement.nodes)}"]
    args.append(f"--gres={placement.gres()}")
    if placement.constraint:
        args.append(f"--constraint={placement.constraint}")
    if placement.whole_nodes:
        args.append("--exclusive")
    return args


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job as ``squeue`` shows it. ``gpus``: node -> GPU indices (IDX) it holds there."""

    id: int
    name: str
    state: str
    reason: str
    partition: str
    user: str
    comment: str
    nodes: tuple[str, ...]
    gpus: Mapping[str, tuple[int, ...]]
    start: datetime | None
    end: datetime | None
    time_limit_minutes: int | None
    exclusive: bool
    requested_gres: str = ""
    eligible: datetime | None = None  # when it could first start (its release, for a held job)

    @property
    def held(self) -> bool:
        return self.state == PENDING and self.reason in HELD_REASONS

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    state: str  # the base state, upper case: IDLE, MIXED, ALLOCATED, DOWN, ...
    flags: tuple[str, ...]  # DRAIN, MAINTENANCE, RESERVED, NOT_RESPONDING, ...
    features: tuple[str, ...]
    gres: Mapping[str, int]  # GRES type (g0, g1, ... or a model name) -> count
    partitions: tuple[str, ...]
    reason: str = ""

    @property
    def gpus(self) -> int:
        return sum(self.gres.values())

    @property
    def unavailable(self) -> bool:
        return self.state in UNAVAILABLE or any(flag in UNAVAILABLE for flag in self.flags)


@dataclass(frozen=True, slots=True)
class Reservation:
    name: str
    start: datetime
    end: datetime
    nodes: tuple[str, ...]
    flags: tuple[str, ...]

    @property
    def maintenance(self) -> bool:
        return "MAINT" in self.flags


@dataclass(frozen=True, slots=True)
class Completion:
    """A finished job from the ``jobcomp/filetxt`` log (``sacct -c``)."""

    id: int
    name: str
    state: str
    exit_code: str
    start: datetime | None
    end: datetime | None
    nodes: tuple[str, ...]
    partition: str


# -- the client ----------------------------------------------------------------------------------


@dataclass
class SlurmClient:
    """Runs Slurm's commands from ``settings.bin_dir`` (or ``PATH``) against ``settings.slurm_conf``."""

    settings: SlurmSettings
    calls: int = field(default=0, init=False)  # commands run, for the cycle's log line
    failed: int = field(default=0, init=False)  # commands that failed (the metrics read it)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ, TZ="UTC")
        if self.settings.slurm_conf is not None:
            env["SLURM_CONF"] = str(self.settings.slurm_conf)
        return env

    def run(self, program: str, *args: str) -> str:
        """Run one Slurm command; its standard output, or :class:`SlurmError`."""
        binary = str(self.settings.bin_dir / program) if self.settings.bin_dir else program
        command = [binary, *args]
        self.calls += 1
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=self.settings.timeout_s,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            self.failed += 1
            raise SlurmError(command, f"no answer within {self.settings.timeout_s:g} s") from error
        except OSError as error:
            self.failed += 1
            raise SlurmError(command, str(error)) from error
        if done.returncode != 0:
            self.failed += 1
            raise SlurmError(command, done.stderr or done.stdout, done.returncode)
        return done.stdout

    # -- jobs ---------------------------------------------------------------------------
    def submit(self, request: BatchRequest) -> int:
        """``sbatch`` (held unless the request says otherwise); the new job's id."""
        args = request.arguments()
        out = self.run("sbatch", *args).strip()
        head = out.split(";", 1)[0]
        if not head.isdigit():
            raise SlurmError(["sbatch", *args], f"answered {out!r}, not a job id")
        return int(head)

    def place(self, job_id: int, placement: Placement) -> None:
        """Change a pending job's request to ``placement`` (``scontrol update``)."""
        fields = [
            f"jobid={job_id}",
            f"NumNodes={len(placement.nodes)}",
            f"ReqNodeList={','.join(placement.nodes)}",
            f"TresPerNode=gres:{placement.gres().replace(',', ',gres:')}",
        ]
        if placement.partition:
            fields.append(f"Partition={placement.partition}")
        if placement.constraint:
            fields.append(f"Features={placement.constraint}")
        if placement.whole_nodes:
            fields.append("OverSubscribe=no")
        self.run("scontrol", "update", *fields)

    def release(self, job_id: int) -> None:
        """Release a held job (Slurm answers 0 for a job already released or running)."""
        self.run("scontrol", "release", str(job_id))

    def hold(self, job_id: int) -> None:
        """Hold a pending job again (``scontrol hold``)."""
        self.run("scontrol", "hold", str(job_id))

    def update(self, job_id: int, **fields: str) -> None:
        """``scontrol update jobid=ID KEY=VALUE ...`` on a pending job."""
        self.run("scontrol", "update", f"jobid={job_id}", *(f"{k}={v}" for k, v in fields.items()))

    def cancel(self, *job_ids: int) -> None:
        """``scancel`` (Slurm answers 0 for jobs already finished or unknown)."""
        if job_ids:
            self.run("scancel", *map(str, job_ids))

    def jobs(self, partition: str | None = None) -> list[SlurmJob]:
        """Every job ``slurmctld`` still knows (finished ones for ``MinJobAge``), by id; of
        ``partition`` (partitions joined by commas: of any of them, a job pending on several too)."""
        args = ["--json"] + ([f"--partition={partition}"] if partition else [])
        document = self._json("squeue", *args)
        jobs = [_job(raw) for raw in document.get("jobs", [])]
        wanted = set(_words(partition))
        found = (j for j in jobs if not wanted or wanted & set(_words(j.partition)))
        return sorted(found, key=lambda j: j.id)

    def job(self, job_id: int) -> SlurmJob | None:
        """One job, or None once ``slurmctld`` has forgotten it."""
        return next((j for j in self.jobs() if j.id == job_id), None)

    # -- nodes and reservations ---------------------------------------------------------
    def nodes(self, partition: str | None = None) -> list[SlurmNode]:
        """Nodes (of ``partition``; partitions joined by commas: of any of them), in name order."""
        document = self._json("sinfo", "--json")
        found: dict[str, SlurmNode] = {}
        wanted = set(_words(partition))
        for raw in document.get("nodes", []):
            node = _node(raw)
            if not wanted or wanted & set(node.partitions):
                found[node.name] = node
        return [found[name] for name in sorted(found, key=node_sort_key)]

    def reservations(self) -> list[Reservation]:
        out = self.run("scontrol", "show", "reservation", "--oneliner")
        reservations = []
        for line in out.splitlines():
            if not line.startswith("ReservationName="):
                continue  # "No reservations in the system"
            fields = parse_oneliner(line)
            start, end = _time(fields.get("StartTime")), _time(fields.get("EndTime"))
            if start is None or end is None:
                continue
            reservations.append(
                Reservation(
                    name=fields["ReservationName"],
                    start=start,
                    end=end,
                    nodes=expand_hostlist(fields.get("Nodes", "")),
                    flags=tuple(f for f in fields.get("Flags", "").split(",") if f),
                )
            )
        return reservations

    # -- completions --------------------------------------------------------------------
    def completions(self, since: datetime | None = None) -> list[Completion]:
        """Jobs that ended (at or after ``since``), from the ``jobcomp/filetxt`` log."""
        columns = "JobID,JobName,State,ExitCode,Start,End,NodeList,Partition"
        args = ["-c", "--parsable2", "--noheader", f"--format={columns}"]
        if since is not None:
            # sacct refuses a start after its end (now): the plan's clock may run ahead of Slurm's.
            since = min(since, datetime.now(UTC))
            args.append(f"--starttime={since.astimezone(UTC):%Y-%m-%dT%H:%M:%S}")
        out = self.run("sacct", *args)
        completions = []
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) != 8 or not parts[0].isdigit():
                continue
            job_id, name, state, exit_code, start, end, nodes, partition = parts
            completions.append(
                Completion(
                    id=int(job_id),
                    name=name,
                    state=state.split()[0] if state else "",  # "CANCELLED by 0"
                    exit_code=exit_code,
                    start=_time(start),
                    end=_time(end),
                    nodes=expand_hostlist(nodes),
                    partition=partition,
                )
            )
        return completions

    def _json(self, program: str, *args: str) -> dict[str, Any]:
        out = self.run(program, *args)
        try:
            document = json.loads(out)
        except json.JSONDecodeError as error:
            raise SlurmError([program, *args], f"answered what is not JSON ({error})") from error
        errors = document.get("errors") or []
        if errors:
            raise SlurmError([program, *args], "; ".join(str(e.get("error", e)) for e in errors))
        if not isinstance(document, dict):
            raise SlurmError([program, *args], "answered JSON that is not an object")
        return document


# -- reading Slurm's answers ---------------------------------------------------------------------


def _epoch(value: object) -> datetime | None:
    if isinstance(value, int | float) and value > 0:
        return datetime.fromtimestamp(value, UTC)
    return None


def _time(text: str | None) -> datetime | None:
    """A Slurm time (``2026-12-01T09:08:06``, UTC under ``TZ=UTC``); None for Unknown/None."""
    if not text or not text[0].isdigit():
        return None
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    except ValueError:
        return None


def _job(raw: Mapping[str, Any]) -> SlurmJob:
    nodes = expand_hostlist(str(raw.get("nodes") or ""))
    details = list(raw.get("gres_detail") or [])
    gpus = {node: gres_indices(detail) for node, detail in zip(nodes, details, strict=False)}
    limit = raw.get("time_limit")
    return SlurmJob(
        id=int(raw["job_id"]),
        name=str(raw.get("name") or ""),
        state=str(raw.get("job_state") or ""),
        reason=str(raw.get("state_reason") or ""),
        partition=str(raw.get("partition") or ""),
        user=str(raw.get("user_name") or ""),
        comment=str(raw.get("comment") or ""),
        nodes=nodes,
        gpus={node: idx for node, idx in gpus.items() if idx},
        start=_epoch(raw.get("start_time")),
        end=_epoch(raw.get("end_time")),
        time_limit_minutes=int(limit) if isinstance(limit, int) else None,
        exclusive=str(raw.get("shared") or "").lower() == "none",
        requested_gres=str(raw.get("tres_per_node") or ""),
        eligible=_epoch(raw.get("eligible_time")),
    )


def _node(raw: Mapping[str, Any]) -> SlurmNode:
    gres: dict[str, int] = {}
    for item in str(raw.get("gres") or "").split(","):
        # gpu:g3:1, gpu:h100:8, gpu:8, each maybe followed by (S:0-1)
        parts = item.split("(", 1)[0].split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        kind, count = (parts[1], parts[2]) if len(parts) >= 3 else ("", parts[1])
        if count.isdigit():
            gres[kind] = gres.get(kind, 0) + int(count)
    return SlurmNode(
        name=str(raw["name"]),
        state=str(raw.get("state") or "").upper(),
        flags=tuple(str(f).upper() for f in raw.get("state_flags") or []),
        features=tuple(
            f for f in str(raw.get("active_features") or raw.get("features") or "").split(",") if f
        ),
        gres=gres,
        partitions=tuple(str(p) for p in raw.get("partitions") or []),
        reason=str(raw.get("reason") or ""),
    )


def _words(value: object) -> tuple[str, ...]:
    return tuple(word for word in str(value or "").split(",") if word)


def gres_indices(detail: str) -> tuple[int, ...]:
    """The GPU indices in one node's GRES detail: ``gpu:g3:1(IDX:3),gpu:g5:1(IDX:5)`` -> (3, 5)."""
    found: set[int] = set()
    for group in _IDX.findall(detail):
        if group != "N/A":
            found.update(expand_ranges(group))
    return tuple(sorted(found))


def expand_ranges(text: str) -> list[int]:
    """``0-2,5`` -> [0, 1, 2, 5]."""
    values: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            values.extend(range(int(low), int(high or low) + 1))
    return values


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Slurm's host list: ``node[0-2,05],gpu7`` -> node0, node1, node2, node05, gpu7."""
    names: list[str] = []
    for item in _split_top(text.strip()):
        names.extend(_expand_item(item))
    return tuple(names)


def _split_top(text: str) -> Iterable[str]:
    depth, start = 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            if text[start:i]:
                yield text[start:i]
            start = i + 1
    if text[start:]:
        yield text[start:]


def _expand_item(item: str) -> list[str]:
    open_at = item.find("[")
    if open_at < 0:
        return [item]
    close_at = item.index("]", open_at)
    prefix, ranges, rest = item[:open_at], item[open_at + 1 : close_at], item[close_at + 1 :]
    names: list[str] = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        width = len(low)
        for value in range(int(low), int(high or low) + 1):
            names.extend(f"{prefix}{value:0{width}d}{tail}" for tail in _expand_item(rest))
    return names


def node_sort_key(name: str) -> tuple[str, int, str]:
    """Name order with numbers read as numbers: node2 before node10."""
    match = re.match(r"^(.*?)(\d+)(\D*)$", name)
    if match is None:
        return (name, -1, "")
    return (match.group(1), int(match.group(2)), match.group(3))


def parse_oneliner(line: str) -> dict[str, str]:
    """``scontrol show ... --oneliner``'s ``Key=value Key=value`` into a dict."""
    fields: dict[str, str] = {}
    for token in _ONELINER_KEY.split(line.strip()):
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value.strip()
    return fields
