"""SQL of verifier jobs (docs/verifier.md): the request rows, inserted with their job on the
`verifier` queue in one statement, their state read from that job, the listing, the completion
with the milestone read model, the attempts' raw log and the retention sweep. JSON columns go
through the pool's codec: Python values in and out.

A row's status, attempts, next attempt and error are its queue job's, and nothing else's: the
job's completion writes the row's result in the same transaction, and the `verifier` queue never
prunes its completed jobs (``QueueSpec.keep_completed``; a foreign key holds every row's job).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Literal, NamedTuple, TypedDict

from marketplace.events.types import NewEvent, VerifierJobCompletedPayload
from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.repositories import events
from marketplace.storage.repositories.jobs import NewJob, with_new_job
from marketplace.types import JsonObject

# The columns every read returns: the row, and its state from its queue job (the job's API-safe
# error_message, never its traceback).
RECORD = """
    v.id, v.seq, v.job_id, v.created_by, v.project_address, v.milestone_index,
    v.check_policy_id, v.delivery_ref, v.chain_id, v.requested_nonce, v.requested_deadline,
    v.attestation_nonce, v.max_attempts, v.dispute_opened_at, v.created_at, v.completed_at,
    v.retention_expires_at, v.passes, v.evidence_hash, v.evidence, v.attestation,
    j.status, j.attempt_count,
    CASE WHEN j.status = 'queued' AND j.attempt_count > 0 THEN j.next_attempt_at END
        AS next_attempt_at,
    j.error_message AS error,
    greatest(v.updated_at, j.started_at, j.finished_at,
             CASE WHEN j.attempt_count > 0 THEN j.next_attempt_at END) AS updated_at"""
FROM = "verifier_jobs v JOIN jobs j ON j.id = v.job_id"

# The row and its job in one statement ($1-$5 the job's, with_new_job).
INSERT = with_new_job("""
INSERT INTO verifier_jobs (id, created_by, project_address, milestone_index, check_policy_id,
                           delivery_ref, chain_id, requested_nonce, requested_deadline,
                           attestation_nonce, max_attempts, dispute_opened_at, job_id)
SELECT $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, job.id FROM job
RETURNING created_at
""")

SELECT_ONE = f"SELECT {RECORD} FROM {FROM} WHERE v.id = $1"

# One verdict per dispute: requests for the same dispute take this lock (transaction-scoped),
# then look for its job that has not failed, and insert only when there is none.
LOCK_DISPUTE = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
SELECT_DISPUTE_JOB = f"""
SELECT {RECORD} FROM {FROM}
WHERE v.project_address = $1 AND v.milestone_index = $2 AND v.dispute_opened_at = $3
  AND j.status <> 'failed'
ORDER BY v.seq DESC
LIMIT 1
"""

# The acceptance policy the owner fixed for a milestone; only metadata whose claimed owner is the
# indexed owner counts (as for every other field of the claimed metadata).
SELECT_ACCEPTANCE_POLICY = """
SELECT item ->> 'checkPolicyId'
FROM projects p
JOIN project_metadata md
  ON md.project_address = p.project_address AND md.owner_address = p.owner_address
CROSS JOIN LATERAL jsonb_array_elements(md.milestone_policies) AS item
WHERE p.project_address = $1 AND (item ->> 'milestoneIndex')::int = $2
"""

# Jobs the viewer may list: created by it, or of a project whose indexed owner or selected worker
# is one of its active wallets; every job for verifier admins ($2).
SELECT_PAGE = f"""
WITH viewer AS (
    SELECT coalesce(array_agg(w.wallet_address), '{{}}'::text[]) AS wallets
    FROM wallet_links w WHERE w.user_id = $1 AND w.revoked_at IS NULL
)
SELECT {RECORD}
FROM {FROM} CROSS JOIN viewer vw
WHERE ($2::bool OR v.created_by = $1 OR EXISTS (
        SELECT 1 FROM projects p WHERE p.project_address = v.project_address
          AND (p.owner_address = any(vw.wallets) OR p.selected_builder_address = any(vw.wallets))))
  AND ($3::text IS NULL OR v.project_address = $3)
  AND ($4::int IS NULL OR v.milestone_index = $4)
  AND ($5::text IS NULL OR j.status = $5)
  AND ($6::bigint IS NULL OR v.seq < $6)
