"""Leaderboard categories and milestone category tags with their revisions
(docs/leaderboards.md; migration 0016).

A tag upsert is one transaction: the tag row is locked (``FOR UPDATE``; a first tag is inserted
with ``ON CONFLICT DO NOTHING`` and then locked, so two first upserts serialise too), compared,
and only when it changes is it updated together with a new revision row and its
``category_tags.changed`` event. An identical
upsert writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from marketplace.events.types import CategoryTagsChangedPayload, NewEvent
from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.repositories import events


class CategoryRow(NamedTuple):
    slug: str
    display_name: str
    description: str | None
    sort_order: int
    is_active: bool
    created_at: datetime
    updated_at: datetime


class TagsRow(NamedTuple):
    project_address: str
    milestone_index: int
    owner_wallet_address: str
    categories: list[str]
    revision: int
    created_at: datetime
    updated_at: datetime


class RevisionRow(NamedTuple):
    id: uuid.UUID
    seq: int
    project_address: str
    milestone_index: int
    revision: int
    owner_wallet_address: str
    categories: list[str]
    previous_categories: list[str]
    created_at: datetime


CATEGORY_COLUMNS = "slug, display_name, description, sort_order, is_active, created_at, updated_at"
SELECT_CATEGORIES = f"""
SELECT {CATEGORY_COLUMNS} FROM leaderboard_categories ORDER BY sort_order, slug
"""
SELECT_CATEGORY = f"SELECT {CATEGORY_COLUMNS} FROM leaderboard_categories WHERE slug = $1"
# The requested slugs that are known and active, with their order (for the canonical order of a
# tag set).
SELECT_ACTIVE_OF = """
SELECT slug, sort_order FROM leaderboard_categories
WHERE slug = any($1::text[]) AND is_active
"""
INSERT_CATEGORY = f"""
INSERT INTO leaderboard_categories (slug, display_name, description, sort_order, is_active)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (slug) DO NOTHING
RETURNING {CATEGORY_COLUMNS}
"""
# NULL leaves a field as it is; $6 clears the description.
UPDATE_CATEGORY = f"""
UPDATE leaderboard_categories SET
    display_name = coalesce($2, display_name),
    description = CASE WHEN $6::bool THEN NULL ELSE coalesce($3, description) END,
    sort_order = coalesce($4, sort_order),
    is_active = coalesce($5, is_active),
    updated_at = now()
WHERE slug = $1
RETURNING {CATEGORY_COLUMNS}
"""

TAG_COLUMNS = (
    "project_address, milestone_index, owner_wallet_address, categories, revision, created_at, "
    "updated_at"
)
SELECT_TAGS = f"""
SELECT {TAG_COLUMNS} FROM milestone_category_tags
WHERE project_address = $1 AND milestone_index = $2
"""
LOCK_TAGS = SELECT_TAGS.strip() + "\nFOR UPDATE"
INSERT_FIRST_TAGS = f"""
INSERT INTO milestone_category_tags
    (project_address, milestone_index, owner_wallet_address, categories, revision)
VALUES ($1, $2, $3, $4, 1)
ON CONFLICT (project_address, milestone_index) DO NOTHING
RETURNING {TAG_COLUMNS}
"""
UPDATE_TAGS = f"""
UPDATE milestone_category_tags
SET owner_wallet_address = $3, categories = $4, revision = revision + 1, updated_at = now()
WHERE project_address = $1 AND milestone_index = $2
RETURNING {TAG_COLUMNS}
"""
REVISION_COLUMNS = (
    "id, seq, project_address, milestone_index, revision, owner_wallet_address, categories, "
    "previous_categories, created_at"
)
INSERT_REVISION = f"""
INSERT INTO milestone_category_tag_revisions
    (project_address, milestone_index, revision, owner_wallet_address, categories,
     previous_categories, changed_by)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING {REVISION_COLUMNS}
