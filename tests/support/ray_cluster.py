"""A multi-node Ray cluster on this machine, for the tests that need more than one node: a head
started with ``ray start --head`` and further nodes joined with ``ray start --address``, each
with its own temp dir, custom resource (``node_a``, ``node_b``...) and ports.

Why 127.0.0.2 and 127.0.0.3: with a cluster (clusters enabled, as a worker node requires), Ray
replaces a "localhost" address (127.0.0.1, localhost, ::1) in ``--address`` and
``--node-ip-address`` by the machine's external address (``ray._private.services.
resolve_ip_for_localhost``), and the second node then loops on "Failed to connect to GCS"; the
rest of 127.0.0.0/8 is loopback too and stays as given, so the cluster listens on loopback only
and each node has an address of its own.

Nodes are stopped by signalling their process groups (each ``ray start`` runs in a session of
its own) and the processes below them or naming their temp dir (raylets start workers in groups
of their own), never with Ray's CLI: other Ray instances on this machine belong to other people.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import ray

from tests.support.verifier_fixtures import free_port

RAY = str(Path(sys.executable).with_name("ray"))
REPO_ROOT = Path(__file__).resolve().parents[2]
HEAD_IP, SECOND_IP = "127.0.0.2", "127.0.0.3"
START_TIMEOUT_SECONDS = 60


def node_ports(taken: set[int]) -> list[str]:
    """Ports for one node's components, distinct from each other and from ``taken`` (which they
    join): free_port() closes its probe socket, so two calls can return the same port (seen:
    node manager and dashboard agent both given 57777, and `ray start` refused to start).

    free_port() draws from the kernel's ephemeral range: outside Ray's default worker ports
    (10002-19999), which the GCS port must not fall into."""
    ports: list[int] = []
    while len(ports) < 6:
        port = free_port()
        if port not in taken:
            taken.add(port)
            ports.append(port)
    options = (
        "node-manager-port",
        "object-manager-port",
        "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port",
        "metrics-export-port",
        "runtime-env-agent-port",
    )
    return [f"--{option}={port}" for option, port in zip(options, ports, strict=True)]


def ray_environment(home: Path) -> dict[str, str]:
    """The environment of the nodes and of every process that joins them (drivers, frontends)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        HOME=str(home),
        RAY_USAGE_STATS_ENABLED="0",
        # A local dev cluster on loopback: no token (the suite's runtime has none either).
        RAY_AUTH_MODE="disabled",
        PYTHONPATH=str(REPO_ROOT),
    )
    return env


def processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, command line) of every process."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] == "Z":
                    continue  # already dead, waiting for its parent
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found[int(entry.name)] = (int(fields[1]), int(fields[2]), command)
    return found


def processes_of(groups: list[int], marker: str) -> set[int]:
    """The process groups, every process below them and any process whose command line names
    ``marker`` (a node's temp dir: a worker a raylet started while its node was stopping)."""
    table = processes()
    found = {
        pid for pid, (_, pgid, command) in table.items() if pgid in groups or marker in command
    }
    while True:
        more = {pid for pid, (parent, _, _) in table.items() if parent in found} - found
        if not more:
            return found
        found |= more


