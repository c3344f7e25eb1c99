"""SQL of message reports and their admin workflow (docs/messaging.md, "Reports").

Each write is one transaction: the report change, the message's ``body_status``, one audit entry
(``moderation_audit.record``) and the outbox event, the event last. Lock order, the same in every
writer so two of them never wait on each other in a cycle: the report row (status change only),
then the message row. A status change locks its report with ``FOR UPDATE`` before reading its
status, so of two admins moving the same open report only the first succeeds and the second
sees the new status.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from marketplace.events.types import (
    MessageReportedPayload,
    NewEvent,
    ReportUpdatedPayload,
    user_subject,
)
from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection, fetch_one
from marketplace.storage.repositories import events, moderation_audit

COLUMNS = (
    "id, seq, message_id, reporter_user_id, reason, status, note, created_at, updated_at, "
    "resolved_by_user_id"
)

INSERT_REPORT = f"""
INSERT INTO message_reports (message_id, reporter_user_id, reason) VALUES ($1, $2, $3)
ON CONFLICT (message_id, reporter_user_id) DO NOTHING
RETURNING {COLUMNS}
"""
SELECT_BY_REPORTER = f"""
SELECT {COLUMNS} FROM message_reports WHERE message_id = $1 AND reporter_user_id = $2
"""
SELECT_FOR_UPDATE = f"SELECT {COLUMNS} FROM message_reports WHERE id = $1 FOR UPDATE"
SELECT_REPORT = f"SELECT {COLUMNS} FROM message_reports WHERE id = $1"
# The message row is locked too: two reports of one message changing at once must not both
# count the other as still pending (and both leave the message `reported`).
LOCK_MESSAGE = "SELECT sender_user_id, body_status FROM messages WHERE id = $1 FOR UPDATE"
MARK_REPORTED = """
UPDATE messages SET body_status = 'reported' WHERE id = $1 AND body_status = 'visible'
RETURNING body_status
"""
SET_BODY_STATUS = "UPDATE messages SET body_status = $2 WHERE id = $1"
COUNT_OTHER_PENDING = """
SELECT count(*) FROM message_reports
WHERE message_id = $1 AND id <> $2 AND status IN ('open', 'reviewing')
"""
UPDATE_STATUS = f"""
UPDATE message_reports
SET status = $2,
    note = coalesce($3, note),
    updated_at = now(),
    resolved_by_user_id = CASE WHEN $2 IN ('actioned', 'dismissed') THEN $4::uuid
                               ELSE resolved_by_user_id END
WHERE id = $1
RETURNING {COLUMNS}
"""
SELECT_PAGE = f"""
SELECT {COLUMNS} FROM message_reports
WHERE ($1::text IS NULL OR status = $1) AND ($2::bigint IS NULL OR seq < $2)
ORDER BY seq DESC
LIMIT $3
"""


class ReportRow(NamedTuple):
    id: uuid.UUID
    seq: int
    message_id: uuid.UUID
    reporter_user_id: uuid.UUID
    reason: str
    status: str
    note: str | None
    created_at: datetime
    updated_at: datetime
    resolved_by_user_id: uuid.UUID | None


class LockedMessageRow(NamedTuple):
    sender_user_id: uuid.UUID
    body_status: str


async def create(
    conn: Connection,
    *,
    message_id: uuid.UUID,
    author_user_id: uuid.UUID,
    reporter_user_id: uuid.UUID,
    reason: str,
    message_kind: str,
) -> tuple[ReportRow, bool]:
    """The reporter's report of the message and whether it was created now (in the caller's
    transaction). A new report marks a visible message ``reported`` and writes its audit entry
    (subject: the author) and ``message.reported`` event; a repeated one writes nothing."""
    record = await conn.fetchrow(INSERT_REPORT, message_id, reporter_user_id, reason)
    if record is None:
        existing = await fetch_one(conn, SELECT_BY_REPORTER, message_id, reporter_user_id)
        return rows.one(ReportRow, existing), False
    row = rows.one(ReportRow, record)
    await conn.execute(MARK_REPORTED, message_id)
    await moderation_audit.record(
        conn,
        subject_user_id=author_user_id,
        actor_user_id=reporter_user_id,
        action="report_created",
        reason=reason,
        details={"reportId": str(row.id), "messageId": str(message_id), "kind": message_kind},
    )
    event = NewEvent(
        user_subject(author_user_id),
        MessageReportedPayload(
            reportId=str(row.id),
            messageId=str(message_id),
            reporterUserId=str(reporter_user_id),
            authorUserId=str(author_user_id),
        ),
    )
    await events.append(conn, [event])
    return row, True


async def get(conn: Conn, report_id: uuid.UUID) -> ReportRow | None:
    return rows.maybe(ReportRow, await conn.fetchrow(SELECT_REPORT, report_id))


async def lock(conn: Connection, report_id: uuid.UUID) -> ReportRow | None:
    """The report, locked until the transaction ends; None if there is none."""
    return rows.maybe(ReportRow, await conn.fetchrow(SELECT_FOR_UPDATE, report_id))


async def lock_message(conn: Connection, message_id: uuid.UUID) -> LockedMessageRow:
    """``sender_user_id`` and ``body_status`` of a report's message, locked until the transaction
    ends (the report's foreign key keeps the message)."""
    return rows.one(LockedMessageRow, await fetch_one(conn, LOCK_MESSAGE, message_id))


async def other_pending(conn: Connection, message_id: uuid.UUID, report_id: uuid.UUID) -> int:
    """Reports of the message, besides ``report_id``, still open or in review."""
    count: int = await conn.fetchval(COUNT_OTHER_PENDING, message_id, report_id)
    return count


async def apply_transition(
    conn: Connection,
    *,
    report: ReportRow,
    author_user_id: uuid.UUID,
    status: str,
    note: str | None,
    admin_user_id: uuid.UUID,
    body_status_before: str,
    body_status_after: str,
    also: Sequence[NewEvent] = (),
) -> ReportRow:
    """Write a checked transition (in the caller's transaction, report and message locked): the
    report, the message's body status when it changes, the audit entry (subject: the author,
    actor: the admin), the ``report.updated`` event and the events of ``also`` after it."""
    if body_status_after != body_status_before:
        await conn.execute(SET_BODY_STATUS, report.message_id, body_status_after)
    record = await fetch_one(conn, UPDATE_STATUS, report.id, status, note, admin_user_id)
    details = {
        "reportId": str(report.id),
        "messageId": str(report.message_id),
        "previousStatus": report.status,
        "status": status,
        "bodyStatus": body_status_after,
    }
    await moderation_audit.record(
        conn,
        subject_user_id=author_user_id,
        actor_user_id=admin_user_id,
        action="report_status_changed",
        reason=note,
        details=details,
    )
    event = NewEvent(
        user_subject(report.reporter_user_id),
        ReportUpdatedPayload(
            reportId=str(report.id),
            messageId=str(report.message_id),
            reporterUserId=str(report.reporter_user_id),
            authorUserId=str(author_user_id),
            status=status,
            previousStatus=report.status,
            bodyStatus=body_status_after,
        ),
    )
    await events.append(conn, [event, *also])
    return rows.one(ReportRow, record)


async def page(
    conn: Conn, *, status: str | None, before_seq: int | None, limit: int
) -> list[ReportRow]:
    return rows.many(ReportRow, await conn.fetch(SELECT_PAGE, status, before_seq, limit))
