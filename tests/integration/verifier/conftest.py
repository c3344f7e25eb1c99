"""Verifier jobs against real components: an anvil devnet with the reference contracts (the
registry that trusts the dev verifier key), projects created and disputed on it and indexed into
the read model, jobs accepted by ``marketplace.verifier.jobs.accept`` and run by the ``verifier``
queue's workers (in process or as Ray actors) and their policy executors, and a local HTTP server
whose answers are slow on purpose (so a worker can be killed while a job runs).

A job is accepted only for the active dispute of a project, over the delivery submitted on chain,
with the acceptance policy the owner fixed; one verdict per dispute. So every job here judges a
project of its own, disputed over the job's ``deliveryRef``; the claimed metadata that fixes the
policy is seeded (the claim itself is tested in tests/integration/claims)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import asyncpg
import pytest
from aiohttp import web
from pydantic import SecretStr

from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.indexer.engine import IndexerEngine
from marketplace.storage.repositories import verifier_jobs as repo
from marketplace.verifier import jobs
from marketplace.verifier.models import VerifierJobCreateRequest
from marketplace.verifier.policies import available_policies
from marketplace.verifier.policy import PolicyId
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import DEV_VERIFIER_PRIVATE_KEY, Deployment
from tests.api.projects import seed
from tests.conftest import Servers
from tests.contracts.helpers import Chain
from tests.support.chain import chain_settings, indexer_config, reverting_chain, start_devnet
from tests.support.chain import sync as sync_engine
from tests.support.db import open_pool
from tests.support.disputes import disputed_project, set_policies
from tests.support.verifier_fixtures import PNG_1X1
from tests.support.waiting import eventually


@dataclass(frozen=True)
class Devnet:
    process: AnvilProcess
    deployment: Deployment


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devnet]:
    with start_devnet(tmp_path_factory.mktemp("verifier-anvil"), silent=True) as (
        process,
        deployment,
    ):
        yield Devnet(process, deployment)


@pytest.fixture
def chain(devnet: Devnet) -> Iterator[Chain]:
    with reverting_chain(devnet.process.rpc_url, devnet.deployment) as driver:
        yield driver


def verifier_settings(servers: Servers, devnet: Devnet, namespace: str, **extra: Any) -> Settings:
    """Settings of a deployment whose verifier signs with the devnet's dev verifier key. Only the
    ``verifier`` queue's workers are allowed (make_settings turns them off for other tests)."""
    values: dict[str, Any] = {
        "verifier_private_key": SecretStr(DEV_VERIFIER_PRIVATE_KEY),
        "jobs_workers": {"notifications": 0},
        "jobs_poll_interval_ms": 200,
        "jobs_backoff_base_seconds": 0.05,
        "jobs_backoff_cap_seconds": 0.2,
    }
    values.update(extra)
    return chain_settings(servers, devnet.process, devnet.deployment, namespace, **values)


@pytest.fixture
async def pool(servers: Servers) -> AsyncIterator[asyncpg.Pool]:
    async with open_pool(servers, max_size=8) as pool:
        yield pool


@pytest.fixture
async def engine(devnet: Devnet, pool: asyncpg.Pool) -> AsyncIterator[IndexerEngine]:
    rpc = JsonRpcClient(devnet.process.rpc_url)
    yield IndexerEngine(indexer_config(devnet.process, devnet.deployment), pool, rpc)
    await rpc.close()


async def disputed_projects(
    chain: Chain,
    engine: IndexerEngine,
    pool: asyncpg.Pool,
    policy: PolicyId,
    refs: list[str],
) -> list[str]:
    """One standard project per ``deliveryRef`` (``a.worker`` selected), whose milestone 0 the
    worker submitted with it and the owner disputed (phase challenged), indexed by the engine;
    its claimed metadata (owner: the indexed owner) fixes ``policy`` as milestone 0's acceptance
    policy. Their lower-case addresses."""
    # web3 blocks: in a thread, so what the test runs meanwhile (a server, a subprocess it
    # talks to) is not held up.
    contracts = await asyncio.to_thread(lambda: [disputed_project(chain, ref) for ref in refs])
    await sync_engine(engine)
    addresses = [str(contract.address).lower() for contract in contracts]
    async with pool.acquire() as proxy:
        # A pooled connection proxies a Connection (what the seed helpers take).
        conn = cast(asyncpg.Connection, proxy)
        for address in addresses:
            await seed.metadata(conn, address, chain.a.owner.lower())
            await set_policies(conn, address, [(0, policy.value)])
    return addresses


