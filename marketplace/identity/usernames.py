"""Usernames: ``^[a-z0-9_]{3,24}$``, globally unique case-insensitively.

Uniqueness is decided by the unique index on ``lower(username)``, never by a read followed by a
write: of two users claiming one name at the same moment exactly one insert succeeds and the
other gets 409 ``username_taken``.
"""

from __future__ import annotations

import re
import uuid

import asyncpg

from marketplace.errors import Conflict
from marketplace.identity.models import USERNAME_PATTERN, UsernameUnavailableReason
from marketplace.storage.repositories import usernames as repo

_USERNAME_RE = re.compile(USERNAME_PATTERN)


class UsernameTaken(Conflict):
    code = "username_taken"
    default_message = "this username is held by another user"


def is_valid(candidate: str) -> bool:
    return _USERNAME_RE.fullmatch(candidate) is not None


async def set_username(pool: asyncpg.Pool, user_id: uuid.UUID, username: str) -> repo.UsernameRow:
    try:
        return await repo.set_username(pool, user_id, username)
    except repo.UsernameTakenViolation:
        raise UsernameTaken(f"username {username!r} is held by another user") from None


async def availability(
    pool: asyncpg.Pool, caller: uuid.UUID, candidate: str
) -> UsernameUnavailableReason | None:
    """None when ``caller`` could set ``candidate`` now, else the reason it could not."""
    if not is_valid(candidate):
        return "invalid_format"
    holder = await repo.holder(pool, candidate)
    if holder is not None and holder != caller:
        return "taken"
    return None
