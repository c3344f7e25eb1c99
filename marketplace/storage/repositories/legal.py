"""Legal acceptance records: explicit and implied assent, one row each per document version."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from marketplace.storage import rows
from marketplace.storage.pool import Conn

_COLUMNS = "document_type, version, kind, accepted_at, accepted_via, api_key_id, trigger_route"

SELECT_OF_USER = f"""
SELECT {_COLUMNS} FROM legal_acceptances WHERE user_id = $1
ORDER BY accepted_at, document_type, version, kind
"""
# The guard's check: which of the required (type, version) pairs have no assent of any kind.
SELECT_MISSING = """
SELECT r.document_type, r.version
FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS r(document_type, version, position)
WHERE NOT EXISTS (
    SELECT 1 FROM legal_acceptances a
    WHERE a.user_id = $1 AND a.document_type = r.document_type AND a.version = r.version
)
ORDER BY r.position
"""
# Idempotent: a second acceptance of the same version and kind keeps the first record.
INSERT_ACCEPTANCES = """
INSERT INTO legal_acceptances
    (user_id, document_type, version, kind, accepted_via, api_key_id, trigger_route)
SELECT $1, t.document_type, t.version, $4, $5, $6, $7
FROM unnest($2::text[], $3::text[]) AS t(document_type, version)
ON CONFLICT (user_id, document_type, version, kind) DO NOTHING
"""
SELECT_ONE = f"""
SELECT {_COLUMNS} FROM legal_acceptances
WHERE user_id = $1 AND document_type = $2 AND version = $3 AND kind = $4
"""


class AcceptanceRow(NamedTuple):
    document_type: str
    version: str
    kind: str
    accepted_at: datetime
    accepted_via: str
    api_key_id: uuid.UUID | None
    trigger_route: str | None


async def list_for_user(conn: Conn, user_id: uuid.UUID) -> list[AcceptanceRow]:
    return rows.many(AcceptanceRow, await conn.fetch(SELECT_OF_USER, user_id))


async def missing(
    conn: Conn, user_id: uuid.UUID, required: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    if not required:
        return []
    types, versions = zip(*required, strict=True)
    records = await conn.fetch(SELECT_MISSING, user_id, list(types), list(versions))
    return [(document_type, version) for document_type, version in records]


async def record(
    conn: Conn,
    user_id: uuid.UUID,
    documents: Sequence[tuple[str, str]],
    *,
    kind: str,
    accepted_via: str,
    api_key_id: uuid.UUID | None,
    trigger_route: str | None,
) -> None:
    """Insert acceptances in one autocommitted statement (when given the pool)."""
    if not documents:
        return
    types, versions = zip(*documents, strict=True)
    await conn.execute(
        INSERT_ACCEPTANCES,
        user_id,
        list(types),
        list(versions),
        kind,
        accepted_via,
        api_key_id,
        trigger_route,
    )


async def get_one(
    conn: Conn, user_id: uuid.UUID, document_type: str, version: str, kind: str
) -> AcceptanceRow | None:
    record = await conn.fetchrow(SELECT_ONE, user_id, document_type, version, kind)
    return rows.maybe(AcceptanceRow, record)
