"""Bid drafts: the shard command that upserts one, and the owner-only listing.

Rules (docs/records.md): the bidder wallet is an active link of the caller; the project is
indexed and visible to the caller; it is a standard-mode project in `bidding`; the bidder is not
the owner and, on an invite-only project, is allowlisted. The draft is keyed by (project, bidder
wallet), so whoever currently holds the wallet's link edits the same draft.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from marketplace.records.access import (
    caller_wallets,
    require_linked,
    visible_project,
)
from marketplace.records.errors import (
    BidderNotAllowlisted,
    NotProjectOwner,
    OwnerCannotBid,
    ProjectModeMismatch,
    ProjectNotBidding,
)
from marketplace.shards import ProjectCommand, ShardContext
from marketplace.storage.repositories import bid_drafts as repo

# A bid draft as stored, the shard command's result (it crosses the Ray boundary).
StoredBidDraft = repo.BidDraftRow


@dataclass(frozen=True)
class UpsertBidDraft(ProjectCommand):
    """Shard command: create or replace the draft of (project, bidder wallet). Addresses are
    lower-case; the whole draft is sent, so ``None`` clears a stored artifact URI or note."""

    user_id: uuid.UUID
    bidder_address: str
    draft_hash: str
    artifact_uri: str | None
    notes: str | None

    async def apply(self, ctx: ShardContext) -> StoredBidDraft:
        bidder = self.bidder_address
        async with ctx.pool.acquire() as conn:
            wallets = await caller_wallets(conn, self.user_id)
            require_linked(wallets, bidder, "bidderWalletAddress")
            project = await visible_project(conn, self.project_address, wallets)
            if bidder == project.owner:
                raise OwnerCannotBid()
            if project.mode != "standard":
                raise ProjectModeMismatch(
                    "bid drafts exist only for standard-mode projects; challenge-mode projects "
                    "take challenge submissions"
                )
            if project.status != "bidding":
                raise ProjectNotBidding(
                    f"bid drafts are accepted only while the project is in bidding "
                    f"(status: {project.status})"
                )
            if project.bidding_access == "invite_only" and bidder not in project.allowlist:
                raise BidderNotAllowlisted()
            row = await repo.upsert(
                conn,
                project_address=self.project_address,
                bidder_address=bidder,
                draft_hash=self.draft_hash,
                artifact_uri=self.artifact_uri,
                notes=self.notes,
                user_id=self.user_id,
            )
        return row


async def list_bid_drafts(
    conn: asyncpg.Pool, user_id: uuid.UUID, project_address: str, bidder: str | None
) -> list[StoredBidDraft]:
    """Owner only: the caller needs an active link to the project's owner wallet."""
    wallets = await caller_wallets(conn, user_id)
    project = await visible_project(conn, project_address, wallets)
    if project.owner not in wallets:
        raise NotProjectOwner("only the project owner may read its bid drafts")
    return await repo.list_for_project(conn, project_address, bidder)
