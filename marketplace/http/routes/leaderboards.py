"""Leaderboards (spec sections 2 and 4 "Leaderboards and agents", issue #15): the categories
the owner's category tags of completed milestones with their revisions, and the boards. Rules in
marketplace.leaderboards; docs/leaderboards.md."""

from __future__ import annotations

import asyncio
from datetime import datetime

from aiohttp import web

from marketplace.http import keys
from marketplace.http.paths import ProjectMilestonePath
from marketplace.http.routes.indexer_status import current_freshness
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.leaderboards import boards, categories, tags
from marketplace.leaderboards.errors import (
    CategoryTagsNotFound,
    MilestoneNotCompleted,
    MilestoneNotFound,
    UnknownCategory,
)
from marketplace.leaderboards.models import (
    BoardQuery,
    CategoryListResponse,
    IndexerFreshnessStatus,
    LeaderboardResponse,
    LeaderboardRow,
    MilestoneTags,
    TagRevision,
    TagRevisionsQuery,
    TagRevisionsResponse,
    TagUpsertRequest,
)
from marketplace.records.errors import NotProjectOwner, ProjectNotFound, WalletNotLinked
from marketplace.ttl_cache import TtlCache

routes = RouteTable(tag="leaderboards")
BoardVersion = tuple[int, datetime | None]
PageKey = tuple[tuple[str, ...], str, str, int, str | None]
FRESHNESS_CACHE: web.AppKey[TtlCache[None, IndexerFreshnessStatus]] = web.AppKey(
    "leaderboard_freshness", TtlCache
)
VERSION_CACHE: web.AppKey[TtlCache[None, BoardVersion]] = web.AppKey(
    "leaderboard_version", TtlCache
)
# Board pages by query, each with the board version it was read at: a page is served again only
# while the version (the consumer's last applied event, the last window refresh) is unchanged,
# and for at most PAGE_TTL_SECONDS (rows also carry usernames, which change without a board
# event).
PAGE_CACHE: web.AppKey[TtlCache[PageKey, tuple[BoardVersion, boards.BoardPage]]] = web.AppKey(
    "leaderboard_pages", TtlCache
)
PAGE_CACHE_SIZE = 512
PAGE_TTL_SECONDS = 5.0

TAGS_PATH = "/v1/projects/{projectAddress}/milestones/{milestoneIndex}/category-tags"


@routes.get(
    "/v1/leaderboard/categories",
    name="listLeaderboardCategories",
    summary="The leaderboard categories, by sortOrder",
    auth=AuthMode.OPTIONAL,
    response=CategoryListResponse,
    exclude_none=True,
)
async def list_categories(call: Call[None, None, None]) -> CategoryListResponse:
    """Every category, active or not, ordered by `sortOrder`, then slug: `{slug, displayName,
    sortOrder, isActive, createdAt, updatedAt}` and `description` when it has one. Only active
    categories are accepted in new tags; an inactive one stays listed because existing tags
    keep naming it. Operators manage them with `marketplace admin categories`."""
    items = await categories.list_categories(call.pool)
    return CategoryListResponse(items=items, count=len(items))


@routes.post(
    TAGS_PATH,
    name="upsertMilestoneCategoryTags",
    summary="Tag a completed milestone with categories (project owner)",
    auth=AuthMode.EITHER,
    guarded=True,
    response=MilestoneTags,
    path_params=ProjectMilestonePath,
    body=TagUpsertRequest,
    errors=(
        WalletNotLinked,
        NotProjectOwner,
        ProjectNotFound,
        MilestoneNotFound,
        MilestoneNotCompleted,
        UnknownCategory,
    ),
)
async def upsert_tags(call: Call[TagUpsertRequest, None, ProjectMilestonePath]) -> MilestoneTags:
    """Sets the milestone's category tags to `categories` (1..5 distinct slugs; otherwise 400
    `invalid_request`) and answers the tag set, stored in the categories' order (sortOrder,
    then slug). `ownerWalletAddress` must be an active wallet link of the caller (403
    `wallet_not_linked`) and the project's current indexed owner (403 `not_project_owner`); a
    project that is not indexed or hidden from the caller is 404 `project_not_found`, a
    milestone the project does not have 404 `milestone_not_found`. The milestone must be
    completed: `approved` (an owner approval, or a dispute resolved or finalized as approved),
    else 409 `milestone_not_completed`. Every slug must be an active category, else 422
    `unknown_category` with `unknown` naming the others. Each change writes a revision (see
    `.../category-tags/revisions`) and a `category_tags.changed` event; sending the tag set
    that is stored (in any order, by the same owner wallet) changes and records nothing."""
    principal = call.require_principal()
    result = await tags.upsert_tags(
        call.pool,
        user_id=principal.user_id,
        project_address=call.path.projectAddress,
        milestone_index=call.path.milestoneIndex,
        owner_wallet_address=call.body.ownerWalletAddress,
        categories=call.body.categories,
    )
    return MilestoneTags.from_row(result.tags)


@routes.get(
    TAGS_PATH,
    name="getMilestoneCategoryTags",
    summary="A milestone's category tags",
    auth=AuthMode.OPTIONAL,
    response=MilestoneTags,
    path_params=ProjectMilestonePath,
    errors=(ProjectNotFound, CategoryTagsNotFound),
)
async def get_tags(call: Call[None, None, ProjectMilestonePath]) -> MilestoneTags:
    """The milestone's current tag set; 404 `category_tags_not_found` when it was never tagged.
    The tags of an invite-only project are visible only to those who see the project (an
    active link to its owner, selected worker or an allowlisted wallet); for anyone else, as for
    a project that is not indexed, 404 `project_not_found`."""
    viewer = call.principal.user_id if call.principal is not None else None
    row = await tags.visible_tags(
        call.pool, viewer, call.path.projectAddress, call.path.milestoneIndex
    )
    return MilestoneTags.from_row(row)


