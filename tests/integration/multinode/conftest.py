"""A deployment spread over two Ray nodes on this machine: the cluster of
``tests.support.ray_cluster`` (head ``node_a`` on 127.0.0.2, a second node ``node_b`` on
127.0.0.3), the suite's PostgreSQL and Redis, an anvil devnet with the reference contracts, and
two ``marketplace serve`` frontends in processes of their own on different ports, both joined to
the cluster through ``MARKETPLACE_RAY_ADDRESS``.

The frontends are real subprocesses (``python -m marketplace serve``), as an operator runs them:
the test talks to them over HTTP only, and reads actor placement through a driver of its own
(``placement_driver``), since the test process may already belong to the suite's own Ray runtime.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import DEV_VERIFIER_PRIVATE_KEY, Deployment
from tests.conftest import JWT_SECRET, SCHEDULER_SECRET, UNSUBSCRIBE_SECRET, Servers, reset_state
from tests.integration.multinode.placement_driver import PREFIX
from tests.support.chain import start_devnet
from tests.support.ray_cluster import REPO_ROOT, Cluster, ray_environment, two_node_cluster
from tests.support.verifier_fixtures import free_port
from tests.support.waiting import eventually

PROJECT_SHARDS = 4
USER_SHARDS = 4
VERIFIER_WORKERS = 4
FRONTEND_START_SECONDS = 90.0
# Ray notices a lost node by its failed health checks: every 500 ms, 3 in a row (the defaults,
# 3 s and 5, take about 15 s). A raylet starts at most `num_cpus` worker processes at a time
# (1 here), so the actors of a lost node would come back one after the other; 4 at a time.
# Set on both nodes; docs/operations.md.
CLUSTER_TUNING = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
    "RAY_worker_maximum_startup_concurrency": "4",
}


@dataclass(frozen=True)
class Devnet:
    process: AnvilProcess
    deployment: Deployment


@dataclass
class Frontend:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


@dataclass
class Placement:
    """The placement driver: one JSON snapshot of nodes and named actors per request. It starts
    as soon as the head is up, before any event loop of the tests: its pipes are read in a
    thread."""

    process: subprocess.Popen[bytes]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def answer(self) -> dict[str, Any]:
        return await asyncio.wait_for(asyncio.to_thread(read_answer, self.process), 60)

    async def snapshot(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        async with self.lock:
            self.process.stdin.write(b"?\n")
            self.process.stdin.flush()
            return await self.answer()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def read_answer(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The placement driver's next answer, past whatever else Ray printed."""
    assert process.stdout is not None
    while True:
        line = process.stdout.readline().decode()
        assert line, "the placement driver ended"
        if line.startswith(PREFIX):
            result: dict[str, Any] = json.loads(line.removeprefix(PREFIX))
            return result


@dataclass
class Booted:
    cluster: Cluster
    placement: Placement


@dataclass
class Deployed:
    cluster: Cluster
    devnet: Devnet
    frontends: list[Frontend]
    placement: Placement
    namespace: str


def frontend_environment(
    cluster: Cluster, servers: Servers, devnet: Devnet, namespace: str, port: int
) -> dict[str, str]:
    env = ray_environment(cluster.home)
    env.update(
        MARKETPLACE_HOST="127.0.0.1",
        MARKETPLACE_PORT=str(port),
        MARKETPLACE_DATA_DIR=str(cluster.root / f"frontend-{port}"),
        MARKETPLACE_DATABASE_URL=servers.database_url,
        MARKETPLACE_REDIS_URL=servers.redis_url,
        MARKETPLACE_RAY_ADDRESS=cluster.head_address,
        MARKETPLACE_RAY_NAMESPACE=namespace,
        # Both nodes advertise it (as a deployment's worker nodes do): actors need it.
        MARKETPLACE_RAY_ACTOR_RESOURCE="marketplace_actors",
        MARKETPLACE_JWT_SECRET=JWT_SECRET,
        MARKETPLACE_SCHEDULER_SECRET=SCHEDULER_SECRET,
        MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET=UNSUBSCRIBE_SECRET,
        MARKETPLACE_PROJECT_SHARDS=str(PROJECT_SHARDS),
        MARKETPLACE_USER_SHARDS=str(USER_SHARDS),
        MARKETPLACE_RATE_LIMIT_ENABLED="false",
        MARKETPLACE_LOG_JSON="false",
        MARKETPLACE_LOG_LEVEL="WARNING",
        MARKETPLACE_NOTIFICATION_PIPELINE_ENABLED="false",
        MARKETPLACE_LEADERBOARD_CONSUMER_ENABLED="false",
        MARKETPLACE_CHAIN_RPC_URL=devnet.process.rpc_url,
        MARKETPLACE_CHAIN_ID=str(devnet.deployment.chain_id),
        MARKETPLACE_REGISTRY_ADDRESS=devnet.deployment.registry,
        MARKETPLACE_CHAIN_START_BLOCK=str(devnet.deployment.start_block),
        MARKETPLACE_INDEXER_ENABLED="true",
        MARKETPLACE_VERIFIER_PRIVATE_KEY=DEV_VERIFIER_PRIVATE_KEY,
        MARKETPLACE_VERIFIER_POOL_SIZE=str(VERIFIER_WORKERS),
        MARKETPLACE_JOBS_WORKERS=json.dumps({"notifications": 0}),
        MARKETPLACE_JOBS_POLL_INTERVAL_MS="200",
        MARKETPLACE_JOBS_BACKOFF_BASE_SECONDS="0.05",
        MARKETPLACE_JOBS_BACKOFF_CAP_SECONDS="0.5",
        # A job whose worker died with its node is claimed again once its lease lapses.
        MARKETPLACE_JOBS_LEASE_SECONDS="4",
        MARKETPLACE_ACTOR_CALL_TIMEOUT_SECONDS="5",
        # Offenders keep sending (each offense is a write on their user shard).
        MARKETPLACE_MODERATION_SUSPEND_AFTER="100000",
    )
    return env


