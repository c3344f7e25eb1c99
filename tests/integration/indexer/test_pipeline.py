"""A batch spanning many pages and write groups (the pipelined engine) writes what the chain
holds, with one event per project, and rolls all of it back when a call fails."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from marketplace.chain.rpc import JsonRpcClient, RpcError
from marketplace.indexer import engine as engine_module
from marketplace.indexer.engine import IndexerEngine
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment
from tests.contracts.helpers import DAY, USDC, Chain
from tests.integration.indexer.conftest import engine_config
from tests.integration.indexer.test_indexer import assert_matches_chain


class FailingRpc(JsonRpcClient):
    """Answers normally until the ``fail_at``-th ``eth_getLogs`` page, which fails."""

    def __init__(self, url: str, fail_at: int) -> None:
        super().__init__(url)
        self.fail_at = fail_at
        self.pages = 0

    async def call(self, method: str, params: list[Any]) -> Any:
        if method == "eth_getLogs":
            self.pages += 1
            if self.pages == self.fail_at:
                raise RpcError("node fell over", code=-32000)
        return await super().call(method, params)


def many_projects(chain: Chain) -> list[str]:
    """Projects in separate blocks (automine), some invite-only with an allowlist, some touched
    again later (so a project's events span pages)."""
    a = chain.a
    projects = []
    for i in range(9):
        project = chain.create_standard(invite_only=i % 3 == 0, milestones=1 + i % 3)
        if i % 3 == 0:
            chain.ok(a.owner, project.functions.addToAllowlist([a.worker, a.bidder2]))
        projects.append(project)
    for project in projects[::2]:
        chain.ok(a.owner, project.functions.openBidding())
    return [p.address for p in projects]


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    # Several pages in flight and several write groups in one batch.
    monkeypatch.setattr(engine_module, "PAGES_IN_FLIGHT", 3)
    monkeypatch.setattr(engine_module, "WRITE_PROJECTS", 3)


@pytest.mark.usefixtures("small_steps")
async def test_a_batch_of_many_pages_writes_what_the_chain_holds(
    devnet: tuple[AnvilProcess, Deployment], chain: Chain, pool: asyncpg.Pool
) -> None:
    addresses = many_projects(chain)
    rpc = JsonRpcClient(devnet[0].rpc_url)
    engine = IndexerEngine(engine_config(devnet, page_blocks=1, max_pages=10_000), pool, rpc)
    try:
        result = await engine.sync_once()
    finally:
        await rpc.close()
    head = int(chain.rpc("eth_blockNumber"), 16)
    assert (result.to_block, result.behind, result.projects) == (head, False, len(addresses))
    for address in addresses:
        row = await assert_matches_chain(pool, chain, address)
        if row["bidding_access"] == "invite_only":
            assert len(row["allowlist"]) == 2
    events = await pool.fetch("SELECT type, subject FROM events ORDER BY id")
    assert [(e["type"], e["subject"]) for e in events] == [
        ("project.created", address.lower()) for address in sorted(a.lower() for a in addresses)
    ]
    cursor = await pool.fetchrow("SELECT last_synced_block FROM indexer_cursors")
    assert cursor is not None and cursor["last_synced_block"] == head


@pytest.mark.usefixtures("small_steps")
async def test_a_failed_call_mid_batch_rolls_the_whole_batch_back(
    devnet: tuple[AnvilProcess, Deployment], chain: Chain, pool: asyncpg.Pool
) -> None:
    addresses = many_projects(chain)
    rpc = FailingRpc(devnet[0].rpc_url, fail_at=4)
    engine = IndexerEngine(engine_config(devnet, page_blocks=1, max_pages=10_000), pool, rpc)
    try:
        # The RPC error itself, not a group: the actor classifies failures by their type.
        with pytest.raises(RpcError, match="node fell over"):
            await engine.sync_once()
        assert await pool.fetchval("SELECT count(*) FROM projects") == 0
        assert await pool.fetchval("SELECT count(*) FROM milestones") == 0
        assert await pool.fetchval("SELECT count(*) FROM events") == 0
        cursor = await pool.fetchrow("SELECT last_synced_block FROM indexer_cursors")
        assert cursor is not None and cursor["last_synced_block"] == engine.config.start_block - 1
        # The next attempt (the node is back) indexes everything.
        rpc.fail_at = 0
        result = await engine.sync_once()
    finally:
        await rpc.close()
    assert result.projects == len(addresses)
    assert await pool.fetchval("SELECT count(*) FROM events") == len(addresses)


class HeaderlessRpc(JsonRpcClient):
    """A node whose logs carry no ``blockTimestamp`` and whose header reads fail: the bid logs'
    block times are read after the project rows were written, so this fails a batch late."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.failing = True
        self.header_reads = 0

    async def call(self, method: str, params: list[Any]) -> Any:
        result = await super().call(method, params)
        if method == "eth_getLogs":
            for entry in result:
                entry.pop("blockTimestamp", None)
        return result

    async def batch(self, calls: list[tuple[str, list[Any]]], *, chunk: int = 200) -> list[Any]:
        if self.failing and calls and calls[0][0] == "eth_getBlockByNumber":
            self.header_reads += 1
            raise RpcError("node fell over", code=-32000)
        return await super().batch(calls, chunk=chunk)


@pytest.mark.usefixtures("small_steps")
async def test_a_failure_after_the_rows_were_written_rolls_them_back_too(
    devnet: tuple[AnvilProcess, Deployment], chain: Chain, pool: asyncpg.Pool
) -> None:
    addresses = many_projects(chain)
    a = chain.a
    chain.post_bid(chain.project(addresses[4]), a.bidder3, [100 * USDC, 200 * USDC], [DAY, DAY])
    rpc = HeaderlessRpc(devnet[0].rpc_url)
    engine = IndexerEngine(engine_config(devnet, page_blocks=1, max_pages=10_000), pool, rpc)
    written: list[set[str]] = []
    upsert = engine_module.repo.upsert_snapshots

    async def recording_upsert(*args: Any, **kwargs: Any) -> set[str]:
        written.append(await upsert(*args, **kwargs))
        return written[-1]

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(engine_module.repo, "upsert_snapshots", recording_upsert)
            with pytest.raises(RpcError, match="node fell over"):
                await engine.sync_once()
        # Every write group went in (WRITE_PROJECTS = 3: several statements), then the
        # transaction rolled back.
        assert rpc.header_reads == 1
        assert sum(len(w) for w in written) == len(addresses) and len(written) > 1
        assert await pool.fetchval("SELECT count(*) FROM projects") == 0
        assert await pool.fetchval("SELECT count(*) FROM events") == 0
        rpc.failing = False
        result = await engine.sync_once()
    finally:
        await rpc.close()
    assert result.projects == len(addresses)
    assert await pool.fetchval("SELECT count(*) FROM bids") == 1