"""
# Newest first; keyset on seq (milestone_category_tag_revisions_milestone).
SELECT_REVISION_PAGE = f"""
SELECT {REVISION_COLUMNS} FROM milestone_category_tag_revisions
WHERE project_address = $1 AND milestone_index = $2 AND ($3::bigint IS NULL OR seq < $3)
ORDER BY seq DESC
LIMIT $4
"""
SELECT_MILESTONE_STATUS = """
SELECT status FROM milestones WHERE project_address = $1 AND milestone_index = $2
"""


# --- categories ---------------------------------------------------------------------------------


async def list_categories(conn: Conn) -> list[CategoryRow]:
    """Every category (active or not), by sort order then slug."""
    return rows.many(CategoryRow, await conn.fetch(SELECT_CATEGORIES))


async def category(conn: Conn, slug: str) -> CategoryRow | None:
    return rows.maybe(CategoryRow, await conn.fetchrow(SELECT_CATEGORY, slug))


async def insert_category(
    conn: Conn,
    *,
    slug: str,
    display_name: str,
    description: str | None,
    sort_order: int,
    is_active: bool,
) -> CategoryRow | None:
    """The new category, or None when the slug exists already (nothing written)."""
    record = await conn.fetchrow(
        INSERT_CATEGORY, slug, display_name, description, sort_order, is_active
    )
    return rows.maybe(CategoryRow, record)


async def update_category(
    conn: Conn,
    slug: str,
    *,
    display_name: str | None = None,
    description: str | None = None,
    clear_description: bool = False,
    sort_order: int | None = None,
    is_active: bool | None = None,
) -> CategoryRow | None:
    """The category after setting the given fields (None: unchanged), or None when unknown."""
    record = await conn.fetchrow(
        UPDATE_CATEGORY, slug, display_name, description, sort_order, is_active, clear_description
    )
    return rows.maybe(CategoryRow, record)


async def active_categories_of(conn: Conn, slugs: Sequence[str]) -> dict[str, int]:
    """``{slug: sort_order}`` of those ``slugs`` that are known, active categories."""
    return {slug: order for slug, order in await conn.fetch(SELECT_ACTIVE_OF, list(slugs))}


# --- tags ---------------------------------------------------------------------------------------


async def milestone_status(conn: Conn, project_address: str, milestone_index: int) -> str | None:
    """The indexed milestone's status, or None when the read model has no such milestone."""
    status: str | None = await conn.fetchval(
        SELECT_MILESTONE_STATUS, project_address, milestone_index
    )
    return status


async def tags(conn: Conn, project_address: str, milestone_index: int) -> TagsRow | None:
    return rows.maybe(TagsRow, await conn.fetchrow(SELECT_TAGS, project_address, milestone_index))


@dataclass(frozen=True)
class TagUpsert:
    """What an upsert left: the tag row, and the revision it wrote (None: nothing changed)."""

    tags: TagsRow
    revision: RevisionRow | None


async def upsert_tags(
    conn: Connection,
    *,
    project_address: str,
    milestone_index: int,
    owner_wallet_address: str,
    categories: Sequence[str],
    user_id: uuid.UUID,
) -> TagUpsert:
    """Store the milestone's tag set. A change (new categories or another owner wallet) bumps
    the revision and writes its revision row and ``category_tags.changed`` in the same
    transaction; an identical tag set writes nothing."""
    wanted = list(categories)
    async with conn.transaction():
        current = await conn.fetchrow(LOCK_TAGS, project_address, milestone_index)
        previous: list[str] = []
        if current is None:
            row = await conn.fetchrow(
                INSERT_FIRST_TAGS, project_address, milestone_index, owner_wallet_address, wanted
            )
            if row is None:  # a concurrent first upsert won: wait for it, then update
                current = await conn.fetchrow(LOCK_TAGS, project_address, milestone_index)
                assert current is not None
        else:
            row = None
        if current is not None:
            if (
                list(current["categories"]) == wanted
                and current["owner_wallet_address"] == owner_wallet_address
            ):
                return TagUpsert(rows.one(TagsRow, current), None)
            previous = list(current["categories"])
            row = await conn.fetchrow(
                UPDATE_TAGS, project_address, milestone_index, owner_wallet_address, wanted
            )
        assert row is not None
        revision = await conn.fetchrow(
            INSERT_REVISION,
            project_address,
            milestone_index,
            row["revision"],
            owner_wallet_address,
            wanted,
            previous,
            user_id,
        )
        assert revision is not None
        payload = CategoryTagsChangedPayload(
            projectAddress=project_address,
            milestoneIndex=milestone_index,
            ownerWalletAddress=owner_wallet_address,
            revision=row["revision"],
            revisionId=str(revision["id"]),
            categories=wanted,
            previousCategories=previous,
            userId=str(user_id),
        )
        await events.append(conn, [NewEvent(project_address, payload)])
    return TagUpsert(rows.one(TagsRow, row), rows.one(RevisionRow, revision))


async def revision_page(
    conn: Conn,
    project_address: str,
    milestone_index: int,
    *,
    before_seq: int | None,
    limit: int,
) -> list[RevisionRow]:
    """Up to ``limit`` revisions of one milestone older than ``before_seq``, newest first."""
    records = await conn.fetch(
        SELECT_REVISION_PAGE, project_address, milestone_index, before_seq, limit
    )
    return rows.many(RevisionRow, records)
