"""Notification preferences: per user and event type, e-mail on (the default) or off
(docs/notifications.md, "Preferences and unsubscribe").

The wire shape is ``{eventType: {email: boolean}}``. A read always names every event type (no
stored row: ``email: true``); a write may name a subset and leaves the others as they are.
"""

from __future__ import annotations

import uuid

from pydantic import Field

from marketplace.notifications.models import NotificationEventType
from marketplace.notifications.unsubscribe import UnsubscribeTarget
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import notifications as repo
from marketplace.types import RequestModel, ResponseModel


class ChannelPreference(ResponseModel):
    email: bool = Field(description="send this event type by e-mail")


class ChannelPreferenceInput(RequestModel):
    email: bool = Field(description="send this event type by e-mail")


class PreferencesResponse(ResponseModel):
    """The caller's notification preferences, every event type."""

    bid_draft: ChannelPreference
    dispute_evidence: ChannelPreference
    project_chat_message: ChannelPreference
    direct_message: ChannelPreference

    @classmethod
    def from_values(cls, values: dict[NotificationEventType, bool]) -> PreferencesResponse:
        return cls(**{t.value: ChannelPreference(email=values[t]) for t in NotificationEventType})


class PreferencesUpdate(RequestModel):
    """Some or all event types; those left out keep their preference. Unknown keys are refused."""

    bid_draft: ChannelPreferenceInput | None = None
    dispute_evidence: ChannelPreferenceInput | None = None
    project_chat_message: ChannelPreferenceInput | None = None
    direct_message: ChannelPreferenceInput | None = None

    def values(self) -> dict[NotificationEventType, bool]:
        chosen: dict[NotificationEventType, bool] = {}
        for event_type in NotificationEventType:
            entry = getattr(self, event_type.value)
            if entry is not None:
                chosen[event_type] = entry.email
        return chosen


# Both models name every event type as a field: a new type must be added to them.
assert set(PreferencesResponse.model_fields) == {t.value for t in NotificationEventType}
assert set(PreferencesUpdate.model_fields) == {t.value for t in NotificationEventType}


async def read_preferences(conn: Conn, user_id: uuid.UUID) -> dict[NotificationEventType, bool]:
    """Every event type's e-mail preference of a user (no stored row: True)."""
    stored = await repo.preferences(conn, user_id)
    return {t: stored.get(t.value, True) for t in NotificationEventType}


async def update_preferences(
    conn: Conn, user_id: uuid.UUID, values: dict[NotificationEventType, bool]
) -> dict[NotificationEventType, bool]:
    """Store the given preferences; answers all of them as they are now."""
    await repo.upsert_preferences(conn, user_id, {t.value: email for t, email in values.items()})
    return await read_preferences(conn, user_id)


async def email_enabled(conn: Conn, user_id: uuid.UUID, event_type: NotificationEventType) -> bool:
    """Whether ``user_id`` wants e-mail of ``event_type`` (the consumer's unsubscribe check)."""
    return await repo.email_enabled(conn, user_id, event_type.value)


async def target_state(conn: Conn, target: UnsubscribeTarget) -> bool | None:
    """Whether the target user gets e-mail of the target type now, or None when the user does
    not exist (the unsubscribe page's view)."""
    return await repo.preference_state(conn, target.user_id, target.event_type.value)


async def unsubscribe(conn: Conn, target: UnsubscribeTarget) -> bool:
    """Turn e-mail of one event type off for one user; idempotent. False when the user does not
    exist (nothing written)."""
    return await repo.set_preference(conn, target.user_id, target.event_type.value, False)
