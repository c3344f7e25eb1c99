"""The notification vocabulary shared by the consumer, the sender and the API."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import Field

# The event types are named by the rate-limit setting too, so they live with its parser.
from marketplace.config.notifications import NotificationEventType as NotificationEventType
from marketplace.jobs.model import JobPayload


class DeliveryStatus(enum.StrEnum):
    QUEUED = "queued"
    SENT = "sent"
    FAILED = "failed"
    RATE_LIMITED = "rate_limited"
    SUPPRESSED = "suppressed"


class SuppressionReason(enum.StrEnum):
    """Why a delivery was ``suppressed`` (its ``reason``)."""

    NO_EMAIL = "no_email"
    MUTED = "muted"
    BLOCKED = "blocked"
    UNSUBSCRIBED = "unsubscribed"


class DeliveryChannel(enum.StrEnum):
    EMAIL = "email"


@dataclass(frozen=True)
class DeliveryToSend:
    """What the `notifications` job hands the sender (marketplace/notifications/sending.py)."""

    id: uuid.UUID
    event_id: int
    event_type: NotificationEventType
    recipient_user_id: uuid.UUID
    email: str
    subject: str
    # The API path of what the e-mail links to (notifications/links.py makes the URL).
    link_path: str
    # The previewed message's current text (chat and DMs, visible messages only), uncut: the
    # composer applies MARKETPLACE_NOTIFICATION_PREVIEW_CHARS.
    preview: str | None
    # The number of this attempt (1 on the first).
    attempt: int


# Sends one delivery; raises on failure (``PermanentJobError``: do not retry).
Send = Callable[[DeliveryToSend], Awaitable[None]]


class DeliveryJobPayload(JobPayload):
    """The payload of a `notifications` queue job: the delivery it sends (inserted with the job
    in one statement by the consumer), where its link points, and the message it previews."""

    delivery_id: uuid.UUID = Field(alias="deliveryId")
    # The API path of what the e-mail links to (notifications/links.py makes the URL).
    link_path: str = Field(default="/", alias="linkPath", min_length=1, max_length=2000)
    preview_message_id: uuid.UUID | None = Field(default=None, alias="previewMessageId")
