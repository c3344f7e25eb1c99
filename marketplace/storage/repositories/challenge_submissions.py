"""Challenge-submission artifact registrations: one per (project, submitter wallet)."""

from __future__ import annotations

import uuid

import asyncpg

from marketplace.events.types import EventType, NewEvent
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.repositories import events

COLUMNS = """submission_id, project_address, submitter_address, submission_hash, artifact_uri,
    notes, created_at, updated_at"""

SELECT_ONE = f"""
SELECT {COLUMNS} FROM challenge_submissions
WHERE project_address = $1 AND submitter_address = $2
"""
# Whole-record replace, as for bid drafts; an identical repeat writes nothing.
UPSERT = f"""
INSERT INTO challenge_submissions AS s
    (project_address, submitter_address, submission_hash, artifact_uri, notes, created_by,
     updated_by)
VALUES ($1, $2, $3, $4, $5, $6, $6)
ON CONFLICT (project_address, submitter_address) DO UPDATE
    SET submission_hash = EXCLUDED.submission_hash,
        artifact_uri = EXCLUDED.artifact_uri,
        notes = EXCLUDED.notes,
        updated_by = EXCLUDED.updated_by,
        updated_at = now()
    WHERE (s.submission_hash, s.artifact_uri, s.notes)
        IS DISTINCT FROM (EXCLUDED.submission_hash, EXCLUDED.artifact_uri, EXCLUDED.notes)
RETURNING {COLUMNS}, (xmax = 0) AS created
"""
# $2: only these submitters (NULL: all); $3: optional single-submitter filter.
SELECT_FOR_PROJECT = f"""
SELECT {COLUMNS} FROM challenge_submissions
WHERE project_address = $1
  AND ($2::text[] IS NULL OR submitter_address = any($2::text[]))
  AND ($3::text IS NULL OR submitter_address = $3)
ORDER BY created_at, submission_id
"""


async def get(conn: Conn, project_address: str, submitter_address: str) -> asyncpg.Record | None:
    return await conn.fetchrow(SELECT_ONE, project_address, submitter_address)


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
    """Insert or replace the registration; a write records ``challenge_submission.created`` or
    ``challenge_submission.updated`` in its transaction."""
    async with conn.transaction():
        row = await conn.fetchrow(
            UPSERT,
            project_address,
            submitter_address,
            submission_hash,
            artifact_uri,
            notes,
            user_id,
        )
        if row is None:  # identical to what is stored: nothing written, no event
            row = await conn.fetchrow(SELECT_ONE, project_address, submitter_address)
            assert row is not None
            return row
        kind = (
            EventType.CHALLENGE_SUBMISSION_CREATED
            if row["created"]
            else EventType.CHALLENGE_SUBMISSION_UPDATED
        )
        payload = {
            "submissionId": str(row["submission_id"]),
            "projectAddress": project_address,
            "submitterAddress": submitter_address,
            "submissionHash": submission_hash,
            "userId": str(user_id),
        }
        await events.append(conn, [NewEvent(kind, project_address, payload)])
    return row


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
