"""Bid drafts (spec section 4 "Bid drafts"): upsert through the project's shard actor, owner-only
listing straight from Postgres. Rules in marketplace.records.bid_drafts; docs/records.md."""

from __future__ import annotations

from marketplace.http import keys
from marketplace.http.paths import ProjectPath
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
)

routes = RouteTable(tag="bid-drafts")


@routes.post(
    "/v1/projects/{projectAddress}/bid-drafts",
    name="upsertBidDraft",
    summary="Create or replace the caller's bid draft for a bidder wallet",
    auth=AuthMode.EITHER,
    response=BidDraftRecord,
    path_params=ProjectPath,
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
    call: Call[BidDraftUpsertRequest, None, ProjectPath],
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
    project = call.path.projectAddress
    body = call.body
    command = bid_drafts.UpsertBidDraft(
        project_address=project,
        user_id=principal.user_id,
        bidder_address=body.bidderWalletAddress,
        draft_hash=body.draftHash,
        artifact_uri=body.artifactUri,
        notes=body.notes,
    )
    row = await call.app[keys.PROJECT_SHARDS].run(command)
    return BidDraftRecord.from_row(row)


@routes.get(
    "/v1/projects/{projectAddress}/bid-drafts",
    name="listBidDrafts",
    summary="List a project's bid drafts (project owner only)",
    auth=AuthMode.EITHER,
    response=BidDraftListResponse,
    path_params=ProjectPath,
    query=BidDraftListQuery,
    errors=(ProjectNotFound, NotProjectOwner),
)
async def list_bid_drafts(
    call: Call[None, BidDraftListQuery, ProjectPath],
) -> BidDraftListResponse:
    """Only for a caller with an active wallet link to the project's owner wallet (403
    `not_project_owner`); oldest first. `bidderWalletAddress` narrows it to one bidder."""
    principal = call.require_principal()
    project = call.path.projectAddress
    bidder = call.query.bidderWalletAddress
    rows = await bid_drafts.list_bid_drafts(call.pool, principal.user_id, project, bidder)
    items = [BidDraftRecord.from_row(row) for row in rows]
    return BidDraftListResponse(
        projectAddress=project, bidderWalletAddress=bidder, items=items, count=len(items)
    )
