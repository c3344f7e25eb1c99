"""Permission flags: ``moderationAdmin`` and ``verifierAdmin``, stored per user in ``users``.

Operators set them with ``marketplace admin grant|revoke`` (see :mod:`marketplace.identity.cli`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from marketplace.storage.pool import Connection
from marketplace.storage.repositories import users as users_repo


@dataclass(frozen=True)
class Flags:
    moderation_admin: bool
    verifier_admin: bool


async def flags_of(conn: asyncpg.Pool | Connection, user_id: uuid.UUID) -> Flags:
    row = await users_repo.get_flags(conn, user_id)
    if row is None:
        return Flags(False, False)
    return Flags(row.moderation_admin, row.verifier_admin)


async def set_flags(
    conn: asyncpg.Pool | Connection,
    user_id: uuid.UUID,
    *,
    moderation_admin: bool | None,
    verifier_admin: bool | None,
) -> Flags:
    """Set the given flags (None leaves a flag as it is); creates the user row if needed."""
    row = await users_repo.set_admin_flags(
        conn, user_id, moderation_admin=moderation_admin, verifier_admin=verifier_admin
    )
    return Flags(row.moderation_admin, row.verifier_admin)
