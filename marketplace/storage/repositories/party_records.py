"""Off-chain records keyed by (project, party wallet): bid drafts and challenge-submission
registrations. Both tables hold one row per project and wallet with a hash, an optional artifact
URI and notes, and are written the same way, so the SQL and the write live here once, made from
each table's :class:`PartyRecordTable`.

A write is the whole record: absent optional fields clear the stored ones. A repeat of the
stored values writes nothing (``updated_at`` included) and records no event, so a retried
request is a no-op. Addresses and hashes are lower-case.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import cached_property

import asyncpg

from marketplace.events.types import EventType, NewEvent
from marketplace.storage.pool import Connection, fetch_one
from marketplace.storage.repositories import events


@dataclass(frozen=True)
class PartyRecordTable:
    table: str
    id_column: str
    party_column: str  # the party's wallet: the second half of the key
    hash_column: str
    created_event: EventType
    updated_event: EventType
    # The event payload's names (read-API spelling) for the id, the party and the hash.
    id_field: str
    party_field: str
    hash_field: str

    @cached_property
    def columns(self) -> str:
        return (
            f"{self.id_column}, project_address, {self.party_column}, {self.hash_column}, "
            "artifact_uri, notes, created_at, updated_at"
        )

    @cached_property
    def upsert_sql(self) -> str:
        """$1 project, $2 party, $3 hash, $4 artifact URI, $5 notes, $6 user id. Returns the
        row with ``created`` (true on insert), or no row when nothing changed."""
        return f"""
INSERT INTO {self.table} AS r
    (project_address, {self.party_column}, {self.hash_column}, artifact_uri, notes, created_by,
     updated_by)
VALUES ($1, $2, $3, $4, $5, $6, $6)
ON CONFLICT (project_address, {self.party_column}) DO UPDATE
    SET {self.hash_column} = EXCLUDED.{self.hash_column},
        artifact_uri = EXCLUDED.artifact_uri,
        notes = EXCLUDED.notes,
        updated_by = EXCLUDED.updated_by,
        updated_at = now()
    WHERE (r.{self.hash_column}, r.artifact_uri, r.notes)
        IS DISTINCT FROM (EXCLUDED.{self.hash_column}, EXCLUDED.artifact_uri, EXCLUDED.notes)
RETURNING {self.columns}, (xmax = 0) AS created
"""

    @cached_property
    def select_one_sql(self) -> str:
        """$1 project, $2 party."""
        return f"""
SELECT {self.columns} FROM {self.table}
WHERE project_address = $1 AND {self.party_column} = $2
"""

    @cached_property
    def select_unchanged_sql(self) -> str:
        """:attr:`select_one_sql` in the upsert's row shape, for a no-op upsert's answer."""
        return f"""
SELECT {self.columns}, false AS created FROM {self.table}
WHERE project_address = $1 AND {self.party_column} = $2
"""


async def upsert(
    conn: Connection,
    table: PartyRecordTable,
    *,
    project_address: str,
    party_address: str,
    record_hash: str,
    artifact_uri: str | None,
    notes: str | None,
    user_id: uuid.UUID,
) -> asyncpg.Record:
    """Insert or replace the record of ``party_address`` on ``project_address``. The row carries
    ``created`` (true when this call inserted it); a write records the table's created or updated
    event in its transaction."""
    async with conn.transaction():
        row = await conn.fetchrow(
            table.upsert_sql,
            project_address,
            party_address,
            record_hash,
            artifact_uri,
            notes,
            user_id,
        )
        if row is None:  # identical to what is stored: nothing written, no event
            return await fetch_one(conn, table.select_unchanged_sql, project_address, party_address)
        kind = table.created_event if row["created"] else table.updated_event
        payload = {
            table.id_field: str(row[table.id_column]),
            "projectAddress": project_address,
            table.party_field: party_address,
            table.hash_field: record_hash,
            "userId": str(user_id),
        }
        await events.append(conn, [NewEvent(kind, project_address, payload)])
    return row
