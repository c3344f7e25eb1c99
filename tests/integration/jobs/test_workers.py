"""Job worker actors on a real Ray runtime: several workers never run one job twice, a worker
killed with SIGKILL mid-job loses nothing, and the frontend exports the queue's metrics."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
import ray

from marketplace.actors.job_worker import JobWorkers, worker_name
from marketplace.actors.runtime import ActorRuntime
from marketplace.config import Settings
from marketplace.errors import ServiceUnavailable
from marketplace.http import keys
from marketplace.jobs import JobRegistry, QueueSpec, enqueue
from tests.conftest import Servers, make_settings
from tests.integration.jobs.handlers import Script, scripted
from tests.support.waiting import eventually

pytestmark = pytest.mark.usefixtures("ray_cluster")


def job_settings(servers: Servers, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "jobs_workers_per_queue": 3,
        "jobs_concurrency": 4,
        "jobs_lease_seconds": 2,
        "jobs_poll_interval_ms": 500,
        "jobs_backoff_base_seconds": 0.05,
        "jobs_backoff_cap_seconds": 0.2,
        "jobs_metrics_cache_seconds": 0,
    }
    values.update(overrides)
    return make_settings(servers, **values)


@pytest.fixture
def queue() -> Iterator[str]:
    """A queue (and so worker actor names) of this test's own: named actors keep the settings
    they were created with, so no test inherits another's workers."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    yield name
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["name"].startswith(f"job-worker-{name}-"):
            ray.kill(ray.get_actor(entry["name"], namespace=entry["namespace"]), no_restart=True)


def spec_of(queue: str) -> QueueSpec[Script]:
    return QueueSpec(queue, Script, scripted)


def start_workers(settings: Settings, servers: Servers, queue: str) -> JobWorkers:
    runtime = ActorRuntime(settings, database_url=servers.database_url)
    runtime.connect()
    workers = JobWorkers(runtime, JobRegistry([spec_of(queue)]))
    workers.start()
    return workers


async def all_listening(workers: JobWorkers, count: int) -> bool:
    try:
        states = await workers.status_all()
    except ServiceUnavailable:
        return False  # still starting: a new actor process takes a few seconds on a busy host
    return len(states) == count and all(s.listening for s in states)


async def test_concurrent_workers_run_each_job_exactly_once(
    pool: asyncpg.Pool, servers: Servers, queue: str
) -> None:
    # A lease far longer than any stall of a loaded test machine: this test is about workers
    # that hold their leases.
    workers = start_workers(job_settings(servers, jobs_lease_seconds=30), servers, queue)
    await eventually(lambda: all_listening(workers, 3), within=60, what="three workers listening")
    names = {e["name"] for e in ray.util.list_named_actors(all_namespaces=True)}
    assert {worker_name(queue, i) for i in range(3)} <= names

    async with pool.acquire() as conn, conn.transaction():
        ids = [
            (await enqueue(conn, spec_of(queue), Script(sleep_on=True, sleep=0.01))).job_id
            for _ in range(200)
        ]

    async def all_done() -> bool:
        done = await pool.fetchval(
            "SELECT count(*) FROM jobs WHERE queue = $1 AND status = 'completed'", queue
        )
        return bool(done == 200)

    await eventually(all_done, within=90, what="200 jobs completed")
    assert await pool.fetchval("SELECT count(*) FROM job_test_effects") == 200
    runs = await pool.fetch(
        "SELECT job_id, count(*) AS runs FROM job_test_executions GROUP BY job_id"
    )
    assert {r["job_id"] for r in runs} == set(ids)
    assert all(r["runs"] == 1 for r in runs), "a job ran twice"
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM jobs WHERE queue = $1 AND attempt_count <> 1", queue
        )
        == 0
    )
    # The three actors shared the work (each is its own process).
    pids = await pool.fetch("SELECT DISTINCT pid FROM job_test_executions")
    assert len(pids) == 3
    states = await workers.status_all()
    assert sum(s.counts.get("completed", 0) for s in states) == 200
    assert all(s.counts.get("completed", 0) > 0 for s in states)


