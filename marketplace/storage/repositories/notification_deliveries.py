"""SQL of the notification pipeline: the consumer's lock and cursor, recipient lookups, delivery
rows as the consumer writes them and the sender updates them, and the rate limiter's rebuild
(docs/notifications.md, "Pipeline" and "Rate limit").

Event types and statuses are plain strings here (storage imports no domain package); the
domain's enums are ``StrEnum``s, so they pass as they are.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from marketplace.storage import rows as typed_rows
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.repositories.jobs import NEXT_JOB_ID, insert_jobs_from

# "mkt_ntfy": one active notifications consumer among all frontends (the relay's pattern).
CONSUMER_LOCK_KEY = 0x6D6B745F6E746679

TRY_CONSUMER_LOCK = "SELECT pg_try_advisory_lock($1)"
SELECT_CURSOR = "SELECT coalesce(max(last_event_id), 0) FROM notification_consumer_cursor"
ADVANCE_CURSOR = """
INSERT INTO notification_consumer_cursor AS c (singleton, last_event_id) VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE
    SET last_event_id = greatest(c.last_event_id, EXCLUDED.last_event_id), updated_at = now()
"""
# The transaction's time, which is also every row's created_at written in it (seconds).
SELECT_NOW = "SELECT extract(epoch FROM now())::float8"

# A project with its parties: the users actively linked now to the owner and selected worker
# wallets (each one index probe on wallet_links_one_active_per_wallet), and its title if any.
SELECT_PROJECT_PARTIES_MANY = """
SELECT p.project_address, p.owner_address, p.selected_builder_address, m.title,
       (SELECT w.user_id FROM wallet_links w
        WHERE w.wallet_address = p.owner_address AND w.revoked_at IS NULL) AS owner_user_id,
       (SELECT w.user_id FROM wallet_links w
        WHERE w.wallet_address = p.selected_builder_address AND w.revoked_at IS NULL)
           AS worker_user_id
FROM projects p
LEFT JOIN project_metadata m ON m.project_address = p.project_address
WHERE p.project_address = ANY($1::text[])
"""

# What decides whether a delivery to a recipient about something a sender did, of an event
# type, is suppressed, for many (recipient, sender, event type) triples at once; `n` is the
# triple's 1-based position (recipients without an account row are left out).
SELECT_RECIPIENT_FACTS_MANY = """
SELECT i.n, u.email,
       EXISTS (SELECT 1 FROM user_blocks b
               WHERE b.user_id = i.recipient AND b.blocked_user_id = i.sender) AS blocked,
       EXISTS (SELECT 1 FROM user_mutes m
               WHERE m.user_id = i.recipient AND m.muted_user_id = i.sender) AS muted,
       coalesce((SELECT NOT p.email FROM notification_preferences p
                 WHERE p.user_id = i.recipient AND p.event_type = i.event_type), false)
           AS unsubscribed
FROM unnest($1::uuid[], $2::uuid[], $3::text[]) WITH ORDINALITY
    AS i(recipient, sender, event_type, n)
JOIN users u ON u.user_id = i.recipient
"""
SELECT_USERNAMES = "SELECT user_id, username FROM usernames WHERE user_id = ANY($1::uuid[])"

# Many rows and the jobs of the queued ones in one statement ($1 the jobs' queue, $2 their max
# attempts): each row that is inserted (not a conflict) and has a job payload gets a job id
# drawn for it, and its job (key `delivery:<id>`) is inserted after it; a row that already
# existed gets no job. RETURNING names only the rows it created.
INSERT_DELIVERIES = f"""
WITH t AS (
    SELECT id, event_id, event_type, recipient, status, reason, subject, email, job_payload
    FROM unnest($3::uuid[], $4::bigint[], $5::text[], $6::uuid[], $7::text[], $8::text[],
                $9::text[], $10::text[], $11::text[])
        AS t(id, event_id, event_type, recipient, status, reason, subject, email, job_payload)
), d AS (
    INSERT INTO notification_deliveries
        (id, event_id, event_type, recipient_user_id, status, reason, subject, email, job_id,
         created_at)
    SELECT t.id, t.event_id, t.event_type, t.recipient, t.status, t.reason, t.subject, t.email,
           CASE WHEN t.job_payload IS NOT NULL THEN {NEXT_JOB_ID} END, now()
    FROM t
    ON CONFLICT (event_id, recipient_user_id) DO NOTHING
    RETURNING id, event_id, recipient_user_id, job_id
), new_job AS (
    SELECT d.job_id AS id, t.job_payload::jsonb AS payload, 'delivery:' || d.id AS key
    FROM d JOIN t ON t.id = d.id
    WHERE d.job_id IS NOT NULL
), job AS ({insert_jobs_from("new_job")})
SELECT id, event_id, recipient_user_id FROM d
"""

# The limiter's rebuild: a key's deliveries that count against its window.
SELECT_ADMITTED_SINCE = """
SELECT extract(epoch FROM created_at)::float8 AS at, event_id
FROM notification_deliveries
WHERE recipient_user_id = $1 AND event_type = $2 AND created_at > to_timestamp($3)
  AND status IN ('queued', 'sent', 'failed')
