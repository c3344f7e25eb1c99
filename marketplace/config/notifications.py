"""The notification rate limit setting's own parsing (``MARKETPLACE_NOTIFICATION_RATE_LIMIT``) and
the event types it names, here so that ``config`` imports no domain package; the notifications
package uses and re-exports them (marketplace/notifications/rate_limit.py explains the limit)."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass


class NotificationEventType(enum.StrEnum):
    """What a delivery is about (the API's ``eventType``), one per kind of lifecycle e-mail."""

    BID_DRAFT = "bid_draft"
    DISPUTE_EVIDENCE = "dispute_evidence"
    PROJECT_CHAT_MESSAGE = "project_chat_message"
    DIRECT_MESSAGE = "direct_message"


DEFAULT_RATE = "5/3600"
DEFAULT_KEY = "default"


@dataclass(frozen=True)
class WindowRate:
    """At most ``count`` deliveries per ``period_seconds``."""

    count: int
    period_seconds: int

    @classmethod
    def parse(cls, text: str) -> WindowRate:
        try:
            count_text, period_text = text.split("/", 1)
            count, period = int(count_text), int(period_text)
        except (ValueError, AttributeError) as exc:
            raise ValueError(f"a notification rate looks like '5/3600', got {text!r}") from exc
        if count < 1 or period < 1:
            raise ValueError(f"a notification rate must be positive, got {text!r}")
        return cls(count, period)

    def __str__(self) -> str:
        return f"{self.count}/{self.period_seconds}"


@dataclass(frozen=True)
class NotificationRates:
    default: WindowRate
    overrides: dict[NotificationEventType, WindowRate]

    @classmethod
    def parse(cls, text: str) -> NotificationRates:
        """The setting's value: ``"N/T"`` or a JSON object of event type -> ``"N/T"``."""
        stripped = text.strip()
        if not stripped.startswith("{"):
            return cls(WindowRate.parse(stripped), {})
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON object: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("the per-event-type rates must be a JSON object")
        default = WindowRate.parse(DEFAULT_RATE)
        overrides: dict[NotificationEventType, WindowRate] = {}
        known = {t.value for t in NotificationEventType}
        for key, value in data.items():
            if not isinstance(value, str):
                raise ValueError(f"rate of {key!r} must be a string like '5/3600'")
            if key == DEFAULT_KEY:
                default = WindowRate.parse(value)
            elif key in known:
                overrides[NotificationEventType(key)] = WindowRate.parse(value)
            else:
                raise ValueError(
                    f"unknown notification event type {key!r} (known: {sorted(known)})"
                )
        return cls(default, overrides)

    def for_type(self, event_type: NotificationEventType) -> WindowRate:
        return self.overrides.get(event_type, self.default)
