"""Bid drafts (spec section 4 "Bid drafts"): upsert through the project's shard actor, owner-only
listing straight from Postgres. Rules in marketplace.records.bid_drafts; docs/records.md."""

from __future__ import annotations

from marketplace.http import keys
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.records import bid_drafts
from marketplace.records.errors import (
    BidderNotAllowlisted,
    NotProjectOwner,
    OwnerCannotBid,
    ProjectModeMismatch,
    ProjectNotBidding,
    ProjectNotFound,
    WalletNotLinked,
)
from marketplace.records.models import (
    BidDraftListQuery,
    BidDraftListResponse,
    BidDraftRecord,
    BidDraftUpsertRequest,
    ProjectAddressPath,
)
from marketplace.storage.pool import Row

routes = RouteTable(tag="bid-drafts")


def bid_draft_record(row: Row) -> BidDraftRecord:
    return BidDraftRecord(
        id=row["draft_id"],
        projectAddress=row["project_address"],
        bidderWalletAddress=row["bidder_address"],
        draftHash=row["draft_hash"],
        artifactUri=row["artifact_uri"],
        notes=row["notes"],
        createdAt=row["created_at"],
        updatedAt=row["updated_at"],
    )


@routes.post(
    "/v1/projects/{projectAddress}/bid-drafts",
    name="upsertBidDraft",
    summary="Create or replace the caller's bid draft for a bidder wallet",
    auth=AuthMode.EITHER,
    response=BidDraftRecord,
    path_params=ProjectAddressPath,
    body=BidDraftUpsertRequest,
    guarded=True,
    errors=(
        WalletNotLinked,
        OwnerCannotBid,
        BidderNotAllowlisted,
        ProjectNotFound,
        ProjectModeMismatch,
        ProjectNotBidding,
    ),
)
async def upsert_bid_draft(
    call: Call[BidDraftUpsertRequest, None, ProjectAddressPath],
) -> BidDraftRecord:
    """Upsert keyed by (project, bidder wallet); always 200 with the stored record (a new draft
    has `createdAt == updatedAt`; repeating a request changes nothing). `bidderWalletAddress`
    must be an active wallet link of the caller (403 `wallet_not_linked`) and not the owner
    wallet (403 `owner_cannot_bid`); on an invite-only project it must be allowlisted (403
    `bidder_not_allowlisted`). The project must be indexed and visible to the caller (404
    `project_not_found`), in standard mode (409 `project_mode_mismatch`) and in `bidding` (409
    `project_not_bidding`). The body is the whole draft: an omitted `artifactUri` or `notes`
    clears a stored one."""
    principal = call.require_principal()
    project = call.path.projectAddress.lower()
    body = call.body
    payload = {
        "userId": str(principal.user_id),
        "bidderWalletAddress": body.bidderWalletAddress.lower(),
        "draftHash": body.draftHash,
        "artifactUri": body.artifactUri,
        "notes": body.notes,
    }
    row = await call.app[keys.PROJECT_SHARDS].mutate(project, bid_drafts.upsert_bid_draft, payload)
    return bid_draft_record(row)


@routes.get(
    "/v1/projects/{projectAddress}/bid-drafts",
    name="listBidDrafts",
    summary="List a project's bid drafts (project owner only)",
    auth=AuthMode.EITHER,
    response=BidDraftListResponse,
    path_params=ProjectAddressPath,
    query=BidDraftListQuery,
    errors=(ProjectNotFound, NotProjectOwner),
)
async def list_bid_drafts(
    call: Call[None, BidDraftListQuery, ProjectAddressPath],
) -> BidDraftListResponse:
    """Only for a caller with an active wallet link to the project's owner wallet (403
    `not_project_owner`); oldest first. `bidderWalletAddress` narrows it to one bidder."""
    principal = call.require_principal()
    project = call.path.projectAddress.lower()
    bidder = call.query.bidderWalletAddress
    rows = await bid_drafts.list_bid_drafts(
        call.pool, principal.user_id, project, bidder.lower() if bidder else None
    )
    items = [bid_draft_record(row) for row in rows]
    return BidDraftListResponse(
        projectAddress=project, bidderWalletAddress=bidder, items=items, count=len(items)
    )
