"""Users: created by their first authenticated request."""

from __future__ import annotations

import uuid
from collections import OrderedDict

import asyncpg

from marketplace.storage.pool import Connection, fetch_one

UPSERT_SESSION_USER = """
INSERT INTO users (user_id, email_verified, session_iat) VALUES ($1, $2, $3)
ON CONFLICT (user_id) DO UPDATE
    SET email_verified = EXCLUDED.email_verified,
        session_iat = EXCLUDED.session_iat,
        updated_at = CASE WHEN users.email_verified IS DISTINCT FROM EXCLUDED.email_verified
                          THEN now() ELSE users.updated_at END
    WHERE users.session_iat IS NULL OR users.session_iat <= EXCLUDED.session_iat
"""
SELECT_USER_FLAGS = """
SELECT user_id, email_verified, moderation_admin, verifier_admin FROM users WHERE user_id = $1
"""
SET_ADMIN_FLAGS = """
INSERT INTO users (user_id, moderation_admin, verifier_admin)
VALUES ($1, coalesce($2, false), coalesce($3, false))
ON CONFLICT (user_id) DO UPDATE
    SET moderation_admin = coalesce($2, users.moderation_admin),
        verifier_admin = coalesce($3, users.verifier_admin),
        updated_at = now()
RETURNING user_id, email_verified, moderation_admin, verifier_admin
"""

# The tokens this process already recorded, as (iat, flag) per user: the same token recurs on
# every request of a session, and recording it once is enough. Keyed by the token's `iat`, not
# by the flag alone: a newer token is always written (the statement keeps the newest), so no
# frontend can leave a flag stale that another frontend changed.
_seen: OrderedDict[uuid.UUID, tuple[int, bool]] = OrderedDict()
_SEEN_MAX = 50_000


async def remember_session(
    pool: asyncpg.Pool, user_id: uuid.UUID, email_verified: bool, issued_at: int
) -> None:
    token = (issued_at, email_verified)
    if _seen.get(user_id) == token:
        _seen.move_to_end(user_id)
        return
    await pool.execute(UPSERT_SESSION_USER, user_id, email_verified, issued_at)
    _seen[user_id] = token
    if len(_seen) > _SEEN_MAX:
        _seen.popitem(last=False)


def forget_cached_sessions() -> None:
    _seen.clear()


async def get_flags(conn: asyncpg.Pool | Connection, user_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(SELECT_USER_FLAGS, user_id)


async def set_admin_flags(
    conn: asyncpg.Pool | Connection,
    user_id: uuid.UUID,
    *,
    moderation_admin: bool | None,
    verifier_admin: bool | None,
) -> asyncpg.Record:
    return await fetch_one(conn, SET_ADMIN_FLAGS, user_id, moderation_admin, verifier_admin)
