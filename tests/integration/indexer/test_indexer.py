"""The indexer on a real anvil: events land in the read model, reorgs converge."""

from __future__ import annotations

from typing import Any

import asyncpg

from marketplace.chain.abi import ContractAbi
from marketplace.indexer.engine import IndexerEngine
from marketplace.indexer.snapshot import project_rows
from tests.contracts.helpers import DAY, USDC, Chain, DisputeReason, h

PROJECT_ABI = ContractAbi.load("MarketplaceProject")


async def sync(engine: IndexerEngine) -> None:
    for _ in range(100):
        result = await engine.sync_once()
        if not result.behind and not result.reorg:
            return
    raise AssertionError("indexer did not catch up")


def chain_rows(chain: Chain, address: str) -> tuple[Any, Any]:
    get_state = PROJECT_ABI.functions["getProjectState"]
    get_allow = PROJECT_ABI.functions["allowlist"]
    state = get_state.decode_result(
        chain.rpc("eth_call", {"to": address, "data": get_state.encode_call()}, "latest")
    )
    allow = get_allow.decode_result(
        chain.rpc("eth_call", {"to": address, "data": get_allow.encode_call()}, "latest")
    )
    return project_rows(address, state, allow)


async def db_project(pool: asyncpg.Pool, address: str) -> asyncpg.Record | None:
    return await pool.fetchrow("SELECT * FROM projects WHERE project_address = $1", address.lower())


async def assert_matches_chain(pool: asyncpg.Pool, chain: Chain, address: str) -> asyncpg.Record:
    expected, milestones = chain_rows(chain, address)
    row = await db_project(pool, address)
    assert row is not None, f"{address} not indexed"
    for field, value in vars(expected).items():
        assert row[field] == value, (field, row[field], value)
    db_milestones = await pool.fetch(
        "SELECT * FROM milestones WHERE project_address = $1 ORDER BY milestone_index",
        address.lower(),
    )
    assert len(db_milestones) == len(milestones)
    for db_m, m in zip(db_milestones, milestones, strict=True):
        for field, value in vars(m).items():
            assert db_m[field] == value, (field, db_m[field], value)
    return row


