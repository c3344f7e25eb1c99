"""Bid drafts: one per (project, bidder wallet). Addresses and hashes are lower-case."""

from __future__ import annotations

import uuid

import asyncpg

from marketplace.events.types import EventType, NewEvent
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.repositories import events

COLUMNS = """draft_id, project_address, bidder_address, draft_hash, artifact_uri, notes,
    created_at, updated_at"""

# The request is the whole draft: absent optional fields clear the stored ones. A repeat of the
# stored values changes nothing (updated_at included), so a retried request is a no-op.
UPSERT = f"""
INSERT INTO bid_drafts AS d
    (project_address, bidder_address, draft_hash, artifact_uri, notes, created_by, updated_by)
VALUES ($1, $2, $3, $4, $5, $6, $6)
ON CONFLICT (project_address, bidder_address) DO UPDATE
    SET draft_hash = EXCLUDED.draft_hash,
        artifact_uri = EXCLUDED.artifact_uri,
        notes = EXCLUDED.notes,
        updated_by = EXCLUDED.updated_by,
        updated_at = now()
    WHERE (d.draft_hash, d.artifact_uri, d.notes)
        IS DISTINCT FROM (EXCLUDED.draft_hash, EXCLUDED.artifact_uri, EXCLUDED.notes)
RETURNING {COLUMNS}, (xmax = 0) AS created
"""
SELECT_ONE = f"""
SELECT {COLUMNS}, false AS created FROM bid_drafts
WHERE project_address = $1 AND bidder_address = $2
"""
SELECT_FOR_PROJECT = f"""
SELECT {COLUMNS} FROM bid_drafts
WHERE project_address = $1 AND ($2::text IS NULL OR bidder_address = $2)
ORDER BY created_at, draft_id
"""


async def upsert(
    conn: Connection,
    *,
    project_address: str,
    bidder_address: str,
    draft_hash: str,
    artifact_uri: str | None,
    notes: str | None,
    user_id: uuid.UUID,
) -> asyncpg.Record:
    """Insert or replace the draft; the row carries ``created`` (true on insert). A write
    records ``bid_draft.created`` or ``bid_draft.updated`` in its transaction."""
    async with conn.transaction():
        row = await conn.fetchrow(
            UPSERT, project_address, bidder_address, draft_hash, artifact_uri, notes, user_id
        )
        if row is None:  # identical to what is stored: nothing written, no event
            row = await conn.fetchrow(SELECT_ONE, project_address, bidder_address)
            assert row is not None
            return row
        kind = EventType.BID_DRAFT_CREATED if row["created"] else EventType.BID_DRAFT_UPDATED
        payload = {
            "draftId": str(row["draft_id"]),
            "projectAddress": project_address,
            "bidderAddress": bidder_address,
            "draftHash": draft_hash,
            "userId": str(user_id),
        }
        await events.append(conn, [NewEvent(kind, project_address, payload)])
    return row


async def list_for_project(
    conn: Conn, project_address: str, bidder_address: str | None
) -> list[asyncpg.Record]:
    return await conn.fetch(SELECT_FOR_PROJECT, project_address, bidder_address)
