"""The moderation audit log (docs/messaging.md, "Audit log"): one row per offense, suspension,
lift, report and report transition, written by :func:`record` inside the transaction of the
change it describes, so an entry exists if and only if its change committed.

``actor_user_id`` is None for the system (the term filter and the suspension rule). ``details``
is a small JSON object of ids, terms and statuses: never a message body, so the log can be read
by moderators and kept after a message is removed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Literal, NamedTuple

from pydantic import JsonValue

from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection
from marketplace.types import JsonObject

AuditAction = Literal[
    "offense", "suspension", "suspension_lifted", "report_created", "report_status_changed"
]

COLUMNS = "id, seq, subject_user_id, actor_user_id, action, reason, details, created_at"

INSERT = """
INSERT INTO moderation_audit (subject_user_id, actor_user_id, action, reason, details)
VALUES ($1, $2, $3, $4, $5)
"""
# Newest first; keyset on seq (unique, in insert order). The subject filter uses
# moderation_audit_by_subject, the unfiltered list the seq index.
SELECT_PAGE = f"""
SELECT {COLUMNS} FROM moderation_audit
WHERE ($1::uuid IS NULL OR subject_user_id = $1) AND ($2::bigint IS NULL OR seq < $2)
ORDER BY seq DESC
LIMIT $3
"""


class AuditRow(NamedTuple):
    id: uuid.UUID
    seq: int
    subject_user_id: uuid.UUID
    actor_user_id: uuid.UUID | None  # None: the system
    action: AuditAction
    reason: str | None
    details: JsonObject  # the small JSON object :func:`record` stored
    created_at: datetime


async def record(
    conn: Connection,
    *,
    subject_user_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    action: AuditAction,
    reason: str | None,
    details: Mapping[str, JsonValue],
) -> None:
    """Insert one entry, in the caller's transaction (the change and its entry commit together).

    ``details`` must be JSON-serialisable plain values (uuids and datetimes as strings).
    """
    if not conn.is_in_transaction():
        raise RuntimeError("audit entries are written inside the transaction of their change")
    await conn.execute(INSERT, subject_user_id, actor_user_id, action, reason, details)


async def page(
    conn: Conn, *, subject_user_id: uuid.UUID | None, before_seq: int | None, limit: int
) -> list[AuditRow]:
    """Up to ``limit`` entries (of one subject when given) older than ``before_seq``, newest
    first."""
    return rows.many(AuditRow, await conn.fetch(SELECT_PAGE, subject_user_id, before_seq, limit))
