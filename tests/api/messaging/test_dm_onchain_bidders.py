"""Direct messages between a project's owner and its on-chain bidders (issue 27): an indexed
on-chain bid (a `bids` row, as the indexer writes it; the indexer side is tested on anvil in
tests/integration/indexer/test_bids.py and tests/api/projects/test_bids.py) makes a shared
project like a bid draft does, through wallets linked now, in every bid status."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg

from tests.api.messaging.conftest import (
    dm,
    error_code,
    linked_party,
    post_dm,
    seed_project,
    signed_in,
)
from tests.api.records.conftest import link_another

STATUSES = ("active", "cancelled", "selected", "not_selected", "bond_reclaimed")
_positions = iter(range(1, 1_000_000))


async def insert_onchain_bid(
    db: asyncpg.Connection, project: str, bidder: str, status: str = "active"
) -> None:
    """A `bids` row as the indexer writes it (lower-case addresses, display-unit USDC)."""
    now = datetime.now(UTC)
    position = next(_positions)
    await db.execute(
        "INSERT INTO bids (project_address, bidder_address, status, bid_hash, payouts_usdc,"
        " durations_seconds, total_payout_usdc, bond_usdc, posted_at, updated_at, first_block,"
        " first_log_index, last_block, last_log_index)"
        " VALUES ($1, $2, $3, $4, '{100,200}', '{86400,86400}', 300, 50, $5, $5, $6, 0, $6, 0)",
        project,
        bidder,
        status,
        "0x" + os.urandom(32).hex(),
        now,
        position,
    )


async def test_owner_and_onchain_bidder_exchange_messages_in_every_status(
    client: Any, db: asyncpg.Connection
) -> None:
    for status in STATUSES:
        owner = await linked_party(client)
        bidder = await linked_party(client)
        project = await seed_project(db, owner_address=owner.lower)
        resp = await post_dm(client, bidder, owner.user.user_id)
        assert await error_code(resp, 403) == "no_shared_project"
        await insert_onchain_bid(db, project, bidder.lower, status)
        await dm(client, owner, bidder)
        await dm(client, bidder, owner)


async def test_the_bidder_may_be_reached_through_any_wallet_linked_now(
    client: Any, db: asyncpg.Connection
) -> None:
    owner = await linked_party(client)
    bidder = await linked_party(client)
    bidding_wallet = await link_another(client, bidder)
    project = await seed_project(db, owner_address=owner.lower)
    await insert_onchain_bid(db, project, bidding_wallet.address.lower())
    await dm(client, owner, bidder)
    # Unlinking the wallet that bid ends the shared project, both ways.
    resp = await client.delete(f"/v1/wallet-links/{bidding_wallet.address}", headers=bidder.headers)
    assert resp.status in (200, 204)
    resp = await post_dm(client, owner, bidder.user.user_id)
    assert await error_code(resp, 403) == "no_shared_project"
    resp = await post_dm(client, bidder, owner.user.user_id)
    assert await error_code(resp, 403) == "no_shared_project"


async def test_strangers_and_fellow_bidders_share_nothing(
    client: Any, db: asyncpg.Connection
) -> None:
    owner = await linked_party(client)
    bidder = await linked_party(client)
    fellow = await linked_party(client)
    stranger = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    await insert_onchain_bid(db, project, bidder.lower)
    await insert_onchain_bid(db, project, fellow.lower, "cancelled")
    # Two on-chain bidders of one project: only the owner is on the other side.
    resp = await post_dm(client, bidder, fellow.user.user_id)
    assert await error_code(resp, 403) == "no_shared_project"
    # A stranger, either way, with the owner and with a bidder.
    for a, b in ((stranger, owner), (owner, stranger), (stranger, bidder), (bidder, stranger)):
        resp = await post_dm(client, a, b.user.user_id)
        assert await error_code(resp, 403) == "no_shared_project"
    # A user without wallets, and one the service has never seen.
    walletless = await signed_in(client)
    resp = await post_dm(client, owner, walletless.user_id)
    assert await error_code(resp, 403) == "no_shared_project"
    resp = await post_dm(client, owner, uuid.uuid4())
    assert await error_code(resp, 403) == "no_shared_project"
    # The bid of another owner's project does not count for this owner.
    other_owner = await linked_party(client)
    other_project = await seed_project(db, owner_address=other_owner.lower)
    await insert_onchain_bid(db, other_project, stranger.lower)
    resp = await post_dm(client, owner, stranger.user.user_id)
    assert await error_code(resp, 403) == "no_shared_project"
    await dm(client, other_owner, stranger)
    assert await db.fetchval("SELECT count(*) FROM messages") == 1


async def test_anonymous_cannot_send(client: Any, db: asyncpg.Connection) -> None:
    owner = await linked_party(client)
    bidder = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    await insert_onchain_bid(db, project, bidder.lower)
    resp = await client.post(
        "/v1/messages/dm", json={"recipientUserId": str(bidder.user.user_id), "body": "hi"}
    )
    assert resp.status == 401
    body = await resp.json()
    assert set(body) >= {"error", "message"}
    assert await db.fetchval("SELECT count(*) FROM messages") == 0
