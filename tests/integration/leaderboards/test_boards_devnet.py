"""Boards on real indexed devnet projects: the reference contracts on anvil, milestones
submitted and approved on chain, the indexer engine writing the read model and its events, the
boards consumer applying them, and the board read through HTTP; a reorg that rolls back an
approval takes it off the board."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.indexer.engine import IndexerEngine
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment
from tests.api.leaderboards.boards_support import board, consume
from tests.conftest import Servers
from tests.contracts.helpers import Chain, h
from tests.support.chain import chain_settings, indexer_config, reverting_chain, start_devnet
from tests.support.chain import sync as sync_engine
from tests.support.db import open_pool

USDC = 10**6


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AnvilProcess, Deployment]]:
    with start_devnet(tmp_path_factory.mktemp("boards-anvil"), silent=True) as started:
        yield started


@pytest.fixture
def chain(devnet: tuple[AnvilProcess, Deployment]) -> Iterator[Chain]:
    with reverting_chain(devnet[0].rpc_url, devnet[1]) as driver:
        yield driver


@pytest.fixture
def settings(servers: Servers, devnet: tuple[AnvilProcess, Deployment]) -> Settings:
    return chain_settings(servers, *devnet)


@pytest.fixture
async def pool(servers: Servers, client: Any) -> AsyncIterator[asyncpg.Pool]:
    # After the client, whose reset empties the database.
    async with open_pool(servers, max_size=4, reset=False) as pool:
        yield pool


@pytest.fixture
async def engine(
    devnet: tuple[AnvilProcess, Deployment], pool: asyncpg.Pool
) -> AsyncIterator[IndexerEngine]:
    rpc = JsonRpcClient(devnet[0].rpc_url)
    yield IndexerEngine(indexer_config(*devnet), pool, rpc)
    await rpc.close()


async def consume_now(pool: asyncpg.Pool, servers: Servers) -> None:
    async with pool.acquire() as conn:
        await consume(conn, servers.database_url)


def complete(chain: Chain, project: Any, worker: str, index: int) -> None:
    chain.ok(worker, project.functions.submitMilestone(index, h(f"delivery-{worker}-{index}")))
    chain.ok(chain.owner_of(project), project.functions.approveMilestone(index))


async def test_indexed_approvals_rank_workers_and_a_reorg_takes_one_back(
    client: Any, chain: Chain, engine: IndexerEngine, pool: asyncpg.Pool, servers: Servers
) -> None:
    a = chain.a
    first = chain.building(payouts=(300 * USDC, 700 * USDC))  # a.worker
    second = chain.open_standard(milestones=1)
    chain.post_bid(second, a.bidder2, [500 * USDC], [86_400])
    chain.select(second, a.bidder2)
    complete(chain, first, a.worker, 0)
    complete(chain, second, a.bidder2, 0)
    await sync_engine(engine)
    await consume_now(pool, servers)

    body = await board(client)
    # Payouts in whole USDC, as the read model holds them (docs/projects.md).
    rows = [(r["walletAddress"], r["totalPayoutUSDC"], r["rank"]) for r in body["items"]]
    assert rows == [(a.bidder2, "500", 1), (a.worker, "300", 2)]
    assert body["freshness"]["source"] == "indexed"
    assert body["freshness"]["stale"] is False
    assert body["freshness"]["indexedAt"] is not None

    # The second approval puts a.worker first; then a reorg replaces the blocks that held it.
    fork = chain.rpc("evm_snapshot")
    chain.submit(first, 1)
    chain.ok(a.owner, first.functions.approveMilestone(1))
    await sync_engine(engine)
    await consume_now(pool, servers)
    top = (await board(client, sort="milestones"))["items"][0]
    assert (top["walletAddress"], top["completedMilestones"]) == (a.worker, 2)
    assert top["totalPayoutUSDC"] == "1000"
    replaced_head = int(chain.rpc("eth_blockNumber"), 16)

    assert chain.rpc("evm_revert", fork) is True
    while int(chain.rpc("eth_blockNumber"), 16) <= replaced_head:
        chain.rpc("evm_mine")
    await sync_engine(engine)
    assert await pool.fetchval("SELECT count(*) FROM events WHERE type = 'chain.reorg'") >= 1
    await consume_now(pool, servers)
    after = [(r["walletAddress"], r["totalPayoutUSDC"]) for r in (await board(client))["items"]]
    assert after == [(a.bidder2, "500"), (a.worker, "300")]
