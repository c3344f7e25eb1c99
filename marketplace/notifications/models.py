"""The notification vocabulary shared by the consumer, the sender and the API."""

from __future__ import annotations

import enum


class NotificationEventType(enum.StrEnum):
    """What a delivery is about (the API's ``eventType``), one per kind of lifecycle e-mail."""

    BID_DRAFT = "bid_draft"
    DISPUTE_EVIDENCE = "dispute_evidence"
    PROJECT_CHAT_MESSAGE = "project_chat_message"
    DIRECT_MESSAGE = "direct_message"


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
