"""Bid drafts: one per (project, bidder wallet). Addresses and hashes are lower-case."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple

from marketplace.events.types import BidDraftCreatedPayload, BidDraftPayload, BidDraftUpdatedPayload
from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.repositories import party_records


class BidDraftRow(NamedTuple):
    """A bid draft as stored (it also crosses the Ray boundary, as a shard command's result)."""

    draft_id: uuid.UUID
    project_address: str
    bidder_address: str
    draft_hash: str
    artifact_uri: str | None
    notes: str | None
    created_at: datetime
    updated_at: datetime


def event_payload(write: party_records.PartyRecordWrite) -> BidDraftPayload:
    """``bid_draft.created`` or ``bid_draft.updated``."""
    model = BidDraftCreatedPayload if write.created else BidDraftUpdatedPayload
    return model(
        draftId=write.record_id,
        projectAddress=write.project_address,
        bidderAddress=write.party_address,
        draftHash=write.record_hash,
        userId=write.user_id,
    )


TABLE = party_records.PartyRecordTable(
    row=BidDraftRow,
    table="bid_drafts",
    id_column="draft_id",
    party_column="bidder_address",
    hash_column="draft_hash",
    event_payload=event_payload,
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
) -> BidDraftRow:
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
) -> list[BidDraftRow]:
    return rows.many(
        BidDraftRow, await conn.fetch(SELECT_FOR_PROJECT, project_address, bidder_address)
    )
