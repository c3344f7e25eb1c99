"""Users: one row per user id, written by the batched session recorder and by operators."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import NamedTuple, TypeAlias

import asyncpg

from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection, fetch_one

# (user_id, email_verified, email, session_iat): what one verified session token says.
SessionRow: TypeAlias = tuple[uuid.UUID, bool, str | None, int]

# One statement per batch (at most one row per user: ON CONFLICT cannot touch a row twice). Only
# a token at least as new as the stored one changes the row, so frontends may record in any order
# and an old token seen late never rolls the flags back. An unverified token clears `email` (the
# address the user proved is no longer vouched for); a verified one without an `email` claim
# keeps it. Repeating what is stored writes nothing (no new row version for a token seen again).
RECORD_SESSIONS = """
WITH s AS (
    SELECT t.user_id, t.email_verified, CASE WHEN t.email_verified THEN t.email END AS email,
           t.session_iat
    FROM unnest($1::uuid[], $2::boolean[], $3::text[], $4::bigint[])
        AS t(user_id, email_verified, email, session_iat)
)
INSERT INTO users AS u (user_id, email_verified, email, session_iat)
SELECT user_id, email_verified, email, session_iat FROM s
ON CONFLICT (user_id) DO UPDATE
    SET email_verified = EXCLUDED.email_verified,
        email = CASE WHEN EXCLUDED.email_verified THEN coalesce(EXCLUDED.email, u.email) END,
        session_iat = EXCLUDED.session_iat,
        updated_at = CASE
            WHEN (u.email_verified, u.email) IS DISTINCT FROM (
                EXCLUDED.email_verified,
                CASE WHEN EXCLUDED.email_verified THEN coalesce(EXCLUDED.email, u.email) END
            ) THEN now()
            ELSE u.updated_at
        END
    WHERE u.session_iat IS NULL
       OR u.session_iat < EXCLUDED.session_iat
       OR (u.session_iat = EXCLUDED.session_iat
           AND (u.email_verified, u.email) IS DISTINCT FROM (
               EXCLUDED.email_verified,
               CASE WHEN EXCLUDED.email_verified THEN coalesce(EXCLUDED.email, u.email) END
           ))
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


class UserFlagsRow(NamedTuple):
    user_id: uuid.UUID
    email_verified: bool
    moderation_admin: bool
    verifier_admin: bool


async def record_sessions(conn: Conn, rows: Sequence[SessionRow]) -> None:
    """Upsert the users of a batch of session tokens; user ids must be distinct."""
    if not rows:
        return
    user_ids, verified, emails, issued = zip(*rows, strict=True)
    await conn.execute(RECORD_SESSIONS, user_ids, verified, emails, issued)


async def get_flags(conn: asyncpg.Pool | Connection, user_id: uuid.UUID) -> UserFlagsRow | None:
    return rows.maybe(UserFlagsRow, await conn.fetchrow(SELECT_USER_FLAGS, user_id))


async def set_admin_flags(
    conn: asyncpg.Pool | Connection,
    user_id: uuid.UUID,
    *,
    moderation_admin: bool | None,
    verifier_admin: bool | None,
) -> UserFlagsRow:
    record = await fetch_one(conn, SET_ADMIN_FLAGS, user_id, moderation_admin, verifier_admin)
    return rows.one(UserFlagsRow, record)
