"""Notification deliveries (read side) and per-user notification preferences
(docs/notifications.md, "API" and "Preferences and unsubscribe").

The deliveries are written by the notifications consumer and its send jobs; this module only
reads them, a recipient's log newest first (keyset on ``seq``). Preferences have one row per user
and event type that was ever set; a missing row means e-mail on (the default).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple

from marketplace.storage import rows
from marketplace.storage.pool import Conn, fetch_one

DELIVERY_COLUMNS = (
    "id, seq, event_type, recipient_user_id, channel, status, reason, attempts, last_error, "
    "subject, created_at, sent_at"
)

# Newest first; keyset on seq. Uses notification_deliveries_recipient (recipient, seq DESC).
SELECT_DELIVERY_PAGE = f"""
SELECT {DELIVERY_COLUMNS} FROM notification_deliveries
WHERE recipient_user_id = $1
  AND ($2::text IS NULL OR event_type = $2)
  AND ($3::text IS NULL OR status = $3)
  AND ($4::bigint IS NULL OR seq < $4)
ORDER BY seq DESC
LIMIT $5
"""

SELECT_PREFERENCES = """
SELECT event_type, email FROM notification_preferences WHERE user_id = $1
"""

# Several event types in one statement; the user must exist (a row of `users`).
UPSERT_PREFERENCES = """
INSERT INTO notification_preferences (user_id, event_type, email)
SELECT $1, pref.event_type, pref.email
FROM unnest($2::text[], $3::boolean[]) AS pref (event_type, email)
ON CONFLICT (user_id, event_type) DO UPDATE
    SET email = excluded.email, updated_at = now()
    WHERE notification_preferences.email IS DISTINCT FROM excluded.email
"""

# One preference, only for a user that exists (an unsubscribe link of a deleted account sets
# nothing). Idempotent: an unchanged value rewrites nothing. Answers whether the user exists.
SET_PREFERENCE = """
WITH target AS (SELECT user_id FROM users WHERE user_id = $1),
written AS (
    INSERT INTO notification_preferences (user_id, event_type, email)
    SELECT user_id, $2, $3 FROM target
    ON CONFLICT (user_id, event_type) DO UPDATE
        SET email = excluded.email, updated_at = now()
        WHERE notification_preferences.email IS DISTINCT FROM excluded.email
)
SELECT EXISTS (SELECT 1 FROM target)
"""

SELECT_EMAIL_ENABLED = """
SELECT email FROM notification_preferences WHERE user_id = $1 AND event_type = $2
"""

# Whether the user exists, and their stored preference for one type (NULL: none stored).
SELECT_PREFERENCE_STATE = """
SELECT EXISTS (SELECT 1 FROM users WHERE user_id = $1) AS user_exists,
       (SELECT email FROM notification_preferences WHERE user_id = $1 AND event_type = $2)
           AS email
"""


class DeliveryRow(NamedTuple):
    """A delivery as the API lists it (DELIVERY_COLUMNS)."""

    id: uuid.UUID
    seq: int
    event_type: str
    recipient_user_id: uuid.UUID
    channel: str
    status: str
    reason: str | None
    attempts: int
    last_error: str | None
    subject: str
    created_at: datetime
    sent_at: datetime | None


async def delivery_page(
    conn: Conn,
    *,
    recipient_user_id: uuid.UUID,
    event_type: str | None,
    status: str | None,
    before_seq: int | None,
    limit: int,
) -> list[DeliveryRow]:
    """Up to ``limit`` deliveries of one recipient older than ``before_seq``, newest first,
    optionally of one event type and/or status."""
    records = await conn.fetch(
        SELECT_DELIVERY_PAGE, recipient_user_id, event_type, status, before_seq, limit
    )
    return rows.many(DeliveryRow, records)


async def preferences(conn: Conn, user_id: uuid.UUID) -> dict[str, bool]:
    """The stored preferences of a user, ``{event_type: email}`` (types never set are absent)."""
    records = await conn.fetch(SELECT_PREFERENCES, user_id)
    return {event_type: email for event_type, email in records}


async def upsert_preferences(conn: Conn, user_id: uuid.UUID, values: dict[str, bool]) -> None:
    """Store ``{event_type: email}`` for the given types (one statement, so all or none)."""
    if not values:
        return
    event_types = list(values)
    await conn.execute(UPSERT_PREFERENCES, user_id, event_types, [values[t] for t in event_types])


async def set_preference(conn: Conn, user_id: uuid.UUID, event_type: str, email: bool) -> bool:
    """Store one preference; idempotent. False when the user does not exist (nothing written)."""
    exists: bool = await conn.fetchval(SET_PREFERENCE, user_id, event_type, email)
    return exists


async def email_enabled(conn: Conn, user_id: uuid.UUID, event_type: str) -> bool:
    """Whether the user gets e-mail of this type (True unless a row says otherwise)."""
    value = await conn.fetchval(SELECT_EMAIL_ENABLED, user_id, event_type)
    return True if value is None else bool(value)


async def preference_state(conn: Conn, user_id: uuid.UUID, event_type: str) -> bool | None:
    """Whether the user gets e-mail of this type (True unless a row says otherwise), or None
    when the user does not exist."""
    user_exists, email = await fetch_one(conn, SELECT_PREFERENCE_STATE, user_id, event_type)
    if not user_exists:
        return None
    return True if email is None else bool(email)