ORDER BY v.seq DESC
LIMIT $7
"""

# The attempt's start: who runs it, appended to the attempts' raw log.
RECORD_ATTEMPT = """
UPDATE verifier_jobs
SET raw_evidence = jsonb_set(coalesce(raw_evidence, '{"attempts": []}'::jsonb), '{attempts}',
                             coalesce(raw_evidence -> 'attempts', '[]'::jsonb) || $2::jsonb),
    updated_at = now()
WHERE id = $1 AND completed_at IS NULL
"""

# Run in the transaction that completes the row's queue job.
COMPLETE = """
UPDATE verifier_jobs
SET completed_at = now(), updated_at = now(),
    retention_expires_at = now() + make_interval(days => $2),
    passes = $3, evidence_hash = $4, evidence = $5::jsonb, attestation = $6::jsonb,
    raw_evidence = coalesce(raw_evidence, '{}'::jsonb) || jsonb_build_object('result', $7::jsonb),
    logs = $8
WHERE id = $1 AND completed_at IS NULL
RETURNING project_address, milestone_index, check_policy_id
"""
# The newest job by request wins, whatever order jobs complete in: an older job retried until
# after a newer one completed does not replace the newer result. (Under concurrent completions
# the row lock serialises the updates and the second re-checks this condition on the new row.)
UPDATE_MILESTONE = """
UPDATE milestones m
SET latest_verifier_job_id = $3, latest_verifier_passes = $4, latest_verifier_evidence_hash = $5
WHERE m.project_address = $1 AND m.milestone_index = $2
  AND NOT EXISTS (
      SELECT 1 FROM verifier_jobs shown, verifier_jobs done
      WHERE shown.id = m.latest_verifier_job_id AND done.id = $3 AND shown.seq > done.seq)
"""

SELECT_RAW = "SELECT raw_evidence, logs, raw_deleted_at FROM verifier_jobs WHERE id = $1"

# Completed jobs expire at retention_expires_at; failed ones (no result, only their attempts'
# log) the same number of days ($2) after their queue job failed.
SWEEP = """
WITH expired AS (
    SELECT v.id FROM verifier_jobs v
    WHERE v.raw_deleted_at IS NULL AND v.retention_expires_at <= now()
    UNION
    SELECT v.id FROM verifier_jobs v JOIN jobs j ON j.id = v.job_id
    WHERE v.raw_deleted_at IS NULL AND j.status = 'failed'
      AND j.finished_at <= now() - make_interval(days => $2)
    LIMIT $1
),
locked AS (
    SELECT v.id FROM verifier_jobs v JOIN expired USING (id) FOR UPDATE OF v SKIP LOCKED
)
UPDATE verifier_jobs v SET raw_evidence = NULL, logs = NULL, raw_deleted_at = now()
FROM locked WHERE v.id = locked.id
"""

# The status of a row's queue job (marketplace.jobs.JobStatus's values).
JobStatus = Literal["queued", "running", "completed", "failed"]


class VerifierJobRow(NamedTuple):
    """A row of every read of :data:`RECORD`: the request row and its queue job's state."""

    id: uuid.UUID
    seq: int
    job_id: int
    created_by: uuid.UUID
    project_address: str
    milestone_index: int
    check_policy_id: str
    delivery_ref: str
    chain_id: int
    requested_nonce: Decimal | None  # numeric(78, 0)
    requested_deadline: Decimal | None
    attestation_nonce: Decimal
    max_attempts: int
    dispute_opened_at: int | None
    created_at: datetime
    completed_at: datetime | None
    retention_expires_at: datetime | None
    # The result: all set once completed (verifier_jobs_completed), else all None.
    passes: bool | None
    evidence_hash: str | None
    evidence: JsonObject | None
    attestation: JsonObject | None  # the signed AttestationPayload
    status: JobStatus
    attempt_count: int
    next_attempt_at: datetime | None
    error: str | None
    updated_at: datetime


class RawEvidence(TypedDict, total=False):
    """``raw_evidence``: each attempt's start (:data:`RECORD_ATTEMPT`) and the completing
    attempt's raw facts (:data:`COMPLETE`)."""

    attempts: list[JsonObject]
    result: JsonObject


class RawEvidenceRow(NamedTuple):
    """The row of :data:`SELECT_RAW`: the attempts' raw log and the output, until swept."""

    raw_evidence: RawEvidence | None
    logs: str | None
    raw_deleted_at: datetime | None


