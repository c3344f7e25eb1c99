"""Bid drafts: one per (project, bidder wallet). Addresses and hashes are lower-case."""

from __future__ import annotations

import uuid

import asyncpg

from marketplace.events.types import EventType
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.repositories import party_records

TABLE = party_records.PartyRecordTable(
    table="bid_drafts",
    id_column="draft_id",
    party_column="bidder_address",
    hash_column="draft_hash",
    created_event=EventType.BID_DRAFT_CREATED,
    updated_event=EventType.BID_DRAFT_UPDATED,
    id_field="draftId",
    party_field="bidderAddress",
    hash_field="draftHash",
)
SELECT_FOR_PROJECT = f"""
SELECT {TABLE.columns} FROM bid_drafts
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
    """Insert or replace the draft (see :func:`party_records.upsert`): ``bid_draft.created`` or
    ``bid_draft.updated``."""
    return await party_records.upsert(
        conn,
        TABLE,
        project_address=project_address,
        party_address=bidder_address,
        record_hash=draft_hash,
        artifact_uri=artifact_uri,
        notes=notes,
        user_id=user_id,
    )


async def list_for_project(
    conn: Conn, project_address: str, bidder_address: str | None
) -> list[asyncpg.Record]:
    return await conn.fetch(SELECT_FOR_PROJECT, project_address, bidder_address)
