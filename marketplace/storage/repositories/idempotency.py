"""Idempotency keys of create requests: claim, store the response, release, sweep (migration
0020; the rules are in marketplace/http/idempotency.py)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from marketplace.storage.pool import Conn

# Claims the key: a new row, or the row of an expired key or of a claim whose holder died
# (its lease has passed) taken over. No row back: a live row holds the key.
CLAIM = """
INSERT INTO idempotency_keys
    (user_id, key_digest, request_hash, route, expires_at, locked_until, claim_token)
VALUES ($1, $2, $3, $4, now() + $5::interval, now() + $6::interval, $7)
ON CONFLICT (user_id, key_digest) DO UPDATE
SET request_hash = EXCLUDED.request_hash,
    route = EXCLUDED.route,
    created_at = now(),
    expires_at = EXCLUDED.expires_at,
    locked_until = EXCLUDED.locked_until,
    claim_token = EXCLUDED.claim_token,
    response_status = NULL,
    response_headers = NULL,
    response_body = NULL
WHERE idempotency_keys.expires_at <= now() OR idempotency_keys.locked_until <= now()
RETURNING claim_token
"""
# The live row holding a key (expired rows count as absent: they are swept later).
GET = """
SELECT request_hash, route, locked_until IS NOT NULL AS in_progress,
       response_status, response_headers, response_body
FROM idempotency_keys
WHERE user_id = $1 AND key_digest = $2 AND expires_at > now()
"""
COMPLETE = """
UPDATE idempotency_keys
SET locked_until = NULL, response_status = $4, response_headers = $5, response_body = $6
WHERE user_id = $1 AND key_digest = $2 AND claim_token = $3 AND locked_until IS NOT NULL
"""
RELEASE = """
DELETE FROM idempotency_keys
WHERE user_id = $1 AND key_digest = $2 AND claim_token = $3 AND locked_until IS NOT NULL
"""
# Expired keys, a bounded number per statement.
SWEEP = """
DELETE FROM idempotency_keys WHERE (user_id, key_digest) IN (
    SELECT user_id, key_digest FROM idempotency_keys WHERE expires_at <= now() LIMIT $1
)
"""


@dataclass(frozen=True)
class StoredKey:
    """The live row of a key: another request's claim, or the response it stored."""

    request_hash: bytes
    route: str
    in_progress: bool
    status: int | None
    headers: dict[str, str]
    body: bytes | None


async def claim(
    conn: Conn,
    user_id: uuid.UUID,
    key_digest: bytes,
    request_hash: bytes,
    route: str,
    *,
    ttl: timedelta,
    lease: timedelta,
) -> uuid.UUID | None:
    """Claim a key (by its digest) for one request; its claim token, or None when a live row
    holds the key."""
    token = uuid.uuid4()
    row = await conn.fetchrow(CLAIM, user_id, key_digest, request_hash, route, ttl, lease, token)
    return None if row is None else token


async def get(conn: Conn, user_id: uuid.UUID, key_digest: bytes) -> StoredKey | None:
    row = await conn.fetchrow(GET, user_id, key_digest)
    if row is None:
        return None
    return StoredKey(
        request_hash=bytes(row["request_hash"]),
        route=row["route"],
        in_progress=row["in_progress"],
        status=row["response_status"],
        headers=dict(row["response_headers"] or {}),
        body=None if row["response_body"] is None else bytes(row["response_body"]),
    )


async def complete(
    conn: Conn,
    user_id: uuid.UUID,
    key_digest: bytes,
    token: uuid.UUID,
    *,
    status: int,
    headers: dict[str, str],
    body: bytes,
) -> bool:
    """Store the response of the claim ``token``; False if the claim was lost meanwhile."""
    result = await conn.execute(COMPLETE, user_id, key_digest, token, status, headers, body)
    return result.split()[-1] != "0"


async def release(conn: Conn, user_id: uuid.UUID, key_digest: bytes, token: uuid.UUID) -> None:
    """Give the key back: the claim ``token`` stored nothing."""
    await conn.execute(RELEASE, user_id, key_digest, token)


async def sweep(conn: Conn, limit: int) -> int:
    """Delete up to ``limit`` expired keys; returns how many."""
    status = await conn.execute(SWEEP, limit)
    return int(status.split()[-1])
