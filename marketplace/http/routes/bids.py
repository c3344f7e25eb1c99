"""On-chain bids of a project (docs/read-models.md, "Bids"): the indexer's bids read model.

Straight on PostgreSQL, one statement per request, which also applies the project read
visibility rule (an invite-only project's bids only for its insiders; 404 for anyone else, as
``GET /v1/projects/{projectAddress}``). Not cached: nothing to invalidate.
"""

from __future__ import annotations

from marketplace.errors import NotFound
from marketplace.http.paths import ProjectPath
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.pagination import keyset_page
from marketplace.projects.bids import (
    BID_LIST_CURSOR,
    BidListQuery,
    BidListResponse,
    bid_model,
    bid_position,
)
from marketplace.storage.repositories import bids as bids_repo
from marketplace.types import checksum_address

routes = RouteTable(tag="projects")

NOT_VISIBLE = "project not found"


@routes.get(
    "/v1/projects/{projectAddress}/bids",
    name="listProjectBids",
    summary="List a project's on-chain bids",
    auth=AuthMode.OPTIONAL,
    path_params=ProjectPath,
    query=BidListQuery,
    response=BidListResponse,
    errors=(NotFound,),
    description=(
        "The bids posted on chain (BidPosted, BidUpdated, BidCancelled, BidSelected, "
        "BondReclaimed), one per bidder, in first-bid order (where the bidder's first BidPosted "
        "was logged), keyset-paginated: pass `nextCursor` as `cursor` for the next page; new "
        "bidders join the end. `count` is the project's bids across all pages; `limit` "
        "defaults to 20, at most 100. `status`: `active`; `cancelled` (withdrawn, bond "
        "refunded); `selected`; `not_selected` (active when another bid was selected; the bond "
        "is still in escrow); `bond_reclaimed` (a not-selected bidder took its bond back). "
        "Amounts are whole-token USDC strings; `postedAt`/`updatedAt` are block times. Same "
        "visibility as the project read: an invite-only project's bids only for active wallet "
        "links to its owner wallet, its selected worker's wallet or an allowlisted wallet; 404 "
        "for anyone else, like an unknown project."
    ),
)
async def list_bids(call: Call[None, BidListQuery, ProjectPath]) -> BidListResponse:
    query = call.query
    position = BID_LIST_CURSOR.position(query.cursor)
    after = (position[0], position[1]) if position is not None else None
    viewer = call.principal.user_id if call.principal is not None else None
    page = await bids_repo.list_bids(
        call.pool,
        viewer=viewer,
        project_address=call.path.projectAddress,
        after=after,
        limit=query.limit + 1,
    )
    if page is None:
        raise NotFound(NOT_VISIBLE)
    rows, next_cursor = keyset_page(page.rows, query.limit, BID_LIST_CURSOR, bid_position)
    return BidListResponse.model_construct(
        projectAddress=checksum_address(call.path.projectAddress),
        items=[bid_model(row) for row in rows],
        count=page.total,
        nextCursor=next_cursor,
    )