async def test_standard_lifecycle_events_land_in_read_model(
    engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    a = chain.a
    project = chain.create_standard(invite_only=True, milestones=2)
    await sync(engine)
    row = await assert_matches_chain(pool, chain, project.address)
    assert row["status"] == "draft"
    assert row["bidding_access"] == "invite_only"
    assert row["owner_address"] == a.owner.lower()

    chain.ok(a.owner, project.functions.addToAllowlist([a.worker, a.bidder2]))
    chain.ok(a.owner, project.functions.openBidding())
    await sync(engine)
    row = await assert_matches_chain(pool, chain, project.address)
    assert row["status"] == "bidding"
    assert row["allowlist"] == sorted([a.worker.lower(), a.bidder2.lower()])

    chain.post_bid(project, a.worker, [300 * USDC, 700 * USDC], [3 * DAY, 5 * DAY])
    chain.post_bid(project, a.bidder2, [100 * USDC, 100 * USDC], [DAY, DAY])
    chain.ok(a.bidder2, project.functions.cancelBid())
    chain.ok(a.owner, project.functions.removeFromAllowlist([a.bidder2]))
    await sync(engine)
    await assert_matches_chain(pool, chain, project.address)

    chain.select(project, a.worker)
    await sync(engine)
    row = await assert_matches_chain(pool, chain, project.address)
    assert row["status"] == "building"
    assert row["selected_builder_address"] == a.worker.lower()
    payouts = await pool.fetch(
        "SELECT payout_usdc FROM milestones WHERE project_address = $1 ORDER BY 1",
        project.address.lower(),
    )
    assert [r["payout_usdc"] for r in payouts] == [300, 700]

    chain.submit(project, 0)
    chain.ok(a.owner, project.functions.approveMilestone(0))
    await sync(engine)
    await assert_matches_chain(pool, chain, project.address)

    chain.dispute(project, 1, DisputeReason.LOW_QUALITY)
    chain.ok(a.owner, project.functions.submitDisputeEvidence(1, h("owner-evidence")))
    chain.ok(a.worker, project.functions.submitDisputeEvidence(1, h("worker-evidence")))
    await sync(engine)
    row = await assert_matches_chain(pool, chain, project.address)
    assert row["status"] == "dispute"
    assert row["dispute_phase"] == "challenged"
    assert row["dispute_reason"] == "low_quality"
    assert row["dispute_owner_evidence_hash"] == "0x" + h("owner-evidence").hex()

    chain.attest(project, 1, passes=True)
    await sync(engine)
    row = await assert_matches_chain(pool, chain, project.address)
    assert row["dispute_phase"] == "verifier_verdict"

    chain.mine_at(chain.now() + 2 * DAY + 10)
    chain.ok(a.stranger, project.functions.finalizeDispute())
    await sync(engine)
    row = await assert_matches_chain(pool, chain, project.address)
    assert row["status"] == "complete"
    assert row["dispute_phase"] is None


async def test_challenge_lifecycle_events_land_in_read_model(
    engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    a = chain.a
    project = chain.create_challenge(payout=1_000 * USDC)
    await sync(engine)
    row = await assert_matches_chain(pool, chain, project.address)
    assert row["status"] == "bidding"
    assert row["project_mode"] == "challenge"
    assert row["challenge_payout_usdc"] == 1000
    assert row["challenge_submission_count"] == 0

    chain.ok(a.worker, project.functions.submitChallengeSubmission(h("s1")))
    chain.ok(a.bidder2, project.functions.submitChallengeSubmission(h("s2")))
    await sync(engine)
    row = await assert_matches_chain(pool, chain, project.address)
    assert row["challenge_submission_count"] == 2

    chain.mine_at(row["challenge_submission_deadline"] + 1)
    chain.ok(a.stranger, project.functions.enterChallengeSelectionPhase())
    chain.ok(a.owner, project.functions.selectChallengeWinner(a.bidder2, h("decision")))
    await sync(engine)
    row = await assert_matches_chain(pool, chain, project.address)
    assert row["status"] == "complete"
    assert row["selected_builder_address"] == a.bidder2.lower()


async def test_cursor_advances_in_the_same_transaction_and_is_idempotent(
    engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    projects = [chain.create_standard() for _ in range(3)]
    await sync(engine)
    cursor = await pool.fetchrow("SELECT * FROM indexer_cursors")
    assert cursor is not None
    head = int(chain.rpc("eth_blockNumber"), 16)
    assert cursor["last_synced_block"] == head
    assert cursor["head_block"] == head
    before = await pool.fetch("SELECT * FROM projects ORDER BY project_address")
    # Replaying the same range (as after a crash before the cursor moved) changes nothing.
    await pool.execute(
        "UPDATE indexer_cursors SET last_synced_block = $1", engine.config.start_block - 1
    )
    await sync(engine)
    after = await pool.fetch("SELECT * FROM projects ORDER BY project_address")
    assert [dict(r) for r in after] == [dict(r) for r in before]
    assert len(after) == len(projects)


async def test_reorg_within_rollback_depth_converges(
    engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    a = chain.a
    survivor = chain.create_standard(milestones=1)
    await sync(engine)
    fork_point = chain.rpc("evm_snapshot")
    orphan = chain.create_standard(milestones=3)
    chain.ok(a.owner, survivor.functions.openBidding())
    chain.ok(a.owner, orphan.functions.openBidding())
    await sync(engine)
    assert (await db_project(pool, orphan.address)) is not None
    survived = await db_project(pool, survivor.address)
    assert survived is not None and survived["status"] == "bidding"
    orphan_head = int(chain.rpc("eth_blockNumber"), 16)

    # A different history of the same or greater length replaces the last 4 blocks.
    assert chain.rpc("evm_revert", fork_point) is True
    replacement = chain.create_standard(milestones=2, owner=a.bidder3)
    while int(chain.rpc("eth_blockNumber"), 16) <= orphan_head:
        chain.rpc("evm_mine")
    await sync(engine)

    row = await assert_matches_chain(pool, chain, survivor.address)
    assert row["status"] == "draft"
    # Clone addresses come from the registry's nonce, so the replacement reuses the orphan's
    # address; the read model must now show the replacement's owner and milestones.
    assert replacement.address == orphan.address
    row = await assert_matches_chain(pool, chain, replacement.address)
    assert row["owner_address"] == a.bidder3.lower()
    assert row["milestone_count"] == 2
    assert row["status"] == "draft"
    assert await pool.fetchval("SELECT count(*) FROM projects") == 2
    assert await pool.fetchval("SELECT count(*) FROM milestones") == 3
