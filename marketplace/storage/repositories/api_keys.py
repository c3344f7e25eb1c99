"""Agent API keys, their secret hashes and their usage log."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

import asyncpg

from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection, fetch_one

_KEY_COLUMNS = (
    "key_id, user_id, name, key_prefix, key_last4, created_at, rotated_at, last_used_at, revoked_at"
)

# The per-request lookup: one primary-key probe on the hash, joined to the key and its owner.
RESOLVE_SECRET = """
SELECT k.key_id, k.user_id, u.email_verified
FROM api_key_secrets s
JOIN api_keys k ON k.key_id = s.key_id
JOIN users u ON u.user_id = k.user_id
WHERE s.secret_hash = $1
  AND k.revoked_at IS NULL
  AND (s.expires_at IS NULL OR s.expires_at > now())
"""
COUNT_ACTIVE_KEYS = "SELECT count(*) FROM api_keys WHERE user_id = $1 AND revoked_at IS NULL"
# Serialises key creation per user so the active-key limit holds under concurrency.
LOCK_USER_KEYS = "SELECT 1 FROM users WHERE user_id = $1 FOR UPDATE"
INSERT_KEY = f"""
INSERT INTO api_keys (key_id, user_id, name, key_prefix, key_last4)
VALUES ($1, $2, $3, $4, $5)
RETURNING {_KEY_COLUMNS}
"""
INSERT_SECRET = "INSERT INTO api_key_secrets (secret_hash, key_id) VALUES ($1, $2)"
SELECT_KEY = f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = $1"
# Keys of the list that are revoked or gone.
SELECT_REVOKED_AMONG = """
SELECT q.key_id FROM unnest($1::uuid[]) AS q(key_id)
WHERE NOT EXISTS (SELECT 1 FROM api_keys k WHERE k.key_id = q.key_id AND k.revoked_at IS NULL)
"""
SELECT_KEY_FOR_UPDATE = f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = $1 FOR UPDATE"
SELECT_KEYS_OF_USER = f"""
SELECT {_KEY_COLUMNS} FROM api_keys WHERE user_id = $1 ORDER BY created_at DESC, key_id
"""
# Rotation: every still-valid secret of the key expires after the grace period (or now), the
# rotated-out secrets whose grace already ended are deleted, and the new secret is inserted.
GRACE_END = "SELECT now() + $1::int * interval '1 second'"
EXPIRE_SECRETS = """
UPDATE api_key_secrets
SET expires_at = LEAST(coalesce(expires_at, 'infinity'::timestamptz), $2::timestamptz)
WHERE key_id = $1 AND (expires_at IS NULL OR expires_at > now())
"""
DELETE_EXPIRED_SECRETS = """
DELETE FROM api_key_secrets WHERE key_id = $1 AND expires_at IS NOT NULL AND expires_at <= now()
"""
MARK_ROTATED = f"""
UPDATE api_keys SET key_prefix = $2, key_last4 = $3, rotated_at = now()
WHERE key_id = $1
RETURNING {_KEY_COLUMNS}
"""
REVOKE_KEY = f"""
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE key_id = $1
RETURNING {_KEY_COLUMNS}
"""

# One statement per flushed batch: rows of keys that no longer exist are skipped by the join.
INSERT_USAGE_BATCH = """
INSERT INTO api_key_usage (key_id, occurred_at, method, route, status, client_address)
SELECT u.key_id, u.occurred_at, u.method, u.route, u.status, u.client_address
FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::int[], $6::text[])
    AS u(key_id, occurred_at, method, route, status, client_address)
JOIN api_keys k ON k.key_id = u.key_id
"""
TOUCH_LAST_USED = """
UPDATE api_keys k SET last_used_at = v.last_used
FROM (
    SELECT key_id, max(occurred_at) AS last_used
    FROM unnest($1::uuid[], $2::timestamptz[]) AS t(key_id, occurred_at)
    GROUP BY key_id
) v
WHERE k.key_id = v.key_id AND (k.last_used_at IS NULL OR k.last_used_at < v.last_used)
"""
SELECT_USAGE_PAGE = """
SELECT usage_id, occurred_at, method, route, status, client_address
FROM api_key_usage
WHERE key_id = $1
  AND ($2::timestamptz IS NULL OR (occurred_at, usage_id) < ($2::timestamptz, $3::bigint))
