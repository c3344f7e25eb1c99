"""Blocks and mutes (docs/messaging.md, "Blocks and mutes"): directed, idempotent.

A block stops direct messages in both directions (403 ``blocked`` for either sender). A mute
delivers messages but marks the thread ``muted`` for the muting user and suppresses
notifications for it.
"""

from __future__ import annotations

import uuid

import asyncpg

from marketplace.messaging.direct import require_other_user
from marketplace.messaging.errors import UserNotFound
from marketplace.storage.repositories import user_relations
from marketplace.storage.repositories.user_relations import BLOCKS, MUTES, RelationTable


async def _create(
    pool: asyncpg.Pool,
    table: RelationTable,
    user_id: uuid.UUID,
    other_user_id: uuid.UUID,
    *,
    field: str,
    action: str,
) -> user_relations.RelationRow:
    """The relation, made now or kept from before (its first ``created_at``). 400 for the
    caller itself, 404 ``user_not_found`` for a user the service has never seen."""
    require_other_user(user_id, other_user_id, field, action)
    try:
        return await user_relations.create(pool, table, user_id, other_user_id)
    except asyncpg.ForeignKeyViolationError:
        raise UserNotFound(f"{field}: no such user") from None


async def _delete(
    pool: asyncpg.Pool,
    table: RelationTable,
    user_id: uuid.UUID,
    other_user_id: uuid.UUID,
    *,
    field: str,
    action: str,
) -> None:
    """Remove the relation if there is one (idempotent: no relation, or no such user, is not an
    error). 400 for the caller itself, as on create."""
    require_other_user(user_id, other_user_id, field, action, "path")
    await user_relations.delete(pool, table, user_id, other_user_id)


async def block(
    pool: asyncpg.Pool, user_id: uuid.UUID, other: uuid.UUID
) -> user_relations.RelationRow:
    return await _create(pool, BLOCKS, user_id, other, field="blockedUserId", action="block")


async def unblock(pool: asyncpg.Pool, user_id: uuid.UUID, other: uuid.UUID) -> None:
    await _delete(pool, BLOCKS, user_id, other, field="blockedUserId", action="unblock")


async def mute(
    pool: asyncpg.Pool, user_id: uuid.UUID, other: uuid.UUID
) -> user_relations.RelationRow:
    return await _create(pool, MUTES, user_id, other, field="mutedUserId", action="mute")


async def unmute(pool: asyncpg.Pool, user_id: uuid.UUID, other: uuid.UUID) -> None:
    await _delete(pool, MUTES, user_id, other, field="mutedUserId", action="unmute")
