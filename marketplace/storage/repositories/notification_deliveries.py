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
from typing import Any

from marketplace.storage.pool import Conn, Connection

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

# Many rows in one statement; RETURNING names only the rows it created.
INSERT_DELIVERIES = """
INSERT INTO notification_deliveries
    (event_id, event_type, recipient_user_id, status, reason, subject, email, created_at)
SELECT t.event_id, t.event_type, t.recipient, t.status, t.reason, t.subject, t.email, now()
FROM unnest($1::bigint[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[])
    AS t(event_id, event_type, recipient, status, reason, subject, email)
ON CONFLICT (event_id, recipient_user_id) DO NOTHING
RETURNING id, event_id, recipient_user_id
"""
SET_JOBS = """
UPDATE notification_deliveries d SET job_id = t.job_id
FROM unnest($1::uuid[], $2::bigint[]) AS t(id, job_id)
WHERE d.id = t.id
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
# $1-$3 are the job's, $3 its attempt; the row changes only if the job completes).
MARK_SENT_ON_COMPLETION = """
UPDATE notification_deliveries
SET status = 'sent', sent_at = now(), updated_at = now(), attempts = greatest(attempts, $3)
WHERE id = $4 AND status = 'queued' AND EXISTS (SELECT 1 FROM completed)
RETURNING id
"""
RECORD_FAILURE = """
UPDATE notification_deliveries
SET attempts = greatest(attempts, $2), last_error = left($3, 2000), updated_at = now(),
    status = CASE WHEN $4 THEN 'failed' ELSE status END
WHERE id = $1 AND status = 'queued'
"""
# Deliveries still queued whose job failed without the handler recording it (the last attempt's
# lease expired and the reaper failed the job, or the attempt was cancelled at its timeout):
# they take the job's outcome. Only jobs failed within the last $1 seconds are looked at
# (jobs_failed index), and each delivery by its primary key.
FAIL_ORPHANED = """
UPDATE notification_deliveries d
SET status = 'failed', attempts = greatest(d.attempts, j.attempt_count),
    last_error = left(coalesce(j.last_error, 'the sending job failed'), 2000), updated_at = now()
FROM jobs j
WHERE j.queue = 'notifications' AND j.status = 'failed'
  AND j.finished_at > now() - make_interval(secs => $1)
  AND d.id = (j.payload->>'deliveryId')::uuid AND d.job_id = j.id AND d.status = 'queued'
"""


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
    event_id: int
    event_type: str
    recipient_user_id: uuid.UUID
    status: str
    reason: str | None
    subject: str
    email: str | None


async def insert_deliveries(
    conn: Conn, rows: Sequence[NewDelivery]
) -> dict[tuple[int, uuid.UUID], uuid.UUID]:
    """Insert the rows (ON CONFLICT DO NOTHING); (event id, recipient) -> id of each row this
    statement created (one that existed already is not in it)."""
    if not rows:
        return {}
    created = await conn.fetch(
        INSERT_DELIVERIES,
        [r.event_id for r in rows],
        [r.event_type for r in rows],
        [r.recipient_user_id for r in rows],
        [r.status for r in rows],
        [r.reason for r in rows],
        [r.subject for r in rows],
        [r.email for r in rows],
    )
    return {(int(r["event_id"]), r["recipient_user_id"]): r["id"] for r in created}


async def set_jobs(conn: Conn, jobs: Sequence[tuple[uuid.UUID, int]]) -> None:
    """Record each delivery's job id (delivery id, job id)."""
    if jobs:
        await conn.execute(SET_JOBS, [j[0] for j in jobs], [j[1] for j in jobs])


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
) -> dict[str, Any] | None:
    """The delivery's sending fields and ``preview``: the body of the message
    ``preview_message_id`` if it is still visible, else None."""
    row = await conn.fetchrow(SELECT_DELIVERY_TO_SEND, delivery_id, preview_message_id)
    return dict(row) if row is not None else None


async def record_failure(
    conn: Conn, delivery_id: uuid.UUID, attempt: int, error: str, *, final: bool
) -> None:
    """An attempt's error; ``final``: the row becomes ``failed`` (no attempt follows)."""
    await conn.execute(RECORD_FAILURE, delivery_id, attempt, error, final)


async def fail_orphaned(conn: Conn, within_seconds: float) -> int:
    """Mark ``failed`` the queued deliveries whose job failed in the last ``within_seconds``
    without the handler recording it; the number of rows changed."""
    status = str(await conn.execute(FAIL_ORPHANED, within_seconds))
    return int(status.rsplit(" ", 1)[-1])