def terminate(groups: list[int], marker: str) -> None:
    """TERM, then KILL, the processes of :func:`processes_of`; fails if any is left. (The GCS,
    the raylets and their agents were still there 3 s after the TERM: a longer pause only
    delays the KILL.)"""
    for sig, pause in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 1.0), (signal.SIGKILL, 1.0)):
        for pid in processes_of(groups, marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + pause
        while time.monotonic() < deadline and processes_of(groups, marker):
            time.sleep(0.1)
    left = processes_of(groups, marker)
    assert not left, f"Ray processes still running: {sorted(left)}"


def kill_now(groups: list[int], marker: str) -> int:
    """SIGKILL the processes of :func:`processes_of` at once (a machine that dies: nothing gets
    to say goodbye); how many were signalled."""
    found = processes_of(groups, marker)
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(found)


# The custom resource the nodes advertise for MARKETPLACE_RAY_ACTOR_RESOURCE.
ACTOR_RESOURCE = "marketplace_actors"


@ray.remote(num_cpus=0)
def _node_of_task() -> str:
    return str(ray.get_runtime_context().get_node_id())


async def spread_reaches(nodes: int, limit_s: float, *, consecutive: int = 3) -> None:
    """For a driver connected to the cluster: wait until SPREAD places tasks on ``nodes``
    nodes, ``consecutive`` probes in a row. Ray lists a node as alive some time before SPREAD
    places anything there: the 4 verifier workers of test_two_node.py, created right after the
    second node joined, all landed on the head in 2 of 3 runs without this wait, and once in a
    loaded full-suite run after a single successful probe."""
    deadline = time.monotonic() + limit_s
    reached = 0
    while reached < consecutive:
        refs = [
            _node_of_task.options(scheduling_strategy="SPREAD").remote() for _ in range(2 * nodes)
        ]
        reached = reached + 1 if len(set(await asyncio.gather(*refs))) >= nodes else 0
        if time.monotonic() > deadline:
            raise SystemExit(f"SPREAD did not reach {nodes} nodes within {limit_s} s")
        await asyncio.sleep(0.5)


@dataclass
class Cluster:
    root: Path
    head_address: str = ""
    # Node name -> the process group of its `ray start` (the node's daemons stay in it).
    groups: dict[str, int] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.root / "home"

    def temp_dir(self, name: str) -> Path:
        return self.root / name

    def start_node(
        self, name: str, args: list[str], extra_env: dict[str, str] | None = None
    ) -> None:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    RAY,
                    "start",
                    f"--temp-dir={self.temp_dir(name)}",
                    "--disable-usage-stats",
                    *args,
                ],
                env={**ray_environment(self.home), **(extra_env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own session and group: the node's daemons stay in it after `ray start`
                # returns, so this node (and only it) can be stopped by its group id.
                start_new_session=True,
            )
        self.groups[name] = process.pid
        try:
            code = process.wait(START_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
        if code != 0:
            raise AssertionError(f"ray start ({name}) exited with {code}:\n{log.read_text()}")

    def kill_node(self, name: str) -> int:
        """SIGKILL every process of node ``name`` (its daemons, its workers): the node is lost
        as when its machine dies. The number of processes signalled."""
        return kill_now([self.groups[name]], f"{self.temp_dir(name)}/")

    def stop(self) -> None:
        terminate(list(self.groups.values()), str(self.root))


@contextlib.contextmanager
def two_node_cluster(
    prefix: str,
    *,
    head_cpus: int = 1,
    second_cpus: int = 1,
    extra_env: dict[str, str] | None = None,
    actor_slots: int = 1000,
    head_started: Callable[[Cluster], object] | None = None,
) -> Iterator[Cluster]:
    """A head (``node_a``, on 127.0.0.2) and a second node (``node_b``, on 127.0.0.3); stopped
    and removed when the block ends. ``extra_env``: more environment of both nodes (Ray reads
    its ``RAY_<setting>`` overrides from there). Both advertise ``actor_slots`` of the actor
    resource ``marketplace_actors`` (an actor takes one when ``MARKETPLACE_RAY_ACTOR_RESOURCE``
    names it): the most actors each node may host. ``head_started``: called once the head is
    up, before the second node starts (a driver can connect meanwhile)."""
    head_resources = json.dumps({"node_a": 1, ACTOR_RESOURCE: actor_slots})
    second_resources = json.dumps({"node_b": 1, ACTOR_RESOURCE: actor_slots})
    # Short paths: Ray puts Unix sockets under its temp dirs (108-byte limit).
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    nodes = Cluster(root)
    nodes.home.mkdir()
    try:
        port = free_port()
        taken = {port}
        nodes.head_address = f"{HEAD_IP}:{port}"
        nodes.start_node(
            "head",
            [
                "--head",
                f"--port={port}",
                f"--node-ip-address={HEAD_IP}",
                f"--num-cpus={head_cpus}",
                f"--resources={head_resources}",
                "--include-dashboard=false",
                *node_ports(taken),
            ],
            extra_env,
        )
        if head_started is not None:
            head_started(nodes)
        nodes.start_node(
            "second",
            [
                f"--address={nodes.head_address}",
                f"--node-ip-address={SECOND_IP}",
                f"--num-cpus={second_cpus}",
                f"--resources={second_resources}",
                *node_ports(taken),
            ],
            extra_env,
        )
        yield nodes
    finally:
        nodes.stop()
        shutil.rmtree(root, ignore_errors=True)