@routes.get(
    TAGS_PATH + "/revisions",
    name="listMilestoneCategoryTagRevisions",
    summary="A milestone's category tag revisions, newest first",
    auth=AuthMode.OPTIONAL,
    response=TagRevisionsResponse,
    path_params=ProjectMilestonePath,
    query=TagRevisionsQuery,
    errors=(ProjectNotFound,),
)
async def list_revisions(
    call: Call[None, TagRevisionsQuery, ProjectMilestonePath],
) -> TagRevisionsResponse:
    """Every change of the milestone's tag set, newest first: `revision` (1, 2, ...),
    `categories` and the `previousCategories` it replaced (empty for revision 1). `limit`
    1..100 (default 50); pass `nextCursor` back as `cursor` for the next page. Empty when the
    milestone was never tagged. Visibility as for the tags (404 `project_not_found`)."""
    viewer = call.principal.user_id if call.principal is not None else None
    rows, next_cursor = await tags.visible_revisions(
        call.pool,
        viewer,
        call.path.projectAddress,
        call.path.milestoneIndex,
        cursor=call.query.cursor,
        limit=call.query.limit,
    )
    items = [TagRevision.from_row(row) for row in rows]
    return TagRevisionsResponse(items=items, count=len(items), nextCursor=next_cursor)


@routes.get(
    "/v1/leaderboards",
    name="getLeaderboard",
    summary="Workers ranked by their completed milestones, with the board's freshness",
    auth=AuthMode.OPTIONAL,
    response=LeaderboardResponse,
    query=BoardQuery,
    errors=(UnknownCategory,),
)
async def get_leaderboard(call: Call[None, BoardQuery, None]) -> LeaderboardResponse:
    """Worker wallets ranked over the completed (`approved`) milestones of indexed projects in
    the given `categories` (comma-separated slugs; a milestone counts once even when tagged with
    several; omitted: every completed milestone, tagged or not), completed within `window`
    (`all`, `90d`, `30d`). `sort`: `payout` (total payout), `milestones` (count) or `recent`
    (latest completion), descending; ties by wallet address. `limit` 1..100 (default 50); pass
    `nextCursor` back as `cursor` (with the same sort) for the next page: pages never repeat or
    skip a row while the board is unchanged. `rank` is the row's position. Invite-only
    projects count but no row names a project. `userId`/`username`: the user actively linked
    to the wallet, else null. `freshness`: `source` `indexed` (`unknown` before the indexer's
    first sync), `indexedAt` and `lastSuccessfulSyncAt` from the indexer, `stale` when the
    board's consumer lags the indexer's change events by more than `freshnessTargetMs` or the
    indexer itself is stale. Unknown slugs: 422 `unknown_category` naming them; a bad `sort`,
    `window`, `limit` or `cursor`: 400."""
    query = call.query
    wanted = boards.parse_categories(query.categories)
    key: PageKey = (tuple(wanted), query.sort, query.window, query.limit, query.cursor)
    version, freshness = await asyncio.gather(board_version(call.app), board_freshness(call.app))
    cached = call.app[PAGE_CACHE].get(key)
    if cached is not None and cached[0] == version:
        page = cached[1]
    else:
        page = await boards.board_page(
            call.pool,
            categories=wanted,
            sort=query.sort,
            window=query.window,
            limit=query.limit,
            cursor=query.cursor,
        )
        call.app[PAGE_CACHE].put(key, (version, page), PAGE_TTL_SECONDS)
    items = [LeaderboardRow.from_board(row) for row in page.rows]
    return LeaderboardResponse(
        items=items, count=len(items), nextCursor=page.next_cursor, freshness=freshness
    )


async def board_freshness(app: web.Application) -> IndexerFreshnessStatus:
    """The boards' freshness, computed at most once per
    ``MARKETPLACE_LEADERBOARD_FRESHNESS_CACHE_MS`` in each frontend: it is the same for every
    board and every caller, and costs two queries and a Redis read."""
    cache = app[FRESHNESS_CACHE]
    cached = cache.get(None)
    if cached is not None:
        return cached
    settings = app[keys.SETTINGS]
    indexer, lag = await asyncio.gather(current_freshness(app), boards.board_lag(app[keys.PG_POOL]))
    target = settings.leaderboard_freshness_target_ms
    cursor = indexer.cursor
    freshness = IndexerFreshnessStatus(
        source=indexer.source,
        indexedAt=cursor.last_synced_block_time if cursor is not None else None,
        stale=indexer.stale or lag.stale(target),
        freshnessTargetMs=target,
        lastSuccessfulSyncAt=cursor.last_successful_sync_at if cursor is not None else None,
    )
    cache.put(None, freshness, settings.leaderboard_freshness_cache_ms / 1000)
    return freshness


async def board_version(app: web.Application) -> BoardVersion:
    """The boards' version, read at most once per ``MARKETPLACE_LEADERBOARD_FRESHNESS_CACHE_MS``
    in each frontend (the same bound as the freshness: a cached page may be that much older
    than the consumer's last batch)."""
    cache = app[VERSION_CACHE]
    cached = cache.get(None)
    if cached is not None:
        return cached
    version = await boards.board_version(app[keys.PG_POOL])
    cache.put(None, version, app[keys.SETTINGS].leaderboard_freshness_cache_ms / 1000)
    return version


def setup(app: web.Application) -> None:
    app[FRESHNESS_CACHE] = TtlCache(1)
    app[VERSION_CACHE] = TtlCache(1)
    app[PAGE_CACHE] = TtlCache(PAGE_CACHE_SIZE)
