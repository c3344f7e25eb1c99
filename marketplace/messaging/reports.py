"""Message reports and their admin workflow (docs/messaging.md, "Reports").

Anyone who can see a message may report it once (a repeat returns the first report); the report
marks the message ``reported``, which keeps it visible. Moderation admins list reports and move
them: open -> reviewing | actioned | dismissed, reviewing -> actioned | dismissed. ``actioned``
removes the message; ``dismissed`` makes it visible again when no other report of it is pending.
Every new report and every transition writes one audit entry whose subject is the message's
author, in the transaction of the change.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from marketplace.errors import InvalidRequest
from marketplace.events.types import MessageRemovedPayload, NewEvent, thread_subject
from marketplace.messaging import rules
from marketplace.messaging.errors import MessageNotFound, ReportNotFound
from marketplace.messaging.models import BodyStatus, ReportStatus
from marketplace.moderation.reads import require_moderation_admin
from marketplace.pagination import BIGINT_MAX, CursorKind, keyset_page
from marketplace.records.access import ProjectParties, caller_wallets
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import message_reports as repo
from marketplace.storage.repositories import messages as messages_repo
from marketplace.storage.repositories import projects as projects_repo

REPORT_CURSOR = CursorKind("r1", (BIGINT_MAX,))


async def can_see(conn: Conn, user_id: uuid.UUID, message: messages_repo.MessageRow) -> bool:
    """Whether the user can read the message now: a direct message's two participants; a chat
    message's project parties (an active link to the owner or the selected worker wallet)."""
    if message.kind == "direct":
        return user_id in (message.sender_user_id, message.recipient_user_id)
    wallets = await caller_wallets(conn, user_id)
    assert message.project_address is not None  # a chat message
    row = await projects_repo.visible_project_parties(conn, message.project_address, wallets)
    return row is not None and rules.is_chat_party(ProjectParties.from_row(row), wallets)


async def create(
    pool: asyncpg.Pool, reporter: uuid.UUID, message_id: uuid.UUID, reason: str
) -> tuple[repo.ReportRow, bool]:
    """The caller's report of the message and whether it is new. 404 ``message_not_found`` for a
    message the caller cannot see (or that does not exist); 400 for the caller's own message."""
    async with pool.acquire() as conn:
        message = await messages_repo.get_message(conn, message_id)
        if message is None or not await can_see(conn, reporter, message):
            raise MessageNotFound()
        if message.sender_user_id == reporter:
            raise InvalidRequest(
                "you cannot report your own message",
                [
                    {
                        "location": "body",
                        "field": "messageId",
                        "message": "is a message you sent",
                        "type": "value_error",
                    }
                ],
            )
        async with conn.transaction():
            return await repo.create(
                conn,
                message_id=message_id,
                author_user_id=message.sender_user_id,
                reporter_user_id=reporter,
                reason=reason,
                message_kind=message.kind,
            )


@dataclass(frozen=True)
class ReportPage:
    rows: list[repo.ReportRow]
    next_cursor: str | None


async def list_reports(
    pool: asyncpg.Pool,
    admin: uuid.UUID,
    *,
    status: ReportStatus | None,
    limit: int,
    cursor: str | None,
) -> ReportPage:
    """Reports (in one status when given), newest first; moderation admins only."""
    await require_moderation_admin(pool, admin)
    position = REPORT_CURSOR.position(cursor)
    rows = await repo.page(
        pool,
        status=None if status is None else status.value,
        before_seq=position[0] if position else None,
        limit=limit + 1,
    )
    page, next_cursor = keyset_page(rows, limit, REPORT_CURSOR, lambda row: (row.seq,))
    return ReportPage(page, next_cursor)


async def get_with_message(
    pool: asyncpg.Pool, admin: uuid.UUID, report_id: uuid.UUID
) -> tuple[repo.ReportRow, messages_repo.MessageRow]:
    """A report and the message it is about, body included even when removed (moderation admins
    only: 403 ``not_moderation_admin``; 404 ``report_not_found``)."""
    await require_moderation_admin(pool, admin)
    async with pool.acquire() as conn:
        report = await repo.get(conn, report_id)
        if report is None:
            raise ReportNotFound()
        # The report's foreign key keeps its message.
        message = await messages_repo.get_message(conn, report.message_id)
        if message is None:  # pragma: no cover - ON DELETE CASCADE removes the report too
            raise ReportNotFound()
    return report, message


async def change_status(
    pool: asyncpg.Pool,
    admin: uuid.UUID,
    report_id: uuid.UUID,
    status: ReportStatus,
    note: str | None,
) -> repo.ReportRow:
    """Move the report to ``status`` (moderation admins only; 404 ``report_not_found``, 409
    ``invalid_transition``), with the message's body status, the audit entry and the
    ``report.updated`` event, in one transaction with the report and its message locked."""
    await require_moderation_admin(pool, admin)
    async with pool.acquire() as conn, conn.transaction():
        report = await repo.lock(conn, report_id)
        if report is None:
            raise ReportNotFound()
        rules.check_transition(ReportStatus(report.status), status)
        message = await repo.lock_message(conn, report.message_id)
        before = BodyStatus(message.body_status)
        pending = (
            await repo.other_pending(conn, report.message_id, report_id)
            if status is ReportStatus.DISMISSED
            else 0
        )
        after = rules.body_status_after(status, before, other_pending_reports=pending)
        also: list[NewEvent] = []
        if after is BodyStatus.REMOVED and before is not BodyStatus.REMOVED:
            removed = await messages_repo.get_message(conn, report.message_id)
            if removed is not None:  # locked above, so it exists
                also.append(message_removed(removed, report.id))
        return await repo.apply_transition(
            conn,
            report=report,
            author_user_id=message.sender_user_id,
            status=status.value,
            note=note,
            admin_user_id=admin,
            body_status_before=before.value,
            body_status_after=after.value,
            also=also,
        )


def message_removed(message: messages_repo.MessageRow, report_id: uuid.UUID) -> NewEvent:
    """The ``message.removed`` event of a message whose body an actioned report removed: its
    subject (the project, or the DM thread) and audience are those of the message's own event."""
    if message.kind == "direct":
        return NewEvent(
            thread_subject(message.thread_id),
            MessageRemovedPayload(
                messageId=str(message.id),
                kind="direct",
                senderUserId=str(message.sender_user_id),
                reportId=str(report_id),
                threadId=str(message.thread_id),
                recipientUserId=str(message.recipient_user_id),
            ),
        )
    assert message.project_address is not None  # a chat message
    return NewEvent(
        message.project_address,
        MessageRemovedPayload(
            messageId=str(message.id),
            kind="project_chat",
            senderUserId=str(message.sender_user_id),
            reportId=str(report_id),
            projectAddress=message.project_address,
        ),
    )
