"""Helpers of the notifications API tests: users, delivery rows, unsubscribe tokens.

Delivery rows are inserted straight into ``notification_deliveries`` (the consumer and the send
jobs that write them have their own tests); the API only reads them.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from tests.api.messaging.conftest import moderation_admin, signed_in
from tests.api.records.conftest import error_code
from tests.conftest import UNSUBSCRIBE_SECRET
from tests.support import apps

# A direct connection, opened after the shared ``client`` (tests/support/apps.py).
db = apps.db

__all__ = ["error_code", "moderation_admin", "signed_in"]

UNSUBSCRIBE_KEY = UNSUBSCRIBE_SECRET.encode()
EVENT_TYPES = ("bid_draft", "dispute_evidence", "project_chat_message", "direct_message")
ALL_ON = {event_type: {"email": True} for event_type in EVENT_TYPES}

INSERT_DELIVERY = """
INSERT INTO notification_deliveries
    (event_id, event_type, recipient_user_id, status, reason, attempts, last_error, subject,
     email, sent_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
        CASE WHEN $4 = 'sent' THEN now() END)
RETURNING id, seq
"""

_next_event_id = iter(range(1, 10**9))


async def add_delivery(
    db: asyncpg.Connection,
    recipient: uuid.UUID,
    *,
    event_type: str = "direct_message",
    status: str = "sent",
    reason: str | None = None,
    attempts: int = 1,
    last_error: str | None = None,
    subject: str = "New direct message",
) -> uuid.UUID:
    row = await db.fetchrow(
        INSERT_DELIVERY,
        next(_next_event_id),
        event_type,
        recipient,
        status,
        reason,
        attempts,
        last_error,
        subject,
        None if status == "suppressed" else "someone@example.com",
    )
    assert row is not None
    delivery_id: uuid.UUID = row["id"]
    return delivery_id


async def deliveries(client: Any, headers: dict[str, str], **params: Any) -> Any:
    return await client.get(
        "/v1/notifications/deliveries",
        params={k: str(v) for k, v in params.items()},
        headers=headers,
    )