async def insert(
    conn: Conn,
    *,
    job: NewJob,
    job_id: uuid.UUID,
    created_by: uuid.UUID,
    project_address: str,
    milestone_index: int,
    check_policy_id: str,
    delivery_ref: str,
    chain_id: int,
    requested_nonce: int | None,
    requested_deadline: int | None,
    attestation_nonce: int,
    max_attempts: int,
    dispute_opened_at: int,
) -> datetime:
    """Insert the request row with its queue job (``job``, whose payload names ``job_id``) in
    one statement; returns the row's ``created_at``."""
    created_at = await conn.fetchval(
        INSERT,
        *job.params(),
        job_id,
        created_by,
        project_address,
        milestone_index,
        check_policy_id,
        delivery_ref,
        chain_id,
        requested_nonce,
        requested_deadline,
        attestation_nonce,
        max_attempts,
        dispute_opened_at,
    )
    if not isinstance(created_at, datetime):
        raise LookupError(f"verifier job {job_id}: its queue job's idempotency key is taken")
    return created_at


async def lock_dispute(
    conn: Connection, project: str, milestone_index: int, opened_at: int
) -> None:
    await conn.execute(LOCK_DISPUTE, f"verifier-dispute:{project}:{milestone_index}:{opened_at}")


async def dispute_job(
    conn: Conn, project: str, milestone_index: int, opened_at: int
) -> VerifierJobRow | None:
    """The dispute's job that is queued, running or completed, if any."""
    return rows.maybe(
        VerifierJobRow,
        await conn.fetchrow(SELECT_DISPUTE_JOB, project, milestone_index, opened_at),
    )


async def acceptance_policy(conn: Conn, project: str, milestone_index: int) -> str | None:
    value: str | None = await conn.fetchval(SELECT_ACCEPTANCE_POLICY, project, milestone_index)
    return value


async def get(conn: Conn, verifier_job_id: uuid.UUID) -> VerifierJobRow | None:
    return rows.maybe(VerifierJobRow, await conn.fetchrow(SELECT_ONE, verifier_job_id))


async def page(
    conn: Conn,
    *,
    viewer_id: uuid.UUID,
    everything: bool,
    project_address: str | None,
    milestone_index: int | None,
    status: str | None,
    before_seq: int | None,
    limit: int,
) -> list[VerifierJobRow]:
    records = await conn.fetch(
        SELECT_PAGE,
        viewer_id,
        everything,
        project_address,
        milestone_index,
        status,
        before_seq,
        limit,
    )
    return rows.many(VerifierJobRow, records)


async def record_attempt(conn: Conn, verifier_job_id: uuid.UUID, attempt: JsonObject) -> None:
    await conn.execute(RECORD_ATTEMPT, verifier_job_id, [attempt])


async def complete(
    conn: Connection,
    verifier_job_id: uuid.UUID,
    *,
    retention_days: int,
    passes: bool,
    evidence_hash: str,
    evidence: JsonObject,
    attestation: Mapping[str, object],  # the signed AttestationPayload, stored as jsonb
    raw: JsonObject,
    logs: str,
) -> bool:
    """Write the result, the milestone's latest-verifier fields and the
    ``verifier_job.completed`` event (last, as the events' order requires); False when the row
    was already completed (it never is twice: the caller holds the queue job's lease)."""
    row = await conn.fetchrow(
        COMPLETE,
        verifier_job_id,
        retention_days,
        passes,
        evidence_hash,
        evidence,
        attestation,
        raw,
        logs,
    )
    if row is None:
        return False
    await conn.execute(
        UPDATE_MILESTONE,
        row["project_address"],
        row["milestone_index"],
        verifier_job_id,
        passes,
        evidence_hash,
    )
    payload = VerifierJobCompletedPayload(
        jobId=str(verifier_job_id),
        projectAddress=row["project_address"],
        milestoneIndex=row["milestone_index"],
        policy=row["check_policy_id"],
        passes=passes,
        evidenceHash=evidence_hash,
    )
    await events.append(conn, [NewEvent(row["project_address"], payload)])
    return True


async def raw_evidence(conn: Conn, verifier_job_id: uuid.UUID) -> RawEvidenceRow | None:
    return rows.maybe(RawEvidenceRow, await conn.fetchrow(SELECT_RAW, verifier_job_id))


async def sweep_expired(conn: Conn, retention_days: int, limit: int = 1000) -> int:
    """Delete the raw evidence and logs of up to ``limit`` jobs past their retention."""
    status = await conn.execute(SWEEP, limit, retention_days)
    return int(status.split()[-1])
