"""The delivery log as the API shows it (docs/notifications.md, "API"): one recipient's
deliveries, newest first, readable by the recipient and by moderation admins."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg
from pydantic import Field

from marketplace.identity.permissions import flags_of
from marketplace.notifications.errors import NotDeliveryViewer
from marketplace.notifications.models import (
    DeliveryChannel,
    DeliveryStatus,
    NotificationEventType,
)
from marketplace.pagination import BIGINT_MAX, CursorKind, keyset_page
from marketplace.storage.repositories import notifications as repo
from marketplace.types import QueryModel, ResponseModel

DELIVERY_CURSOR = CursorKind("n1", (BIGINT_MAX,))
LIST_LIMIT_DEFAULT = 50
LIST_LIMIT_MAX = 100


class DeliveriesQuery(QueryModel):
    userId: uuid.UUID | None = Field(
        default=None,
        description="whose deliveries: the caller's own (default), or anyone's for moderation "
        "admins",
    )
    eventType: NotificationEventType | None = Field(default=None, description="only this type")
    status: DeliveryStatus | None = Field(default=None, description="only this status")
    limit: int = Field(default=LIST_LIMIT_DEFAULT, ge=1, le=LIST_LIMIT_MAX, description="page size")
    cursor: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="opaque `nextCursor` of the previous page",
    )


class DeliveryItem(ResponseModel):
    id: uuid.UUID
    eventType: NotificationEventType
    recipientUserId: uuid.UUID
    channel: DeliveryChannel
    status: DeliveryStatus
    reason: str | None = Field(
        description="why it was not sent: for `suppressed` one of no_email, muted, blocked, "
        "unsubscribed; null otherwise"
    )
    attempts: int = Field(ge=0, description="SMTP attempts made so far")
    lastError: str | None = Field(description="the last attempt's error; null when none failed")
    subject: str
    createdAt: datetime
    sentAt: datetime | None = Field(
        description="when the SMTP server accepted it; null unless sent"
    )

    @classmethod
    def from_row(cls, row: repo.DeliveryRow) -> DeliveryItem:
        return cls(
            id=row.id,
            eventType=NotificationEventType(row.event_type),
            recipientUserId=row.recipient_user_id,
            channel=DeliveryChannel(row.channel),
            status=DeliveryStatus(row.status),
            reason=row.reason,
            attempts=row.attempts,
            lastError=row.last_error,
            subject=row.subject,
            createdAt=row.created_at,
            sentAt=row.sent_at,
        )


class DeliveriesResponse(ResponseModel):
    """Notification deliveries of one recipient, newest first."""

    items: list[DeliveryItem]
    count: int = Field(ge=0, description="items in this page")
    nextCursor: str | None = Field(
        description="pass as `cursor` for the next page; null on the last page"
    )


def _seq_position(row: repo.DeliveryRow) -> tuple[int]:
    return (row.seq,)


async def delivery_page(
    pool: asyncpg.Pool, *, viewer_id: uuid.UUID, query: DeliveriesQuery
) -> tuple[list[repo.DeliveryRow], str | None]:
    """The deliveries of ``query.userId`` (default: the viewer), newest first. Another user's
    are for moderation admins only (403 ``not_delivery_viewer``; the flag is read on every call,
    so a revoked flag takes effect at once)."""
    position = DELIVERY_CURSOR.position(query.cursor)
    recipient = query.userId or viewer_id
    if recipient != viewer_id and not (await flags_of(pool, viewer_id)).moderation_admin:
        raise NotDeliveryViewer()
    rows = await repo.delivery_page(
        pool,
        recipient_user_id=recipient,
        event_type=query.eventType.value if query.eventType else None,
        status=query.status.value if query.status else None,
        before_seq=position[0] if position else None,
        limit=query.limit + 1,
    )
    return keyset_page(rows, query.limit, DELIVERY_CURSOR, _seq_position)
