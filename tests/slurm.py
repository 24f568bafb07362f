"""A throwaway Slurm cluster on localhost for the tests: munged, slurmctld and one slurmd per node.

``SlurmServer.start()`` writes a fresh folder with its own munge key and socket, a
``slurm.conf`` on free loopback ports, ``gres.conf`` and fake GPUs (character devices made
with ``mknod PATH c 195 N``, which Slurm needs to set ``CUDA_VISIBLE_DEVICES``), then starts
the daemons, each in its own session with its output in the folder, and waits until every
node is idle. Each GPU is its own typed GRES (``gpu:g0:1,...,gpu:g7:1``), so that a job can
ask for exact GPUs; the node's feature names the GPU model. Several ``slurmd`` run on one
host as ``slurmd -N NAME``, each node with its own ``Port=``. ``stop()`` ends them by PID.

A cluster of two models (``models=("a100", "h100")``, one model per node) has both ways a
mixed cluster is laid out in Slurm at once: partition ``main`` holds every node, each with
its model as its feature, and partition ``gpu-MODEL`` holds the nodes of each model.
The configuration is the one measured in ``docs/slurm.md``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuplan.app.core.slurm_settings import SlurmSettings

PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo", "sacct")
MISSING = (
    "Slurm or munge is missing ({missing} not found). The Slurm tests run a real cluster: run "
    "`make test`, which installs Debian's `slurmctld slurmd slurm-client munge` "
    "(or `apt-get install -y slurmctld slurmd slurm-client munge` yourself)."
)
PARTITION = "main"
NODE_LINE = (
    "NodeName={name} NodeAddr=127.0.0.1 NodeHostname={host} Port={port} CPUs=16 Boards=1 "
    "SocketsPerBoard=1 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=16000 Gres={gres} "
    "Feature={model} State=UNKNOWN"
)
CONF = """\
ClusterName=gpuplan-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket.2
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=300
MailProg=/bin/true
SchedulerParameters=batch_sched_delay=0
{extra}
EnforcePartLimits=ALL
SlurmdParameters=config_overrides
{nodes}
PartitionName={partition} Nodes={node_names} Default=YES MaxTime=7-00:00:00 State=UP
{partitions}"""
MODEL_PARTITION = "PartitionName=gpu-{model} Nodes={node_names} MaxTime=7-00:00:00 State=UP\n"


def missing_programs() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_ports(count: int) -> list[int]:
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [p.getsockname()[1] for p in probes]
    finally:
        for probe in probes:
            probe.close()


@dataclass
class SlurmServer:
    """A running cluster: ``nodes`` of ``gpus_per_node`` fake GPUs each, in partition ``main``;
    node ``nodes[k]``'s model (its feature) is ``models[k]``."""

    root: Path
    nodes: tuple[str, ...]
    gpus_per_node: int
    models: tuple[str, ...]
    extra: str = ""  # more slurm.conf lines
    controller: subprocess.Popen[bytes] | None = None
    slurmds: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        *,
        nodes: int = 2,
        gpus_per_node: int = 8,
        model: str = "h100",
        extra: str = "",
        models: tuple[str, ...] | None = None,
    ) -> SlurmServer:
        """``models``: one model per node (``nodes`` is then its length); default ``model`` on each."""
        missing = missing_programs()
        if missing:
            pytest.fail(MISSING.format(missing=", ".join(missing)), pytrace=False)
        if os.geteuid() != 0:
            pytest.fail("The Slurm fixture runs slurmd as root (it starts jobs as any user).", pytrace=False)
        root = Path(tempfile.mkdtemp(prefix="gpuplan-slurm-"))
        root.chmod(0o755)  # munged checks every folder above its socket
        per_node = models or (model,) * nodes
        server = cls(root, tuple(f"node{k}" for k in range(len(per_node))), gpus_per_node, per_node, extra)
        try:
            server._write_config()
            server._start_munge()
            server.start_controller()
            for name in server.nodes:
                server.start_node(name)
            server.wait_idle()
        except BaseException:
            log = server.logs()
            server.stop()
            pytest.fail(f"the Slurm fixture did not start:\n{log}", pytrace=False)
        return server

    @property
    def model(self) -> str:
        """The first node's model (a cluster of one model: its model)."""
        return self.models[0]

    def nodes_of(self, model: str) -> tuple[str, ...]:
        return tuple(n for n, m in zip(self.nodes, self.models, strict=True) if m == model)

    # -- paths and the environment ---------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ, SLURM_CONF=str(self.conf), TZ="UTC")

    def settings(self, **overrides: object) -> SlurmSettings:
        """Client settings for this cluster's partition (short time limits: it answers in ms)."""
        values: dict[str, object] = {"partition": PARTITION, "slurm_conf": self.conf, "timeout_s": 20.0}
        values.update(overrides)
        return SlurmSettings(**values)  # type: ignore[arg-type]

    def run(self, *command: str, check: bool = True) -> str:
        """A Slurm command against this cluster; its standard output."""
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=30, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def logs(self) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            if path.is_file():
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    # -- set-up --------------------------------------------------------------------------------
    def _write_config(self) -> None:
        for sub in ("munge", "state", "spool", "run", "log", "dev"):
            (self.root / sub).mkdir(mode=0o755)
        for name in self.nodes:
            (self.root / "spool" / name).mkdir()
        host = socket.gethostname()
        ctld_port, *node_ports = _free_ports(1 + len(self.nodes))
        gres = ",".join(f"gpu:g{n}:1" for n in range(self.gpus_per_node))
        lines = [
            NODE_LINE.format(name=name, host=host, port=port, gres=gres, model=model)
            for name, port, model in zip(self.nodes, node_ports, self.models, strict=True)
        ]
        distinct = list(dict.fromkeys(self.models))
        partitions = "".join(
            MODEL_PARTITION.format(model=m, node_names=",".join(self.nodes_of(m)))
            for m in (distinct if len(distinct) > 1 else [])
        )
        self.conf.write_text(
            CONF.format(
                host=host,
                ctld_port=ctld_port,
                slurmd_port=node_ports[0],
                root=self.root,
                nodes="\n".join(lines),
                partition=PARTITION,
                node_names=",".join(self.nodes),
                extra=self.extra,
                partitions=partitions,
            )
        )
        for n in range(self.gpus_per_node):
            # Character devices (major 195, as NVIDIA's): with plain files Slurm leaves
            # CUDA_VISIBLE_DEVICES empty.
            os.mknod(self.root / "dev" / f"nvidia{n}", 0o666 | 0o020000, os.makedev(195, n))
        (self.root / "gres.conf").write_text(
            "".join(
                f"NodeName={name} Name=gpu Type=g{n} File={self.root}/dev/nvidia{n}\n"
                for name in self.nodes
                for n in range(self.gpus_per_node)
            )
        )

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        subprocess.run(
            [_program("mungekey"), "-c", "-k", str(munge / "munge.key")], check=True, capture_output=True
        )
        subprocess.run(
            [
                _program("munged"),
                f"--key-file={munge / 'munge.key'}",
                f"--socket={munge / 'munge.socket.2'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
            check=True,
            capture_output=True,
        )  # munged forks into the background and writes its PID file before it answers

    def _spawn(self, name: str, *command: str) -> subprocess.Popen[bytes]:
        out = (self.root / "log" / f"{name}.out").open("ab")
        try:
            return subprocess.Popen(
                command,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        finally:
            out.close()

    def start_controller(self) -> None:
        self.controller = self._spawn("slurmctld", _program("slurmctld"), "-D", "-i")
        self._wait_for(lambda: self.run("scontrol", "ping", check=False).count("UP") > 0, "slurmctld")

    def start_node(self, name: str) -> None:
        self.slurmds[name] = self._spawn(f"slurmd-{name}", _program("slurmd"), "-D", "-N", name)

    def stop_controller(self) -> None:
        if self.controller is not None:
            _end(self.controller)
            self.controller = None

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        """Until every node answers IDLE (ReturnToService brings a restarted node back)."""

        def idle() -> bool:
            words = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).split()
            states = dict(zip(words[::2], words[1::2], strict=False))  # a node once per partition
            return len(states) == len(self.nodes) and all(s == "idle" for s in states.values())

        self._wait_for(idle, "idle nodes", timeout_s)

    def _wait_for(self, ready: object, what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready within {timeout_s:g} s")
            time.sleep(0.1)

    # -- between tests -------------------------------------------------------------------------
    def reset(self) -> None:
        """Cancel every job, delete every reservation, resume every node with its configured
        feature; wait until all is idle."""
        self.run("scancel", "--user=root", "--full", check=False)
        for line in self.run("scontrol", "show", "reservation", "--oneliner", check=False).splitlines():
            if line.startswith("ReservationName="):
                name = line.split()[0].partition("=")[2]
                self.run("scontrol", "delete", f"ReservationName={name}", check=False)
        for name, model in zip(self.nodes, self.models, strict=True):
            self.run("scontrol", "update", f"NodeName={name}", "State=RESUME", check=False)
            features = (f"AvailableFeatures={model}", f"ActiveFeatures={model}")
            self.run("scontrol", "update", f"NodeName={name}", *features, check=False)
        self.wait_idle()

    def stop(self) -> None:
        for process in [*self.slurmds.values(), self.controller]:
            if process is not None:
                _end(process)
        self.slurmds.clear()
        self.controller = None
        pid_file = self.root / "munge" / "munged.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            for _ in range(50):
                os.kill(pid, 0)
                time.sleep(0.05)
        shutil.rmtree(self.root, ignore_errors=True)


def _end(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM by PID, then SIGKILL (a slurmd still retrying its registration may need it)."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout_s)


def pausing_bin(folder: Path) -> Path:
    """A bin folder of Slurm's commands for fault tests: each one is the real command, except
    that ``scontrol release`` waits while ``folder/pause`` exists (and touches
    ``folder/paused`` first), so that a test can kill a daemon between its commit and its
    release. Returns the bin folder (``slurm.bin_dir``)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("sbatch", "scontrol", "squeue", "sinfo", "sacct", "scancel"):
        real = shutil.which(name) or f"/usr/bin/{name}"
        hold = (
            f'if [ "$1" = release ] && [ -e "{folder}/pause" ]; then\n'
            f'  touch "{folder}/paused"\n'
            f'  while [ -e "{folder}/pause" ]; do sleep 0.05; done\n'
            "fi\n"
            if name == "scontrol"
            else ""
        )
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\n{hold}exec {real} "$@"\n')
        script.chmod(0o755)
    return bin_dir
