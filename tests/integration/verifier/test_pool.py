"""The verifier pool as real Ray actors: ``MARKETPLACE_VERIFIER_POOL_SIZE`` job worker actors of
the ``verifier`` queue (each with its paired policy executor actor, as the API's startup creates
them), each running one job at a time, recording where each attempt ran; a worker killed mid-job
leaves the job to be retried, and it completes (and attests) once.

The jobs are ``screenshot-ref`` checks of a local HTTP server that takes seconds to answer, so
jobs overlap and a worker can be killed while one runs (private hosts are allowed for it).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import asyncpg
import pytest
import ray

from marketplace.actors.job_worker import JobWorkers, worker_name
from marketplace.actors.runtime import ActorRuntime
from marketplace.actors.verifier_executor import executor_spec
from marketplace.config import Settings
from marketplace.errors import ServiceUnavailable
from marketplace.indexer.engine import IndexerEngine
from marketplace.jobs import JobRegistry
from marketplace.storage.repositories import verifier_jobs as repo
from marketplace.verifier.execution import VERIFIER_QUEUE
from marketplace.verifier.policy import PolicyId, PolicySettings
from tests.conftest import Servers, kill_namespace_actors
from tests.contracts.helpers import Chain
from tests.integration.verifier.conftest import (
    Devnet,
    SlowImages,
    dispute_jobs,
    disputed_projects,
    request_jobs,
    verifier_admin,
    verifier_settings,
    wait_completed,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.usefixtures("ray_cluster")


@pytest.fixture
def namespace() -> Iterator[str]:
    """A Ray namespace of this test's own: named actors keep the settings they were created
    with, so no test inherits another's workers."""
    name = f"verifier-pool-{uuid.uuid4().hex[:8]}"
    yield name
    kill_namespace_actors(name)


def pool_settings(servers: Servers, devnet: Devnet, namespace: str, **extra: Any) -> Settings:
    return verifier_settings(
        servers,
        devnet,
        namespace,
        verifier_pool_size=2,
        verifier_allow_private_hosts=True,
        **extra,
    )


async def start_pool(settings: Settings, servers: Servers, size: int) -> JobWorkers:
    runtime = ActorRuntime(settings, database_url=servers.database_url)
    runtime.connect()
    # Each worker's policy executor (same index), given only the policy settings, as the API's
    # startup creates them (marketplace/http/routes/verifier.py, policy_executors).
    policy_settings = PolicySettings.from_settings(settings)
    for index in range(size):
        runtime.handle(
            executor_spec(index, settings.verifier_executor_resource), policy_settings, index
        )
    workers = JobWorkers(runtime, JobRegistry([VERIFIER_QUEUE]))
    assert workers.start() == size

    async def listening() -> bool:
        try:
            states = await workers.status_all()
        except ServiceUnavailable:
            return False  # a new actor process takes seconds on a busy host
        return len(states) == size and all(s.listening for s in states)

    await eventually(listening, within=60, what=f"{size} verifier workers listening", interval=0.2)
    return workers


