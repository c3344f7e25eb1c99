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
import sys
import uuid
from collections.abc import Iterator

import asyncpg
import pytest

from marketplace.actors.options import ACTOR_RESOURCE_UNITS
from marketplace.indexer.engine import IndexerEngine
from marketplace.storage.repositories import verifier_jobs as repo
from marketplace.verifier.policy import PolicyId
from tests.conftest import Servers
from tests.contracts.helpers import Chain
from tests.integration.verifier.conftest import (
    Devnet,
    dispute_jobs,
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


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    # Room for half the pool on each node (MARKETPLACE_RAY_ACTOR_RESOURCE): SPREAD alone is best
    # effort, and under the full suite's load it put all four workers on the head twice in a row.
    slots = ACTOR_RESOURCE_UNITS * POOL_SIZE // 2
    with two_node_cluster("vr2n-", actor_slots=slots) as nodes:
        yield nodes


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
        ray_actor_resource=ACTOR_RESOURCE,
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
        out, err = await asyncio.wait_for(driver.communicate(pickle.dumps(settings)), 90)
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

    admin = await verifier_admin(pool)
    # address-smoke of the registry (code: passes) and of an account without code (fails),
    # each judging a dispute of its own (one verdict per dispute).
    refs = [settings.registry_address if i % 2 else chain.a.stranger for i in range(JOBS)]
    ids = await dispute_jobs(pool, settings, admin, chain, engine, PolicyId.ADDRESS_SMOKE, refs)
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