"""

SELECT_DELIVERY = """
SELECT id, event_id, event_type, recipient_user_id, status, reason, attempts, last_error,
       subject, email, job_id, created_at, sent_at
FROM notification_deliveries WHERE id = $1
"""
# What the sending job needs, with the previewed message's text when it is still visible ($2 may
# be null: no preview), in one round trip.
SELECT_DELIVERY_TO_SEND = """
SELECT d.id, d.event_id, d.event_type, d.recipient_user_id, d.status, d.subject, d.email,
       (SELECT m.body FROM messages m WHERE m.id = $2 AND m.body_status = 'visible')
           AS preview
FROM notification_deliveries d WHERE d.id = $1
"""
# queued -> sent, as the effect of the sending job's completion (repositories.jobs.COMPLETE_WITH:
# $1-$3 are the job's, $3 its attempt; the statement fails as a whole unless the job completes).
MARK_SENT_ON_COMPLETION = """
UPDATE notification_deliveries
SET status = 'sent', sent_at = now(), updated_at = now(), attempts = greatest(attempts, $3)
WHERE id = $4 AND status = 'queued'
RETURNING id
"""
# Failed attempts of sending jobs, found by job id (notification_deliveries_job), run by the
# queue's failure hook in the transaction that retries or fails each job: the attempt's error,
# and `failed` when the job failed.
RECORD_FAILURES = """
UPDATE notification_deliveries d
SET attempts = greatest(d.attempts, t.attempt), last_error = left(t.error, 2000),
    updated_at = now(), status = CASE WHEN t.final THEN 'failed' ELSE d.status END
FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::bool[]) AS t(job_id, attempt, error, final)
WHERE d.job_id = t.job_id AND d.status = 'queued'
"""


class DeliveryToSendRow(NamedTuple):
    """A row of :data:`SELECT_DELIVERY_TO_SEND`."""

    id: uuid.UUID
    event_id: int
    event_type: str
    recipient_user_id: uuid.UUID
    status: str
    subject: str
    email: str | None
    preview: str | None


@dataclass(frozen=True)
class ProjectParties:
    owner_address: str
    selected_builder_address: str | None
    title: str | None
    owner_user_id: uuid.UUID | None
    worker_user_id: uuid.UUID | None


@dataclass(frozen=True)
class RecipientFacts:
    email: str | None
    blocked: bool
    muted: bool
    unsubscribed: bool


async def try_consumer_lock(conn: Connection) -> bool:
    """Session-level: held until ``conn`` closes (a dedicated connection, never a pooled one)."""
    return bool(await conn.fetchval(TRY_CONSUMER_LOCK, CONSUMER_LOCK_KEY))


async def consumer_cursor(conn: Conn) -> int:
    return int(await conn.fetchval(SELECT_CURSOR))


async def advance_consumer_cursor(conn: Conn, last_event_id: int) -> None:
    await conn.execute(ADVANCE_CURSOR, last_event_id)


async def transaction_time(conn: Conn) -> float:
    return float(await conn.fetchval(SELECT_NOW))


async def project_parties_many(
    conn: Conn, project_addresses: Sequence[str]
) -> dict[str, ProjectParties]:
    """The parties of each indexed project among ``project_addresses``, by lower-case address,
    in one statement (unknown projects are absent)."""
    if not project_addresses:
        return {}
    rows = await conn.fetch(
        SELECT_PROJECT_PARTIES_MANY, sorted({a.lower() for a in project_addresses})
    )
    return {
        row["project_address"]: ProjectParties(
            row["owner_address"],
            row["selected_builder_address"],
            row["title"],
            row["owner_user_id"],
            row["worker_user_id"],
        )
        for row in rows
    }


async def recipient_facts_many(
    conn: Conn, triples: Sequence[tuple[uuid.UUID, uuid.UUID | None, str]]
) -> list[RecipientFacts | None]:
    """The facts of each (recipient, sender, event type), in one statement; None where the
    recipient has no account row."""
    if not triples:
        return []
    rows = await conn.fetch(
        SELECT_RECIPIENT_FACTS_MANY,
        [t[0] for t in triples],
        [t[1] for t in triples],
        [t[2] for t in triples],
    )
    facts: list[RecipientFacts | None] = [None] * len(triples)
    for row in rows:
        facts[row["n"] - 1] = RecipientFacts(
            row["email"], row["blocked"], row["muted"], row["unsubscribed"]
        )
    return facts


@dataclass(frozen=True)
class NewDelivery:
    id: uuid.UUID
    event_id: int
    event_type: str
    recipient_user_id: uuid.UUID
    status: str
    reason: str | None
    subject: str
    email: str | None
    # The payload of its sending job (JSON text), for a queued row; None: no job.
    job_payload: str | None = None


async def insert_deliveries(
    conn: Conn, rows: Sequence[NewDelivery], *, queue: str, max_attempts: int
) -> dict[tuple[int, uuid.UUID], uuid.UUID]:
    """Insert the rows (ON CONFLICT DO NOTHING) and, for each created row with a job payload,
    its job on ``queue``, in one statement; (event id, recipient) -> id of each row this
    statement created (one that existed already is not in it, and got no job)."""
    if not rows:
        return {}
    created = await conn.fetch(
        INSERT_DELIVERIES,
        queue,
        max_attempts,
        [r.id for r in rows],
        [r.event_id for r in rows],
        [r.event_type for r in rows],
        [r.recipient_user_id for r in rows],
        [r.status for r in rows],
        [r.reason for r in rows],
        [r.subject for r in rows],
        [r.email for r in rows],
        [r.job_payload for r in rows],
    )
    return {(int(r["event_id"]), r["recipient_user_id"]): r["id"] for r in created}


async def usernames(conn: Conn, user_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The usernames of those of ``user_ids`` that have one, in one statement."""
    if not user_ids:
        return {}
    rows = await conn.fetch(SELECT_USERNAMES, list(set(user_ids)))
    return {row["user_id"]: str(row["username"]) for row in rows}


async def admitted_since(
    conn: Conn, recipient_user_id: uuid.UUID, event_type: str, since_epoch: float
) -> list[tuple[float, int]]:
    """(created_at as epoch seconds, event id) of the deliveries that count against the limit
    (queued, sent, failed) created after ``since_epoch``."""
    rows = await conn.fetch(SELECT_ADMITTED_SINCE, recipient_user_id, event_type, since_epoch)
    return [(float(row["at"]), int(row["event_id"])) for row in rows]


async def delivery(conn: Conn, delivery_id: uuid.UUID) -> dict[str, Any] | None:
    row = await conn.fetchrow(SELECT_DELIVERY, delivery_id)
    return dict(row) if row is not None else None


async def delivery_to_send(
    conn: Conn, delivery_id: uuid.UUID, preview_message_id: uuid.UUID | None
) -> DeliveryToSendRow | None:
    """The delivery's sending fields and ``preview``: the body of the message
    ``preview_message_id`` if it is still visible, else None."""
    return typed_rows.maybe(
        DeliveryToSendRow,
        await conn.fetchrow(SELECT_DELIVERY_TO_SEND, delivery_id, preview_message_id),
    )


@dataclass(frozen=True)
class DeliveryFailure:
    """A failed attempt of the sending job ``job_id``: its number, its (API-safe) error, and
    whether the job failed for good."""

    job_id: int
    attempt: int
    error: str
    final: bool


async def record_failures(conn: Conn, failures: Sequence[DeliveryFailure]) -> None:
    """Each failure on the queued delivery of its job; a final one makes it ``failed``."""
    if failures:
        await conn.execute(
            RECORD_FAILURES,
            [f.job_id for f in failures],
            [f.attempt for f in failures],
            [f.error for f in failures],
            [f.final for f in failures],
        )
