"""Challenge-submission artifact registrations: one per (project, submitter wallet)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple

from marketplace.events.types import (
    ChallengeSubmissionCreatedPayload,
    ChallengeSubmissionPayload,
    ChallengeSubmissionUpdatedPayload,
)
from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.repositories import party_records


class ChallengeSubmissionRow(NamedTuple):
    """A submission registration as stored (it also crosses the Ray boundary)."""

    submission_id: uuid.UUID
    project_address: str
    submitter_address: str
    submission_hash: str
    artifact_uri: str | None
    notes: str | None
    created_at: datetime
    updated_at: datetime


def event_payload(write: party_records.PartyRecordWrite) -> ChallengeSubmissionPayload:
    """``challenge_submission.created`` or ``challenge_submission.updated``."""
    model = (
        ChallengeSubmissionCreatedPayload if write.created else ChallengeSubmissionUpdatedPayload
    )
    return model(
        submissionId=write.record_id,
        projectAddress=write.project_address,
        submitterAddress=write.party_address,
        submissionHash=write.record_hash,
        userId=write.user_id,
    )


TABLE = party_records.PartyRecordTable(
    row=ChallengeSubmissionRow,
    table="challenge_submissions",
    id_column="submission_id",
    party_column="submitter_address",
    hash_column="submission_hash",
    event_payload=event_payload,
)
# $2: only these submitters (NULL: all); $3: optional single-submitter filter.
SELECT_FOR_PROJECT = f"""
SELECT {TABLE.columns} FROM challenge_submissions
WHERE project_address = $1
  AND ($2::text[] IS NULL OR submitter_address = any($2::text[]))
  AND ($3::text IS NULL OR submitter_address = $3)
ORDER BY created_at, submission_id
"""


async def get(
    conn: Conn, project_address: str, submitter_address: str
) -> ChallengeSubmissionRow | None:
    record = await conn.fetchrow(TABLE.select_one_sql, project_address, submitter_address)
    return rows.maybe(ChallengeSubmissionRow, record)


async def upsert(
    conn: Connection,
    *,
    project_address: str,
    submitter_address: str,
    submission_hash: str,
    artifact_uri: str | None,
    notes: str | None,
    user_id: uuid.UUID,
) -> ChallengeSubmissionRow:
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
) -> list[ChallengeSubmissionRow]:
    records = await conn.fetch(
        SELECT_FOR_PROJECT, project_address, visible_submitters, submitter_address
    )
    return rows.many(ChallengeSubmissionRow, records)
