"""Challenge-submission artifact registrations: one per (project, submitter wallet)."""

from __future__ import annotations

import uuid

import asyncpg

from marketplace.events.types import EventType
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.repositories import party_records

TABLE = party_records.PartyRecordTable(
    table="challenge_submissions",
    id_column="submission_id",
    party_column="submitter_address",
    hash_column="submission_hash",
    created_event=EventType.CHALLENGE_SUBMISSION_CREATED,
    updated_event=EventType.CHALLENGE_SUBMISSION_UPDATED,
    id_field="submissionId",
    party_field="submitterAddress",
    hash_field="submissionHash",
)
# $2: only these submitters (NULL: all); $3: optional single-submitter filter.
SELECT_FOR_PROJECT = f"""
SELECT {TABLE.columns} FROM challenge_submissions
WHERE project_address = $1
  AND ($2::text[] IS NULL OR submitter_address = any($2::text[]))
  AND ($3::text IS NULL OR submitter_address = $3)
ORDER BY created_at, submission_id
"""


async def get(conn: Conn, project_address: str, submitter_address: str) -> asyncpg.Record | None:
    return await conn.fetchrow(TABLE.select_one_sql, project_address, submitter_address)


async def upsert(
    conn: Connection,
    *,
    project_address: str,
    submitter_address: str,
    submission_hash: str,
    artifact_uri: str | None,
    notes: str | None,
    user_id: uuid.UUID,
) -> asyncpg.Record:
    """Insert or replace the registration (see :func:`party_records.upsert`):
    ``challenge_submission.created`` or ``challenge_submission.updated``."""
    return await party_records.upsert(
        conn,
        TABLE,
        project_address=project_address,
        party_address=submitter_address,
        record_hash=submission_hash,
        artifact_uri=artifact_uri,
        notes=notes,
        user_id=user_id,
    )


async def list_for_project(
    conn: Conn,
    project_address: str,
    *,
    visible_submitters: list[str] | None,
    submitter_address: str | None,
) -> list[asyncpg.Record]:
    return await conn.fetch(
        SELECT_FOR_PROJECT, project_address, visible_submitters, submitter_address
    )