async def attempts_of(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[dict[str, Any]]:
    raw = await repo.raw_evidence(pool, job_id)
    assert raw is not None and raw.raw_evidence is not None
    return list(raw.raw_evidence["attempts"])


def cluster_node_ids() -> set[str]:
    return {node["NodeID"] for node in ray.nodes() if node["Alive"]}


async def test_two_workers_run_two_jobs_at_once_each_one_at_a_time(
    servers: Servers,
    devnet: Devnet,
    chain: Chain,
    engine: IndexerEngine,
    pool: asyncpg.Pool,
    namespace: str,
    slow_images: SlowImages,
) -> None:
    settings = pool_settings(servers, devnet, namespace)
    admin = await verifier_admin(pool)
    await start_pool(settings, servers, 2)

    names = [f"shot-{i}" for i in range(4)]
    # One job per dispute: a disputed project per image.
    ids = await dispute_jobs(
        pool,
        settings,
        admin,
        chain,
        engine,
        PolicyId.SCREENSHOT_REF,
        [slow_images.ref(n) for n in names],
    )
    rows = await wait_completed(pool, ids, 90)
    assert all(r.passes for r in rows)
    assert all(r.attempt_count == 1 for r in rows)
    # Two requests were answered at once, never more: two actors, one job each.
    assert slow_images.most == 2
    assert sorted(n for n, _ in slow_images.arrivals) == names

    pool_names = {worker_name("verifier", i) for i in range(2)}
    nodes = cluster_node_ids()
    runs: dict[str, list[tuple[datetime, datetime]]] = {}
    for row in rows:
        (attempt,) = await attempts_of(pool, row.id)
        assert attempt["attempt"] == 1
        assert attempt["actorName"] in pool_names
        assert attempt["nodeId"] in nodes
        assert attempt["actorId"]
        started = datetime.fromisoformat(attempt["startedAt"])
        assert row.completed_at is not None
        runs.setdefault(attempt["actorName"], []).append((started, row.completed_at))
        raw = await repo.raw_evidence(pool, row.id)
        assert raw is not None and raw.raw_evidence is not None
        assert raw.raw_evidence["result"]["actorName"] == attempt["actorName"]
    assert set(runs) == pool_names, "both actors of the pool ran jobs"
    for actor, spans in runs.items():
        spans.sort()
        for (_, finished), (next_start, _) in itertools.pairwise(spans):
            assert next_start >= finished, f"{actor} ran two jobs at once"


async def test_a_worker_killed_mid_job_leaves_it_retried_and_completed_once(
    servers: Servers,
    devnet: Devnet,
    chain: Chain,
    engine: IndexerEngine,
    pool: asyncpg.Pool,
    namespace: str,
    slow_images: SlowImages,
) -> None:
    slow_images.delay = 5.0
    settings = pool_settings(servers, devnet, namespace, jobs_lease_seconds=2)
    refs = [slow_images.ref("victim")]
    (project,) = await disputed_projects(chain, engine, pool, PolicyId.SCREENSHOT_REF, refs)
    admin = await verifier_admin(pool)
    await start_pool(settings, servers, 2)

    (job_id,) = await request_jobs(pool, settings, admin, [project], PolicyId.SCREENSHOT_REF, refs)

    async def fetching() -> bool:
        return slow_images.arrived("victim") == 1

    await eventually(fetching, within=30, what="the first attempt fetching the image", interval=0.1)
    queue_job = await pool.fetchrow(
        "SELECT j.id, j.lease_owner FROM jobs j JOIN verifier_jobs v ON v.job_id = j.id"
        " WHERE v.id = $1",
        job_id,
    )
    assert queue_job is not None and queue_job["lease_owner"]
    victim_name = queue_job["lease_owner"].split(":", 1)[0]
    victim = ray.get_actor(victim_name, namespace=namespace)
    assert (await victim.status.remote()).active == (queue_job["id"],)
    ray.kill(victim, no_restart=False)
    # The killed attempt's request stays in its 5 s; the retry's need not be slow.
    slow_images.delay = 0.2

    (row,) = await wait_completed(pool, [job_id], 60)
    assert row.status == "completed"
    assert row.attempt_count == 2
    assert row.passes is True
    assert row.attestation is not None
    assert row.attestation["evidenceHash"] == row.evidence_hash
    jobs = await pool.fetch(
        "SELECT status, attempt_count FROM jobs WHERE queue = $1", VERIFIER_QUEUE.name
    )
    assert [(j["status"], j["attempt_count"]) for j in jobs] == [("completed", 2)]
    assert await pool.fetchval("SELECT count(*) FROM verifier_jobs") == 1
    # The retry fetched again; the killed attempt never completed anything.
    assert slow_images.arrived("victim") == 2
    attempts = await attempts_of(pool, job_id)
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["actorName"] == victim_name
    assert all(a["nodeId"] in cluster_node_ids() for a in attempts)
    raw = await repo.raw_evidence(pool, job_id)
    assert raw is not None and raw.raw_evidence is not None
    assert raw.raw_evidence["result"]["attempt"] == 2
    milestone = await pool.fetchrow(
        "SELECT latest_verifier_job_id, latest_verifier_passes FROM milestones"
        " WHERE project_address = $1 AND milestone_index = 0",
        project,
    )
    assert milestone is not None
    assert (milestone["latest_verifier_job_id"], milestone["latest_verifier_passes"]) == (
        job_id,
        True,
    )
