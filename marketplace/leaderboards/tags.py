"""Category tags of completed milestones: the owner's upsert and the public reads.

Rules (docs/leaderboards.md, "Tags"): the project must be visible to the caller (404 otherwise,
as every project route: not indexed and hidden look the same); ``ownerWalletAddress`` must be an
active wallet link of the caller (403 ``wallet_not_linked``) and the project's current indexed
owner (403 ``not_project_owner``); the milestone must exist (404) and be completed (409); every
slug must be an active category (422 ``unknown_category`` naming the others). The tag set is
stored in the categories' order, so the same set in another order is no change.

Writes go straight to PostgreSQL, not through the project's shard: the tag row's lock serialises
concurrent upserts of one milestone (marketplace.storage.repositories.leaderboards), and nothing
else of the project is touched.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from marketplace.leaderboards.errors import (
    CategoryTagsNotFound,
    MilestoneNotCompleted,
    MilestoneNotFound,
    UnknownCategory,
)
from marketplace.leaderboards.rules import canonical_order, is_completed, unknown_slugs
from marketplace.pagination import BIGINT_MAX, CursorKind, keyset_page
from marketplace.records.access import caller_and_visible_project, require_linked, visible_project
from marketplace.records.errors import NotProjectOwner
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import leaderboards as repo
from marketplace.storage.repositories.leaderboards import TagUpsert

REVISION_CURSOR = CursorKind("g1", (BIGINT_MAX,))


async def upsert_tags(
    pool: asyncpg.Pool,
    *,
    user_id: uuid.UUID,
    project_address: str,
    milestone_index: int,
    owner_wallet_address: str,
    categories: Sequence[str],
) -> TagUpsert:
    """Check the rules, then store the tag set (a revision and an event only when it changed).
    Addresses are lower-case; ``categories`` are distinct, well-formed slugs (the request model
    checked both)."""
    async with pool.acquire() as conn:
        wallets, project = await caller_and_visible_project(conn, user_id, project_address)
        require_linked(wallets, owner_wallet_address, "ownerWalletAddress")
        if project.owner != owner_wallet_address:
            raise NotProjectOwner("ownerWalletAddress is not the project's current owner")
        status = await repo.milestone_status(conn, project_address, milestone_index)
        if status is None:
            raise MilestoneNotFound(f"the project has no milestone {milestone_index}")
        if not is_completed(status):
            raise MilestoneNotCompleted(
                f"milestone {milestone_index} is {status}; only an approved milestone can be tagged"
            )
        active = await repo.active_categories_of(conn, categories)
        unknown = unknown_slugs(categories, active)
        if unknown:
            raise UnknownCategory(unknown)
        return await repo.upsert_tags(
            conn,
            project_address=project_address,
            milestone_index=milestone_index,
            owner_wallet_address=owner_wallet_address,
            categories=canonical_order(categories, active),
            user_id=user_id,
        )


async def _require_visible(conn: Conn, viewer: uuid.UUID | None, project_address: str) -> None:
    """404 unless the viewer (None: anonymous) may see the project: the project read rule."""
    if viewer is None:
        await visible_project(conn, project_address, ())
    else:
        await caller_and_visible_project(conn, viewer, project_address)


async def visible_tags(
    pool: asyncpg.Pool, viewer: uuid.UUID | None, project_address: str, milestone_index: int
) -> repo.TagsRow:
    async with pool.acquire() as conn:
        await _require_visible(conn, viewer, project_address)
        row = await repo.tags(conn, project_address, milestone_index)
    if row is None:
        raise CategoryTagsNotFound()
    return row


async def visible_revisions(
    pool: asyncpg.Pool,
    viewer: uuid.UUID | None,
    project_address: str,
    milestone_index: int,
    *,
    cursor: str | None,
    limit: int,
) -> tuple[list[repo.RevisionRow], str | None]:
    """A page of the milestone's revisions, newest first (empty when it was never tagged)."""
    position = REVISION_CURSOR.position(cursor)
    async with pool.acquire() as conn:
        await _require_visible(conn, viewer, project_address)
        rows = await repo.revision_page(
            conn,
            project_address,
            milestone_index,
            before_seq=position[0] if position else None,
            limit=limit + 1,
        )
    return keyset_page(rows, limit, REVISION_CURSOR, lambda row: (row.seq,))
