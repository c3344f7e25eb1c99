"""The on-chain bids read model on a real anvil: post, update, cancel, select and reclaim land in
`bids` with the documented statuses; a reorg rolls them back exactly; a backfill from the start
block, in any batch size, gives the same tables as incremental indexing; the owner's
`project.changed` events carry the bid changes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import asyncpg
from eth_utils import to_checksum_address
from web3.contract import Contract

from marketplace.chain.rpc import JsonRpcClient
from marketplace.indexer.engine import IndexerEngine
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment
from tests.contracts.helpers import DAY, USDC, Chain, h
from tests.integration.indexer.conftest import engine_config
from tests.support.chain import sync

BID_COLUMNS = (
    "project_address, bidder_address, status, bid_hash, payouts_usdc, durations_seconds,"
    " total_payout_usdc, bond_usdc, posted_at, updated_at, first_block, first_log_index,"
    " last_block, last_log_index"
)


async def bids_by_bidder(pool: asyncpg.Pool, project: Contract) -> dict[str, asyncpg.Record]:
    rows = await pool.fetch(
        f"SELECT {BID_COLUMNS} FROM bids WHERE project_address = $1", project.address.lower()
    )
    return {row["bidder_address"]: row for row in rows}


async def tables(pool: asyncpg.Pool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    bids = await pool.fetch(f"SELECT {BID_COLUMNS} FROM bids ORDER BY 1, 2")
    events = await pool.fetch("SELECT * FROM bid_events ORDER BY 1, 2, 3")
    return [dict(r) for r in bids], [dict(r) for r in events]


def block_time(chain: Chain, receipt: Any) -> datetime:
    block = chain.w3.eth.get_block(receipt["blockNumber"])
    return datetime.fromtimestamp(int(block["timestamp"]), UTC)


def assert_matches_get_bid(chain: Chain, project: Contract, row: asyncpg.Record) -> None:
    """The row's bid equals the contract's `getBid` (display units)."""
    bidder = to_checksum_address(row["bidder_address"])
    bid = chain.project(project.address).functions.getBid(bidder).call()
    names = ("active", "bidHash", "postedAt", "updatedAt", "totalPayout")
    fields = dict(zip(names, bid[:5], strict=True))
    assert row["bid_hash"] == "0x" + bytes(fields["bidHash"]).hex()
    assert row["total_payout_usdc"] == fields["totalPayout"] // USDC
    assert int(row["posted_at"].timestamp()) == fields["postedAt"]


async def test_bid_lifecycle_and_statuses(
    engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    a = chain.a
    project = chain.open_standard(milestones=2, bid_bond=50 * USDC)
    chain.post_bid(project, a.worker, [300 * USDC, 700 * USDC], [3 * DAY, 5 * DAY], h("w1"))
    chain.post_bid(project, a.bidder2, [100 * USDC, 150 * USDC], [DAY, DAY], h("b2"))
    await sync(engine)
    bids = await bids_by_bidder(pool, project)
    assert set(bids) == {a.worker.lower(), a.bidder2.lower()}
    worker = bids[a.worker.lower()]
    assert worker["status"] == "active"
    assert worker["payouts_usdc"] == [300, 700]
    assert worker["durations_seconds"] == [3 * DAY, 5 * DAY]
    assert worker["total_payout_usdc"] == 1000
    assert worker["bond_usdc"] == 50
    assert worker["bid_hash"] == "0x" + h("w1").hex()
    assert worker["posted_at"] == worker["updated_at"]
    assert (worker["first_block"], worker["first_log_index"]) < (
        bids[a.bidder2.lower()]["first_block"],
        bids[a.bidder2.lower()]["first_log_index"],
    )

    # Update, cancel and a repost after the cancel (it keeps its place in the list).
    updated = chain.ok(
        a.bidder2,
        project.functions.updateBid([120 * USDC, 130 * USDC], [2 * DAY, DAY], h("b2v2")),
        at=chain.now() + 600,
    )
    chain.post_bid(project, a.bidder3, [10 * USDC, 10 * USDC], [DAY, DAY], h("b3"))
    cancelled = chain.ok(a.bidder3, project.functions.cancelBid())
    await sync(engine)
    bids = await bids_by_bidder(pool, project)
    bidder2 = bids[a.bidder2.lower()]
    assert bidder2["status"] == "active"
    assert bidder2["payouts_usdc"] == [120, 130]
    assert bidder2["durations_seconds"] == [2 * DAY, DAY]
    assert bidder2["bid_hash"] == "0x" + h("b2v2").hex()
    assert bidder2["updated_at"] == block_time(chain, updated)
    assert bidder2["posted_at"] < bidder2["updated_at"]
    assert_matches_get_bid(chain, project, bidder2)
    bidder3 = bids[a.bidder3.lower()]
    assert bidder3["status"] == "cancelled"
    assert bidder3["updated_at"] == block_time(chain, cancelled)
    first_place = (bidder3["first_block"], bidder3["first_log_index"])
    chain.post_bid(project, a.bidder3, [20 * USDC, 20 * USDC], [DAY, DAY], h("b3v2"))
    cancelled_again = chain.ok(a.bidder3, project.functions.cancelBid())
    await sync(engine)
    bidder3 = (await bids_by_bidder(pool, project))[a.bidder3.lower()]
    assert bidder3["status"] == "cancelled"
    assert bidder3["payouts_usdc"] == [20, 20]
    assert (bidder3["first_block"], bidder3["first_log_index"]) == first_place
    assert bidder3["updated_at"] == block_time(chain, cancelled_again)

    # Selection: the selected bid, the other active one not selected, the cancelled one kept.
    selected = chain.select(project, a.worker)
    await sync(engine)
    bids = await bids_by_bidder(pool, project)
    assert {b: r["status"] for b, r in bids.items()} == {
        a.worker.lower(): "selected",
        a.bidder2.lower(): "not_selected",
        a.bidder3.lower(): "cancelled",
    }
    assert bids[a.bidder2.lower()]["updated_at"] == block_time(chain, selected)
    assert bids[a.bidder3.lower()]["updated_at"] == block_time(chain, cancelled_again)
    for row in bids.values():
        assert_matches_get_bid(chain, project, row)

    reclaimed = chain.ok(a.bidder2, project.functions.reclaimBond())
    await sync(engine)
    bids = await bids_by_bidder(pool, project)
    assert bids[a.bidder2.lower()]["status"] == "bond_reclaimed"
    assert bids[a.bidder2.lower()]["updated_at"] == block_time(chain, reclaimed)
    assert bids[a.bidder2.lower()]["bond_usdc"] == 50
    assert bids[a.worker.lower()]["status"] == "selected"
    kinds = await pool.fetch(
        "SELECT kind FROM bid_events WHERE project_address = $1 ORDER BY block_number, log_index",
        project.address.lower(),
    )
    assert [r["kind"] for r in kinds] == [
        "posted",
        "posted",
        "updated",
        "posted",
        "cancelled",
        "posted",
        "cancelled",
        "selected",
        "bond_reclaimed",
    ]


async def test_bid_changes_ride_on_project_changed_events(
    engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    a = chain.a
    project = chain.open_standard(milestones=1)
    await sync(engine)
    start = await pool.fetchval("SELECT coalesce(max(id), 0) FROM events")
    chain.post_bid(project, a.worker, [300 * USDC], [DAY], h("w"))
    await sync(engine)
    rows = await pool.fetch(
        "SELECT type, subject, payload FROM events WHERE id > $1 ORDER BY id", start
    )
    assert [(r["type"], r["subject"]) for r in rows] == [
        ("project.changed", project.address.lower())
    ]
    payload = rows[0]["payload"]
    payload = json.loads(payload) if isinstance(payload, str) else payload
    assert payload["changes"] == {} and payload["milestones"] == []
    (change,) = payload["bids"]
    assert change["bidderAddress"] == a.worker.lower()
    assert change["changes"]["status"] == "active"
    assert change["changes"]["payoutsUSDC"] == ["300"]
    assert change["changes"]["durationsSeconds"] == [DAY]
    assert change["changes"]["bondUSDC"] == "50"

    # Selection changes the project and two bids: one event with all of it.
    chain.post_bid(project, a.bidder2, [200 * USDC], [DAY], h("b"))
    await sync(engine)
    start = await pool.fetchval("SELECT max(id) FROM events")
    chain.select(project, a.worker)
    await sync(engine)
    rows = await pool.fetch("SELECT type, payload FROM events WHERE id > $1 ORDER BY id", start)
    assert [r["type"] for r in rows] == ["project.changed"]
    payload = rows[0]["payload"]
    payload = json.loads(payload) if isinstance(payload, str) else payload
    assert payload["changes"]["status"] == "building"
    assert {c["bidderAddress"]: c["changes"]["status"] for c in payload["bids"]} == {
        a.worker.lower(): "selected",
        a.bidder2.lower(): "not_selected",
    }
    # A replayed range changes nothing and records nothing.
    end = await pool.fetchval("SELECT max(id) FROM events")
    before = await tables(pool)
    await pool.execute(
        "UPDATE indexer_cursors SET last_synced_block = $1", engine.config.start_block - 1
    )
    await sync(engine)
    assert await tables(pool) == before
    assert await pool.fetchval("SELECT max(id) FROM events") == end


async def test_reorg_rolls_bids_back(
    engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    a = chain.a
    project = chain.open_standard(milestones=1)
    chain.post_bid(project, a.worker, [300 * USDC], [DAY], h("w"))
    await sync(engine)
    kept = await tables(pool)
    fork_point = chain.rpc("evm_snapshot")
    # The orphaned history: an update, a second bid, a selection.
    chain.ok(a.worker, project.functions.updateBid([999 * USDC], [DAY], h("orphan")))
    chain.post_bid(project, a.bidder2, [100 * USDC], [DAY], h("b2"))
    chain.select(project, a.bidder2)
    await sync(engine)
    bids = await bids_by_bidder(pool, project)
    assert bids[a.bidder2.lower()]["status"] == "selected"
    assert bids[a.worker.lower()]["status"] == "not_selected"
    orphan_head = int(chain.rpc("eth_blockNumber"), 16)
    start = await pool.fetchval("SELECT max(id) FROM events")

    assert chain.rpc("evm_revert", fork_point) is True
    while int(chain.rpc("eth_blockNumber"), 16) <= orphan_head:
        chain.rpc("evm_mine")
    # First poll: the rollback alone restores exactly the tables before the fork.
    result = await engine.sync_once()
    assert result.reorg
    assert await tables(pool) == kept
    rows = await pool.fetch("SELECT type, payload FROM events WHERE id > $1 ORDER BY id", start)
    assert rows[0]["type"] == "chain.reorg"
    payloads = [
        json.loads(r["payload"]) if isinstance(r["payload"], str) else r["payload"]
        for r in rows
        if r["type"] == "project.changed"
    ]
    bid_changes = {c["bidderAddress"]: c["changes"] for p in payloads for c in p.get("bids", [])}
    assert bid_changes[a.bidder2.lower()] == {"status": None}
    assert bid_changes[a.worker.lower()]["status"] == "active"

    # The canonical history goes on: a different bidder, indexed on top.
    chain.post_bid(project, a.bidder3, [50 * USDC], [DAY], h("b3"))
    await sync(engine)
    bids = await bids_by_bidder(pool, project)
    assert {b: r["status"] for b, r in bids.items()} == {
        a.worker.lower(): "active",
        a.bidder3.lower(): "active",
    }
    assert bids[a.worker.lower()]["payouts_usdc"] == [300]
    assert bids[a.worker.lower()]["bid_hash"] == "0x" + h("w").hex()
    # And equals what a backfill of the canonical chain gives.
    indexed = await tables(pool)
    await wipe(pool)
    await sync(engine)
    assert await tables(pool) == indexed


async def test_reorg_that_drops_the_project_drops_its_bids(
    engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    a = chain.a
    chain.open_standard(milestones=1)
    await sync(engine)
    fork_point = chain.rpc("evm_snapshot")
    orphan = chain.open_standard(milestones=1)
    chain.post_bid(orphan, a.worker, [300 * USDC], [DAY])
    await sync(engine)
    assert len(await bids_by_bidder(pool, orphan)) == 1
    orphan_head = int(chain.rpc("eth_blockNumber"), 16)
    assert chain.rpc("evm_revert", fork_point) is True
    while int(chain.rpc("eth_blockNumber"), 16) <= orphan_head:
        chain.rpc("evm_mine")
    await sync(engine)
    assert await pool.fetchval("SELECT count(*) FROM bids") == 0
    assert await pool.fetchval("SELECT count(*) FROM bid_events") == 0


async def wipe(pool: asyncpg.Pool) -> None:
    """Forget everything indexed, as a fresh database would (bids go with their projects)."""
    await pool.execute("DELETE FROM projects")
    await pool.execute("DELETE FROM indexer_blocks")
    await pool.execute("DELETE FROM indexer_cursors")


async def test_backfill_from_the_start_gives_the_same_tables(
    devnet: tuple[AnvilProcess, Deployment],
    engine: IndexerEngine,
    chain: Chain,
    pool: asyncpg.Pool,
) -> None:
    a = chain.a
    first = chain.open_standard(milestones=2)
    second = chain.open_standard(milestones=1, invite_only=True)
    chain.ok(a.owner, second.functions.addToAllowlist([a.worker, a.bidder2]))
    # Indexed step by step, as a live indexer would.
    chain.post_bid(first, a.worker, [300 * USDC, 700 * USDC], [DAY, DAY])
    await sync(engine)
    chain.post_bid(first, a.bidder2, [100 * USDC, 100 * USDC], [DAY, DAY])
    chain.post_bid(second, a.worker, [500 * USDC], [DAY])
    await sync(engine)
    chain.ok(a.bidder2, first.functions.updateBid([90 * USDC, 90 * USDC], [DAY, DAY], h("u")))
    chain.post_bid(second, a.bidder2, [400 * USDC], [DAY])
    chain.ok(a.worker, second.functions.cancelBid())
    await sync(engine)
    chain.select(first, a.bidder2)
    await sync(engine)
    chain.ok(a.worker, first.functions.reclaimBond())
    chain.select(second, a.bidder2)
    await sync(engine)
    incremental = await tables(pool)
    assert len(incremental[0]) == 4
    assert {r["status"] for r in incremental[0]} == {
        "selected",
        "bond_reclaimed",
        "cancelled",
    }

    # A backfill in one batch, and one in batches of one block.
    await wipe(pool)
    await sync(engine)
    assert await tables(pool) == incremental
    await wipe(pool)
    rpc = JsonRpcClient(devnet[0].rpc_url)
    try:
        small = IndexerEngine(engine_config(devnet, page_blocks=1, max_pages=1), pool, rpc)
        await sync(small, max_rounds=1_000)
    finally:
        await rpc.close()
    assert await tables(pool) == incremental
    # A node whose logs carry no block timestamps: the block headers give them.
    await wipe(pool)
    bare = LogsWithoutTimestamps(devnet[0].rpc_url)
    try:
        await sync(IndexerEngine(engine_config(devnet), pool, bare))
    finally:
        await bare.close()
    assert bare.stripped > 0
    assert await tables(pool) == incremental


class LogsWithoutTimestamps(JsonRpcClient):
    """A client of a node that leaves `blockTimestamp` out of its logs (older geth)."""

    stripped = 0

    async def call(self, method: str, params: list[Any]) -> Any:
        result = await super().call(method, params)
        if method == "eth_getLogs":
            for entry in result:
                if entry.pop("blockTimestamp", None) is not None:
                    self.stripped += 1
        return result
