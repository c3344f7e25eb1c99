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
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

import asyncpg

from marketplace.events.types import NewEvent, Payload
from marketplace.storage import rows
from marketplace.storage.pool import Connection, fetch_one
from marketplace.storage.repositories import events

# The table's row type: a NamedTuple of :attr:`PartyRecordTable.columns`, in order.
R = TypeVar("R", bound=tuple[Any, ...])


@dataclass(frozen=True)
class PartyRecordWrite:
    """A record write that changed something: what its event says."""

    created: bool  # inserted (else replaced)
    record_id: str
    project_address: str
    party_address: str
    record_hash: str
    user_id: str


@dataclass(frozen=True)
class PartyRecordTable(Generic[R]):
    row: type[R]  # its fields are :attr:`columns`
    table: str
    id_column: str
    party_column: str  # the party's wallet: the second half of the key
    hash_column: str
    # The payload of a write's event (the table's created or updated event type).
    event_payload: Callable[[PartyRecordWrite], Payload]

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
    table: PartyRecordTable[R],
    *,
    project_address: str,
    party_address: str,
    record_hash: str,
    artifact_uri: str | None,
    notes: str | None,
    user_id: uuid.UUID,
) -> R:
    """Insert or replace the record of ``party_address`` on ``project_address``; a write records
    the table's created or updated event (created: this call inserted it) in its transaction."""
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
            unchanged = await fetch_one(
                conn, table.select_unchanged_sql, project_address, party_address
            )
            return _stored(table, unchanged)
        write = PartyRecordWrite(
            created=row["created"],
            record_id=str(row[table.id_column]),
            project_address=project_address,
            party_address=party_address,
            record_hash=record_hash,
            user_id=str(user_id),
        )
        await events.append(conn, [NewEvent(project_address, table.event_payload(write))])
    return _stored(table, row)


def _stored(table: PartyRecordTable[R], record: asyncpg.Record) -> R:
    """The typed row of an upsert's answer (its columns, then ``created``)."""
    rows.check_names((*getattr(table.row, "_fields"), "created"), record, table.table)  # noqa: B009
    stored: R = getattr(table.row, "_make")(record[:-1])  # noqa: B009
    return stored