ORDER BY occurred_at DESC, usage_id DESC
LIMIT $4
"""

UsageRow = tuple[uuid.UUID, datetime, str, str, int, str | None]


class ResolvedKeyRow(NamedTuple):
    key_id: uuid.UUID
    user_id: uuid.UUID
    email_verified: bool


class ApiKeyRow(NamedTuple):
    key_id: uuid.UUID
    user_id: uuid.UUID
    name: str
    key_prefix: str
    key_last4: str
    created_at: datetime
    rotated_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None


class UsageEntryRow(NamedTuple):
    usage_id: int
    occurred_at: datetime
    method: str
    route: str
    status: int
    client_address: str | None


async def resolve_secret_hash(conn: Conn, secret_hash: bytes) -> ResolvedKeyRow | None:
    return rows.maybe(ResolvedKeyRow, await conn.fetchrow(RESOLVE_SECRET, secret_hash))


async def create_key(
    pool: asyncpg.Pool,
    *,
    key_id: uuid.UUID,
    user_id: uuid.UUID,
    name: str,
    key_prefix: str,
    key_last4: str,
    secret_hash: bytes,
    max_active: int,
) -> ApiKeyRow | None:
    """Insert a key and its secret hash; None when the user already has ``max_active`` keys."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(LOCK_USER_KEYS, user_id)
        if await conn.fetchval(COUNT_ACTIVE_KEYS, user_id) >= max_active:
            return None
        row = await fetch_one(conn, INSERT_KEY, key_id, user_id, name, key_prefix, key_last4)
        await conn.execute(INSERT_SECRET, secret_hash, key_id)
    return rows.one(ApiKeyRow, row)


async def get_key(conn: Conn, key_id: uuid.UUID) -> ApiKeyRow | None:
    return rows.maybe(ApiKeyRow, await conn.fetchrow(SELECT_KEY, key_id))


async def revoked_among(conn: Conn, key_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of ``key_ids`` are revoked (a deleted key counts as revoked)."""
    if not key_ids:
        return set()
    return {key_id for (key_id,) in await conn.fetch(SELECT_REVOKED_AMONG, list(key_ids))}


async def list_keys(conn: Conn, user_id: uuid.UUID) -> list[ApiKeyRow]:
    return rows.many(ApiKeyRow, await conn.fetch(SELECT_KEYS_OF_USER, user_id))


async def lock_key(conn: Connection, key_id: uuid.UUID) -> ApiKeyRow | None:
    return rows.maybe(ApiKeyRow, await conn.fetchrow(SELECT_KEY_FOR_UPDATE, key_id))


async def rotate_secret(
    conn: Connection,
    key_id: uuid.UUID,
    *,
    grace_seconds: int,
    secret_hash: bytes,
    key_prefix: str,
    key_last4: str,
) -> tuple[ApiKeyRow, datetime]:
    """Within the caller's transaction (after :func:`lock_key`): swap in a new secret.

    Returns the key row and the instant until which the previous secrets stay valid (the
    transaction's ``now()`` when ``grace_seconds`` is 0, i.e. they stop at once).
    """
    valid_until: datetime = await conn.fetchval(GRACE_END, grace_seconds)
    await conn.execute(DELETE_EXPIRED_SECRETS, key_id)
    await conn.execute(EXPIRE_SECRETS, key_id, valid_until)
    await conn.execute(INSERT_SECRET, secret_hash, key_id)
    row = await fetch_one(conn, MARK_ROTATED, key_id, key_prefix, key_last4)
    return rows.one(ApiKeyRow, row), valid_until


async def revoke_key(conn: Conn, key_id: uuid.UUID) -> ApiKeyRow | None:
    return rows.maybe(ApiKeyRow, await conn.fetchrow(REVOKE_KEY, key_id))


async def insert_usage_batch(pool: asyncpg.Pool, rows: Sequence[UsageRow]) -> None:
    columns = list(zip(*rows, strict=True))
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(INSERT_USAGE_BATCH, *columns)
        await conn.execute(TOUCH_LAST_USED, columns[0], columns[1])


async def usage_page(
    conn: Conn,
    key_id: uuid.UUID,
    *,
    before: tuple[datetime, int] | None,
    limit: int,
) -> list[UsageEntryRow]:
    before_time, before_id = before if before is not None else (None, None)
    records = await conn.fetch(SELECT_USAGE_PAGE, key_id, before_time, before_id, limit)
    return rows.many(UsageEntryRow, records)