async def test_a_worker_killed_mid_job_leaves_it_to_be_retried_and_completed_once(
    pool: asyncpg.Pool, servers: Servers, queue: str
) -> None:
    workers = start_workers(job_settings(servers, jobs_workers_per_queue=2), servers, queue)
    await eventually(lambda: all_listening(workers, 2), within=60, what="two workers listening")
    job_id = (await enqueue(pool, spec_of(queue), Script(sleep_on=[1], sleep=60))).job_id

    async def started() -> bool:
        return bool(
            await pool.fetchval(
                "SELECT count(*) FROM job_test_executions WHERE job_id = $1", job_id
            )
        )

    await eventually(started, within=20, what="first attempt started")
    first = await pool.fetchrow(
        "SELECT lease_owner, lease_expires_at FROM jobs WHERE id = $1", job_id
    )
    assert first is not None
    victim_name = first["lease_owner"].split(":", 1)[0]
    victim = ray.get_actor(victim_name, namespace="marketplace-test")
    victim_state = await victim.status.remote()
    assert victim_state.owner == first["lease_owner"]
    assert victim_state.active == (job_id,)
    os.kill(victim_state.pid, signal.SIGKILL)

    async def completed() -> bool:
        return await pool.fetchval("SELECT status FROM jobs WHERE id = $1", job_id) == "completed"

    await eventually(completed, within=60, what="job completed after the kill")
    row = await pool.fetchrow("SELECT attempt_count, last_error FROM jobs WHERE id = $1", job_id)
    assert row["attempt_count"] == 2
    effects = await pool.fetch("SELECT attempt, owner FROM job_test_effects")
    assert [(e["attempt"]) for e in effects] == [2]
    assert effects[0]["owner"] != first["lease_owner"]
    runs = await pool.fetch(
        "SELECT attempt, owner, started_at FROM job_test_executions WHERE job_id = $1 ORDER BY id",
        job_id,
    )
    assert [r["attempt"] for r in runs] == [1, 2]
    # Taken over only once the dead worker's lease had run out (heartbeats may have pushed it
    # past the value read before the kill, never before it).
    assert runs[1]["started_at"] >= first["lease_expires_at"]

    # Ray restarted the killed actor: a new process with a new lease owner.
    async def restarted() -> bool:
        try:
            state = await victim.status.remote()
        except ray.exceptions.RayActorError:
            return False
        return state.pid != victim_state.pid and state.listening

    await eventually(restarted, within=60, what="killed worker restarted")
    assert (await victim.status.remote()).owner != first["lease_owner"]


async def test_metrics_show_depth_attempts_outcomes_and_latency(
    aiohttp_client: Any, servers: Servers, pool: asyncpg.Pool, queue: str
) -> None:
    from marketplace.http.app import create_app

    app = create_app(job_settings(servers, jobs_workers_per_queue=1))
    app[keys.JOB_REGISTRY] = JobRegistry([spec_of(queue)])
    client = await aiohttp_client(app)
    workers = client.app[keys.JOB_WORKERS]
    await eventually(lambda: all_listening(workers, 1), within=60, what="worker listening")

    for _ in range(5):
        await enqueue(pool, spec_of(queue), Script())
    failing = await enqueue(
        pool, spec_of(queue), Script(raise_on=True, message="x"), max_attempts=2
    )
    await enqueue(pool, spec_of(queue), Script(), delay_seconds=3600)

    async def settled() -> bool:
        finished = await pool.fetchval(
            "SELECT count(*) FROM jobs WHERE queue = $1 AND finished_at IS NOT NULL", queue
        )
        return bool(finished == 6)

    await eventually(settled, within=30, what="jobs finished")
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", failing.job_id) == "failed"

    async def scraped() -> str:
        resp = await client.get("/metrics")
        assert resp.status == 200
        return str(await resp.text())

    async def flushed() -> bool:
        # Workers flush their counters to Redis about once a second.
        return f'marketplace_job_attempts_total{{queue="{queue}"}} 7.0' in await scraped()

    await eventually(flushed, within=10, what="worker counters mirrored")
    text = await scraped()
    expected = [
        f'marketplace_jobs{{queue="{queue}",status="queued"}} 1.0',
        f'marketplace_jobs{{queue="{queue}",status="running"}} 0.0',
        f'marketplace_jobs{{queue="{queue}",status="failed"}} 1.0',
        f'marketplace_jobs_due{{queue="{queue}"}} 0.0',
        f'marketplace_job_outcomes_total{{outcome="completed",queue="{queue}"}} 5.0',
        f'marketplace_job_outcomes_total{{outcome="retried",queue="{queue}"}} 1.0',
        f'marketplace_job_outcomes_total{{outcome="failed",queue="{queue}"}} 1.0',
        f'marketplace_job_wait_seconds_count{{queue="{queue}"}} 7.0',
        f'marketplace_job_run_seconds_count{{outcome="completed",queue="{queue}"}} 5.0',
    ]
    missing = [line for line in expected if line not in text]
    assert not missing, missing
