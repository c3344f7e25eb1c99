"""The notification vocabulary shared by the consumer, the sender and the API."""

from __future__ import annotations

import enum

# The event types are named by the rate-limit setting too, so they live with its parser.
from marketplace.config.notifications import NotificationEventType as NotificationEventType


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
