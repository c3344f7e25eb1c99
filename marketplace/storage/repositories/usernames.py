"""Usernames: one per user, unique case-insensitively through ``usernames_lower_unique``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple

import asyncpg

from marketplace.storage import rows
from marketplace.storage.pool import Conn, fetch_one

# The unique index on lower(username) is what decides between two users claiming one name at
# once; this constant lets callers recognise that violation.
LOWER_UNIQUE_INDEX = "usernames_lower_unique"

_COLUMNS = "user_id, username, lower(username) AS username_lower, created_at, updated_at"

SELECT_BY_USER = f"SELECT {_COLUMNS} FROM usernames WHERE user_id = $1"
SELECT_BY_USERS = f"""
SELECT {_COLUMNS} FROM usernames WHERE user_id = any($1::uuid[]) ORDER BY username
"""
SELECT_HOLDER = "SELECT user_id FROM usernames WHERE lower(username) = lower($1)"
# Upsert on the user's row; a name held by someone else raises a unique violation on
# LOWER_UNIQUE_INDEX. An unchanged name returns no row (updated_at stays as it was).
UPSERT = f"""
INSERT INTO usernames (user_id, username) VALUES ($1, $2)
ON CONFLICT (user_id) DO UPDATE
    SET username = EXCLUDED.username, updated_at = now()
    WHERE usernames.username IS DISTINCT FROM EXCLUDED.username
RETURNING {_COLUMNS}
"""


class UsernameRow(NamedTuple):
    user_id: uuid.UUID
    username: str
    username_lower: str
    created_at: datetime
    updated_at: datetime


class UsernameTakenViolation(Exception):
    """The unique index refused the name: another user holds it."""


async def get(conn: Conn, user_id: uuid.UUID) -> UsernameRow | None:
    return rows.maybe(UsernameRow, await conn.fetchrow(SELECT_BY_USER, user_id))


async def get_many(conn: Conn, user_ids: list[uuid.UUID]) -> list[UsernameRow]:
    return rows.many(UsernameRow, await conn.fetch(SELECT_BY_USERS, user_ids))


async def holder(conn: Conn, username: str) -> uuid.UUID | None:
    return await conn.fetchval(SELECT_HOLDER, username)


async def set_username(conn: asyncpg.Pool, user_id: uuid.UUID, username: str) -> UsernameRow:
    """Claim ``username`` for ``user_id``; raise :class:`UsernameTakenViolation` if held."""
    async with conn.acquire() as c, c.transaction():
        try:
            row = await c.fetchrow(UPSERT, user_id, username)
        except asyncpg.UniqueViolationError as exc:
            if exc.constraint_name == LOWER_UNIQUE_INDEX:
                raise UsernameTakenViolation(username) from None
            raise
        if row is None:
            row = await fetch_one(c, SELECT_BY_USER, user_id)
    return rows.one(UsernameRow, row)
