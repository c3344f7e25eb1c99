"""The indexer as a Ray actor: survives being killed mid-backfill, wakes on new heads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
import ray

from marketplace.actors.indexer import INDEXER_SPEC
from marketplace.actors.runtime import ActorRuntime
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment
from tests.conftest import Servers, make_settings
from tests.contracts.helpers import Chain
from tests.integration.indexer.test_indexer import assert_matches_chain
from tests.support.waiting import eventually

pytestmark = pytest.mark.usefixtures("ray_cluster")


@pytest.fixture
def indexer_runtime(
    servers: Servers, devnet: tuple[AnvilProcess, Deployment], request: pytest.FixtureRequest
) -> Iterator[ActorRuntime]:
    process, deployment = devnet
    overrides: dict[str, Any] = {
        "chain_rpc_url": process.rpc_url,
        "chain_id": deployment.chain_id,
        "registry_address": deployment.registry,
        "chain_start_block": deployment.start_block,
        **getattr(request, "param", {}),
    }
    settings = make_settings(servers, **overrides)
    runtime = ActorRuntime(settings, database_url=servers.database_url)
    runtime.connect()
    yield runtime
    actor = ray.get_actor(INDEXER_SPEC.name, namespace=settings.ray_namespace)
    ray.kill(actor, no_restart=True)


@pytest.mark.parametrize(
    "indexer_runtime",
    [{"indexer_page_blocks": 2, "indexer_max_pages": 1, "indexer_poll_interval_ms": 100}],
    indirect=True,
)
async def test_killed_mid_backfill_ends_with_the_same_read_model(
    indexer_runtime: ActorRuntime, chain: Chain, pool: asyncpg.Pool
) -> None:
    projects = [chain.create_standard(milestones=1 + i % 3) for i in range(24)]
    for project in projects[::3]:
        chain.ok(chain.a.owner, project.functions.openBidding())
    head = int(chain.rpc("eth_blockNumber"), 16)

    indexer = indexer_runtime.handle(INDEXER_SPEC, indexer_runtime.actor_settings())

    async def partly_synced() -> bool:
        synced = await pool.fetchval("SELECT last_synced_block FROM indexer_cursors")
        return synced is not None and synced >= head - 20

    await eventually(partly_synced, within=60, what="a partial backfill")
    started_before = (await indexer.status.remote()).started_at
    ray.kill(indexer, no_restart=False)

    # The kill is asynchronous: wait for the restarted actor itself (since the indexer folds
    # logs, a backfill this small can finish before the kill lands, and a status call could
    # still be answered by the old process).
    async def restarted() -> bool:
        try:
            return (await indexer.status.remote()).started_at > started_before
        except ray.exceptions.RayActorError:
            return False

    await eventually(restarted, within=60, what="the indexer actor to be restarted")

    async def caught_up() -> bool:
        synced = await pool.fetchval("SELECT last_synced_block FROM indexer_cursors")
        return synced == head

    await eventually(caught_up, within=60, what="the restarted indexer to catch up")
    status = await indexer.status.remote()
    assert status.running is True
    assert status.started_at > started_before, "the actor was not restarted"

    async def reported() -> bool:
        batch = (await indexer.status.remote()).last_batch
        return batch is not None and batch.to_block == head == batch.head

    await eventually(reported, within=10, what="the last batch in the status")
    for project in projects:
        await assert_matches_chain(pool, chain, project.address)
    assert await pool.fetchval("SELECT count(*) FROM projects") == len(projects)


@pytest.mark.parametrize("indexer_runtime", [{"indexer_poll_interval_ms": 60_000}], indirect=True)
async def test_new_heads_subscription_beats_the_poll_interval(
    indexer_runtime: ActorRuntime, chain: Chain, pool: asyncpg.Pool
) -> None:
    indexer = indexer_runtime.handle(INDEXER_SPEC, indexer_runtime.actor_settings())

    async def subscribed() -> bool:
        return bool((await indexer.status.remote()).subscribed)

    await eventually(subscribed, within=30, what="the newHeads subscription")
    project = chain.create_standard()

    async def visible() -> bool:
        count = await pool.fetchval(
            "SELECT count(*) FROM projects WHERE project_address = $1", project.address.lower()
        )
        return count == 1

    elapsed = await eventually(visible, within=10, what="the new project in the read model")
    assert elapsed < 5, "a 60 s poll interval would not have seen it this fast"


def _recursion_limit(_actor: object) -> int:
    import sys

    return sys.getrecursionlimit()


async def test_the_indexer_actor_runs_with_the_pinned_recursion_limit(
    indexer_runtime: ActorRuntime,
) -> None:
    # The actor imports web3 (and so py_ecc, which raises the limit to 100000); decoding a deeply
    # nested RPC answer with that limit would segfault the actor instead of raising.
    from marketplace.interpreter import RECURSION_LIMIT

    indexer = indexer_runtime.handle(INDEXER_SPEC, indexer_runtime.actor_settings())
    assert await indexer.__ray_call__.remote(_recursion_limit) == RECURSION_LIMIT
