"""Verifier jobs on a two-node Ray cluster on this machine: a head started with
``ray start --head`` and a second node joined with ``ray start --address``, each with its own
temp dir, resources (``node_a``, ``node_b``) and ports; the verifier pool (4 workers, SPREAD)
created on it by a driver process through ``ActorRuntime`` with ``ray_address`` set to the head,
with each worker's policy executor. The attempts of the jobs (each judging a dispute of its own)
record both nodes.

The cluster (its addresses, ports and how it is stopped without Ray's CLI) is
``tests.support.ray_cluster``.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from marketplace.actors.options import ACTOR_RESOURCE_UNITS
from marketplace.config import Settings
from marketplace.indexer.engine import IndexerEngine
from marketplace.storage.repositories import verifier_jobs as repo
from marketplace.verifier.policy import PolicyId
from tests.conftest import Servers
from tests.contracts.helpers import Chain
from tests.integration.verifier.conftest import (
    Devnet,
    disputed_projects,
    request_jobs,
    verifier_admin,
    verifier_settings,
    wait_completed,
)
from tests.support.ray_cluster import (
    ACTOR_RESOURCE,
    HEAD_IP,
    REPO_ROOT,
    SECOND_IP,
    Cluster,
    ray_environment,
    two_node_cluster,
)

POOL_SIZE = 4
JOBS = 12


@dataclass
class TwoNode:
    cluster: Cluster
    settings: Settings
    driver: subprocess.Popen[bytes]
    driver_log: Path

    def report(self) -> dict[str, Any]:
        """The driver's report, once it has ended (blocks)."""
        assert self.driver.stdout is not None
        out = self.driver.stdout.read()
        code = self.driver.wait()
        assert code == 0, self.driver_log.read_text(errors="replace")[-4000:]
        result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        return result


@pytest.fixture
def two_node(servers: Servers, devnet: Devnet, pool: asyncpg.Pool) -> Iterator[TwoNode]:
    """The cluster, and the driver started as soon as the head is up (after the pool's state
    reset): it loads Ray and connects while the second node starts, waits for both nodes, then
    starts the verifier pool."""
    # Room for half the pool on each node (MARKETPLACE_RAY_ACTOR_RESOURCE): SPREAD alone is best
    # effort, and under the full suite's load it put all four workers on the head twice in a row.
    slots = ACTOR_RESOURCE_UNITS * POOL_SIZE // 2
    started: list[TwoNode] = []

    def start_driver(nodes: Cluster) -> None:
        settings = verifier_settings(
            servers,
            devnet,
            f"verifier-two-node-{uuid.uuid4().hex[:8]}",
            ray_address=nodes.head_address,
            verifier_pool_size=POOL_SIZE,
            ray_actor_resource=ACTOR_RESOURCE,
        )
        log = nodes.root / "driver.log"
        with log.open("wb") as err:
            driver = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.verifier.two_node_driver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=REPO_ROOT,
                env=ray_environment(nodes.home),
            )
        started.append(TwoNode(nodes, settings, driver, log))
        assert driver.stdin is not None
        driver.stdin.write(pickle.dumps(settings))  # a few kB: the pipe takes it at once
        driver.stdin.close()

    def stop_driver() -> None:
        for run in started:
            if run.driver.poll() is None:
                run.driver.kill()
                run.driver.wait()
            if run.driver.stdout is not None:
                run.driver.stdout.close()

    try:
        with two_node_cluster("vr2n-", actor_slots=slots, head_started=start_driver):
            try:
                yield started[0]
            finally:
                stop_driver()
    finally:
        stop_driver()


@pytest.mark.timeout(240)
async def test_verifier_jobs_run_on_both_nodes_of_a_two_node_cluster(
    chain: Chain,
    engine: IndexerEngine,
    pool: asyncpg.Pool,
    two_node: TwoNode,
) -> None:
    settings = two_node.settings
    # address-smoke of the registry (code: passes) and of an account without code (fails),
    # each judging a dispute of its own (one verdict per dispute). They go on chain while the
    # driver starts the pool; the jobs are queued only once every worker listens (queued
    # earlier, the first workers up could take them all).
    refs = [settings.registry_address if i % 2 else chain.a.stranger for i in range(JOBS)]
    # Its output read from now on (a full pipe would hold it up). Past the timeout the thread
    # stays blocked until the fixture kills the driver.
    reading = asyncio.ensure_future(asyncio.to_thread(two_node.report))
    projects = await disputed_projects(chain, engine, pool, PolicyId.ADDRESS_SMOKE, refs)
    report = await asyncio.wait_for(reading, 90)
    nodes = {n["nodeId"]: n for n in report["nodes"]}
    assert len(nodes) == 2
    assert sorted(n["address"] for n in nodes.values()) == [HEAD_IP, SECOND_IP]
    assert sorted(k for n in nodes.values() for k in n["resources"] if k.startswith("node_")) == [
        "node_a",
        "node_b",
    ]
    assert len(report["workers"]) == POOL_SIZE

    admin = await verifier_admin(pool)
    ids = await request_jobs(pool, settings, admin, projects, PolicyId.ADDRESS_SMOKE, refs)
    rows = await wait_completed(pool, ids, 120)
    assert [r.passes for r in rows] == [bool(i % 2) for i in range(JOBS)]

    ran_on: dict[str, set[str]] = {}
    for row in rows:
        raw = await repo.raw_evidence(pool, row.id)
        assert raw is not None and raw.raw_evidence is not None
        for attempt in raw.raw_evidence["attempts"]:
            assert attempt["nodeId"] in nodes
            assert attempt["nodeAddress"] == nodes[attempt["nodeId"]]["address"]
            node_id, actor_name = attempt["nodeId"], attempt["actorName"]
            assert isinstance(node_id, str) and isinstance(actor_name, str)
            ran_on.setdefault(node_id, set()).add(actor_name)
    assert set(ran_on) == set(nodes), f"attempts ran only on {ran_on}"