def start_frontend(name: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "marketplace", "serve", "--skip-migrations"],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_frontends(frontends: list[Frontend]) -> None:
    """SIGTERM to every frontend at once (they stop side by side), then SIGKILL to any still
    running after 15 s."""
    running = [f for f in frontends if f.process.poll() is None]
    for frontend in running:
        os.killpg(frontend.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for frontend in running:
        try:
            frontend.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(frontend.process.pid, signal.SIGKILL)
            frontend.process.wait(5)


async def wait_ready(frontend: Frontend, limit_s: float) -> None:
    async with aiohttp.ClientSession() as session:

        async def ready() -> bool:
            assert frontend.process.poll() is None, f"{frontend.name} exited:\n{frontend.tail()}"
            async with session.get(
                f"{frontend.url}/v1/health/ready", timeout=aiohttp.ClientTimeout(total=10)
            ) as resp:
                return resp.status == 200

        await eventually(
            ready,
            within=limit_s,
            interval=0.3,
            what=lambda: f"{frontend.name} to be ready:\n{frontend.tail()}",
            retry_on=(aiohttp.ClientError, TimeoutError),
        )


@pytest.fixture(scope="module")
def multinode_devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devnet]:
    with start_devnet(tmp_path_factory.mktemp("multinode-anvil"), silent=True) as (
        process,
        deployment,
    ):
        yield Devnet(process, deployment)


@pytest.fixture(scope="module")
def multinode_cluster() -> Iterator[Booted]:
    """The cluster, and its placement driver, started once the head is up: it loads Ray and
    connects while the second node starts (it says it is ready once SPREAD reaches both)."""
    started: list[Placement] = []

    def start_placement(nodes: Cluster) -> None:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.multinode.placement_driver",
                nodes.head_address,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=REPO_ROOT,
            env=ray_environment(nodes.home),
        )
        started.append(Placement(process))

    try:
        with two_node_cluster(
            "mn-", extra_env=CLUSTER_TUNING, head_started=start_placement
        ) as nodes:
            try:
                yield Booted(nodes, started[0])
            finally:
                for placement in started:
                    placement.stop()
    finally:
        for placement in started:
            placement.stop()


@pytest.fixture(scope="module")
async def deployed(
    servers: Servers, multinode_devnet: Devnet, multinode_cluster: Booted
) -> AsyncIterator[Deployed]:
    await reset_state(servers)
    namespace = f"multinode-{uuid.uuid4().hex[:8]}"
    frontends: list[Frontend] = []
    cluster, placement = multinode_cluster.cluster, multinode_cluster.placement
    try:
        assert await placement.answer() == {"ready": True}
        for name in ("a", "b"):
            # Distinct even if frontend a has not bound its port yet.
            port = free_port()
            while any(f.port == port for f in frontends):
                port = free_port()
            log = cluster.root / f"frontend-{name}.log"
            env = frontend_environment(cluster, servers, multinode_devnet, namespace, port)
            frontends.append(Frontend(name, port, start_frontend(name, env, log), log))
        await asyncio.gather(*(wait_ready(f, FRONTEND_START_SECONDS) for f in frontends))
        yield Deployed(cluster, multinode_devnet, frontends, placement, namespace)
    finally:
        stop_frontends(frontends)
