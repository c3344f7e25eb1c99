"""SQL of blocks and mutes: one directed row per (user, other user), idempotent by primary key
(docs/messaging.md, "Blocks and mutes").

Both tables have the same shape, so each statement is written once for a
:class:`RelationTable`. A repeated create keeps the first row (and its ``created_at``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from marketplace.storage import rows
from marketplace.storage.pool import Conn, fetch_one


class RelationRow(NamedTuple):
    """A block or a mute: ``user_id`` blocks or mutes ``other_user_id``."""

    user_id: uuid.UUID
    other_user_id: uuid.UUID
    created_at: datetime


@dataclass(frozen=True)
class RelationTable:
    table: str
    other_column: str

    @property
    def upsert_sql(self) -> str:
        # The no-op DO UPDATE makes RETURNING give the existing row too, in one statement.
        return f"""
INSERT INTO {self.table} AS r (user_id, {self.other_column}) VALUES ($1, $2)
ON CONFLICT (user_id, {self.other_column}) DO UPDATE SET user_id = r.user_id
RETURNING user_id, {self.other_column} AS other_user_id, created_at
"""

    @property
    def delete_sql(self) -> str:
        return f"DELETE FROM {self.table} WHERE user_id = $1 AND {self.other_column} = $2"


BLOCKS = RelationTable("user_blocks", "blocked_user_id")
MUTES = RelationTable("user_mutes", "muted_user_id")

# A block in either direction between $1 and $2 (both primary-key probes).
SELECT_BLOCKED_EITHER_WAY = """
SELECT EXISTS (SELECT 1 FROM user_blocks WHERE user_id = $1 AND blocked_user_id = $2)
    OR EXISTS (SELECT 1 FROM user_blocks WHERE user_id = $2 AND blocked_user_id = $1)
"""


async def create(
    conn: Conn, table: RelationTable, user_id: uuid.UUID, other_user_id: uuid.UUID
) -> RelationRow:
    """The (user, other) row, created now or kept from before. The other user must exist (a
    foreign-key violation otherwise)."""
    return rows.one(RelationRow, await fetch_one(conn, table.upsert_sql, user_id, other_user_id))


async def delete(
    conn: Conn, table: RelationTable, user_id: uuid.UUID, other_user_id: uuid.UUID
) -> None:
    await conn.execute(table.delete_sql, user_id, other_user_id)


async def blocked_either_way(conn: Conn, a: uuid.UUID, b: uuid.UUID) -> bool:
    return bool(await conn.fetchval(SELECT_BLOCKED_EITHER_WAY, a, b))
