"""Dispute evidence: at most one per (project, disputed milestone, party role)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple

from marketplace.events.types import DisputeEvidenceSubmittedPayload, NewEvent
from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection, fetch_one
from marketplace.storage.repositories import events
from marketplace.types import JsonObject

COLUMNS = """evidence_id, project_address, milestone_index, submitter_address, submitter_role,
    evidence_hash, evidence_payload, created_at"""
# The UNIQUE constraint dispute_evidence_one_per_party decides "one per party": a second insert
# raises UniqueViolationError, whatever raced with it.
INSERT = f"""
INSERT INTO dispute_evidence
    (project_address, milestone_index, submitter_address, submitter_role, evidence_hash,
     evidence_payload, dispute_opened_at, submitted_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING {COLUMNS}
"""
UNIQUE_CONSTRAINT = "dispute_evidence_one_per_party"
SELECT_FOR_PROJECT = f"""
SELECT {COLUMNS} FROM dispute_evidence
WHERE project_address = $1 AND ($2::integer IS NULL OR milestone_index = $2)
ORDER BY milestone_index, created_at, evidence_id
"""


class DisputeEvidenceRow(NamedTuple):
    """Dispute evidence as stored (it also crosses the Ray boundary)."""

    evidence_id: uuid.UUID
    project_address: str
    milestone_index: int
    submitter_address: str
    submitter_role: str
    evidence_hash: str
    evidence_payload: JsonObject | None  # free-form JSON object, as submitted
    created_at: datetime


async def insert(
    conn: Connection,
    *,
    project_address: str,
    milestone_index: int,
    submitter_address: str,
    submitter_role: str,
    evidence_hash: str,
    evidence_payload: JsonObject | None,
    dispute_opened_at: int | None,
    user_id: uuid.UUID,
) -> DisputeEvidenceRow:
    """Store one party's evidence and record ``dispute_evidence.submitted`` in the same
    transaction; a second submission raises UniqueViolationError and records nothing."""
    async with conn.transaction():
        record = await fetch_one(
            conn,
            INSERT,
            project_address,
            milestone_index,
            submitter_address,
            submitter_role,
            evidence_hash,
            evidence_payload,
            dispute_opened_at,
            user_id,
        )
        row = rows.one(DisputeEvidenceRow, record)
        payload = DisputeEvidenceSubmittedPayload(
            evidenceId=str(row.evidence_id),
            projectAddress=project_address,
            milestoneIndex=milestone_index,
            submitterAddress=submitter_address,
            submitterRole=submitter_role,
            evidenceHash=evidence_hash,
            userId=str(user_id),
        )
        await events.append(conn, [NewEvent(project_address, payload)])
    return row


async def list_for_project(
    conn: Conn, project_address: str, milestone_index: int | None
) -> list[DisputeEvidenceRow]:
    records = await conn.fetch(SELECT_FOR_PROJECT, project_address, milestone_index)
    return rows.many(DisputeEvidenceRow, records)
