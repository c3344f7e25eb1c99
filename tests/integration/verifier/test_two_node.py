"""Verifier jobs on a two-node Ray cluster on this machine: a head started with
``ray start --head`` and a second node joined with ``ray start --address``, each with its own
temp dir, resources (``node_a``, ``node_b``) and ports; the verifier pool (4 workers, SPREAD)
created on it by a driver process through ``ActorRuntime`` with ``ray_address`` set to the head.
The attempts of the jobs record both nodes.

Why 127.0.0.2 and 127.0.0.3: with a cluster (clusters enabled, as a worker node requires),
Ray replaces a "localhost" address (127.0.0.1, localhost, ::1) in ``--address`` and
``--node-ip-address`` by the machine's external address (``ray._private.services.
resolve_ip_for_localhost``); the rest of 127.0.0.0/8 is loopback too and stays as given, so the
cluster listens on loopback only and each node has an address of its own.

The nodes are stopped by signalling their process groups (each ``ray start`` runs in a session
of its own) and the worker processes their raylets started, never with Ray's CLI (other Ray
instances on this machine belong to other people).
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
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import pytest

from marketplace.actors.runtime import settings_for_actor
from marketplace.indexer.engine import IndexerEngine
from marketplace.storage.repositories import verifier_jobs as repo
from marketplace.verifier.policy import PolicyId
from tests.conftest import Servers
from tests.contracts.helpers import Chain
from tests.integration.verifier.conftest import (
    Devnet,
    indexed_project,
    request_jobs,
    verifier_admin,
    verifier_settings,
    wait_completed,
)
from tests.support.verifier_fixtures import free_port

RAY = str(Path(sys.executable).with_name("ray"))
REPO_ROOT = Path(__file__).resolve().parents[3]
HEAD_IP, SECOND_IP = "127.0.0.2", "127.0.0.3"
START_TIMEOUT_SECONDS = 60
POOL_SIZE = 4
JOBS = 12


def node_ports() -> list[str]:
    # free_port() draws from the kernel's ephemeral range: outside Ray's default worker ports
    # (10002-19999), which the GCS port must not fall into.
    return [
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
    ]


def ray_environment(home: Path) -> dict[str, str]:
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


def cluster_processes(groups: list[int], root: Path) -> set[int]:
    """The nodes' process groups, every process below them (raylets start workers in groups of
    their own) and any process whose command line names the cluster's temp dir (a worker a
    raylet started while its node was stopping)."""
    table = processes()
    found = {
        pid for pid, (_, pgid, command) in table.items() if pgid in groups or str(root) in command
    }
    while True:
        more = {pid for pid, (parent, _, _) in table.items() if parent in found} - found
        if not more:
            return found
        found |= more


@dataclass
class Cluster:
    root: Path
    head_address: str = ""
    groups: list[int] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return self.root / "home"

    def start_node(self, name: str, args: list[str]) -> None:
        temp_dir = self.root / name
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [RAY, "start", f"--temp-dir={temp_dir}", "--disable-usage-stats", *args],
                env=ray_environment(self.home),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own session and group: the node's daemons stay in it after `ray start`
                # returns, so this node (and only it) can be stopped by its group id.
                start_new_session=True,
            )
        self.groups.append(process.pid)
        try:
            code = process.wait(START_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
        if code != 0:
            raise AssertionError(f"ray start ({name}) exited with {code}:\n{log.read_text()}")

    def stop(self) -> None:
        for sig, pause in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 1.0), (signal.SIGKILL, 1.0)):
            for pid in cluster_processes(self.groups, self.root):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + pause
            while time.monotonic() < deadline and cluster_processes(self.groups, self.root):
                time.sleep(0.1)
        left = cluster_processes(self.groups, self.root)
        assert not left, f"Ray processes of the cluster still running: {sorted(left)}"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    # Short paths: Ray puts Unix sockets under its temp dirs (108-byte limit).
    root = Path(tempfile.mkdtemp(prefix="vr2n-", dir="/tmp"))
    nodes = Cluster(root)
    nodes.home.mkdir()
    try:
        port = free_port()
        nodes.head_address = f"{HEAD_IP}:{port}"
        nodes.start_node(
            "head",
            [
                "--head",
                f"--port={port}",
                f"--node-ip-address={HEAD_IP}",
                "--num-cpus=1",
                '--resources={"node_a": 1}',
                "--include-dashboard=false",
                *node_ports(),
            ],
        )
        nodes.start_node(
            "second",
            [
                f"--address={nodes.head_address}",
                f"--node-ip-address={SECOND_IP}",
                "--num-cpus=1",
                '--resources={"node_b": 1}',
                *node_ports(),
            ],
        )
        yield nodes
    finally:
        nodes.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(240)
async def test_verifier_jobs_run_on_both_nodes_of_a_two_node_cluster(
    servers: Servers,
    devnet: Devnet,
    chain: Chain,
    engine: IndexerEngine,
    pool: asyncpg.Pool,
    cluster: Cluster,
) -> None:
    settings = verifier_settings(
        servers,
        devnet,
        f"verifier-two-node-{uuid.uuid4().hex[:8]}",
        ray_address=cluster.head_address,
        verifier_pool_size=POOL_SIZE,
    )
    driver = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.integration.verifier.two_node_driver",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO_ROOT,
        env=ray_environment(cluster.home),
    )
    try:
        out, err = await asyncio.wait_for(
            driver.communicate(json.dumps(settings_for_actor(settings)).encode()), 90
        )
    finally:
        if driver.returncode is None:
            driver.kill()
            await driver.wait()
    assert driver.returncode == 0, err.decode()[-4000:]
    report = json.loads(out.decode().strip().splitlines()[-1])
    nodes = {n["nodeId"]: n for n in report["nodes"]}
    assert len(nodes) == 2
    assert sorted(n["address"] for n in nodes.values()) == [HEAD_IP, SECOND_IP]
    assert sorted(k for n in nodes.values() for k in n["resources"] if k.startswith("node_")) == [
        "node_a",
        "node_b",
    ]
    assert len(report["workers"]) == POOL_SIZE

    project = await indexed_project(chain, engine)
    admin = await verifier_admin(pool)
    # address-smoke of the registry (code: passes) and of an account without code (fails).
    refs = [settings.registry_address if i % 2 else chain.a.stranger for i in range(JOBS)]
    ids = await request_jobs(pool, settings, admin, project, PolicyId.ADDRESS_SMOKE, refs)
    rows = await wait_completed(pool, ids, 120)
    assert [r["passes"] for r in rows] == [bool(i % 2) for i in range(JOBS)]

    ran_on: dict[str, set[str]] = {}
    for row in rows:
        raw = await repo.raw_evidence(pool, row["id"])
        assert raw is not None
        for attempt in raw["raw_evidence"]["attempts"]:
            assert attempt["nodeId"] in nodes
            assert attempt["nodeAddress"] == nodes[attempt["nodeId"]]["address"]
            ran_on.setdefault(attempt["nodeId"], set()).add(attempt["actorName"])
    assert set(ran_on) == set(nodes), f"attempts ran only on {ran_on}"