async def verifier_admin(pool: asyncpg.Pool) -> uuid.UUID:
    user_id = uuid.uuid4()
    await pool.execute(
        "INSERT INTO users (user_id, email_verified, verifier_admin) VALUES ($1, true, true)",
        user_id,
    )
    return user_id


async def request_jobs(
    pool: asyncpg.Pool,
    settings: Settings,
    user_id: uuid.UUID,
    projects: list[str],
    policy: PolicyId,
    refs: list[str],
) -> list[uuid.UUID]:
    """Accept one job per project and ``deliveryRef`` for milestone 0, as the API would: new
    jobs (each project's dispute has none yet)."""
    ids = []
    for project, ref in zip(projects, refs, strict=True):
        accepted = await jobs.accept(
            pool,
            settings,
            user_id=user_id,
            request=VerifierJobCreateRequest(
                projectAddress=project,
                milestoneIndex=0,
                checkPolicyId=policy,
                deliveryRef=ref,
                chainId=settings.chain_id,
            ),
            available=available_policies(settings),
            signing_ready=True,
        )
        assert accepted.created and accepted.response.status == "queued"
        ids.append(accepted.job_id)
    return ids


async def dispute_jobs(
    pool: asyncpg.Pool,
    settings: Settings,
    user_id: uuid.UUID,
    chain: Chain,
    engine: IndexerEngine,
    policy: PolicyId,
    refs: list[str],
) -> list[uuid.UUID]:
    """:func:`request_jobs` for ``refs``, each on a project of its own from
    :func:`disputed_projects`."""
    projects = await disputed_projects(chain, engine, pool, policy, refs)
    return await request_jobs(pool, settings, user_id, projects, policy, refs)


async def wait_completed(
    pool: asyncpg.Pool, job_ids: list[uuid.UUID], limit_s: float
) -> list[repo.VerifierJobRow]:
    async def done() -> bool:
        rows = [await repo.get(pool, job_id) for job_id in job_ids]
        failed = [r for r in rows if r is not None and r.status == "failed"]
        assert not failed, [(r.id, r.error) for r in failed]
        return all(r is not None and r.status == "completed" for r in rows)

    await eventually(
        done, within=limit_s, what=f"{len(job_ids)} verifier jobs completed", interval=0.2
    )
    rows = [await repo.get(pool, job_id) for job_id in job_ids]
    return [r for r in rows if r is not None]


@dataclass
class SlowImages:
    """A local HTTP server answering ``GET /<name>.png`` with a PNG after ``delay`` seconds; it
    counts the requests it is answering at once, the most ever, and every arrival."""

    delay: float
    url: str = ""
    in_flight: int = 0
    most: int = 0
    arrivals: list[tuple[str, float]] = field(default_factory=list)

    def ref(self, name: str) -> str:
        return f"{self.url}/{name}.png"

    def arrived(self, name: str) -> int:
        return sum(1 for n, _ in self.arrivals if n == name)

    async def handle(self, request: web.Request) -> web.Response:
        self.arrivals.append((request.match_info["name"], time.time()))
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        return web.Response(body=PNG_1X1, content_type="image/png")


@pytest.fixture
async def slow_images() -> AsyncIterator[SlowImages]:
    server = SlowImages(delay=3.0)
    app = web.Application()
    app.router.add_get("/{name}.png", server.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.url = f"http://127.0.0.1:{port}"
    yield server
    await runner.cleanup()
