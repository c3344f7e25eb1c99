"""Refusals of the moderation rules (docs/messaging.md, "Offenses and suspensions").

Plain constructors (datetimes are carried as ISO strings), so the errors pickle across the Ray
boundary like every :class:`~marketplace.errors.MarketplaceError`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

from marketplace.errors import ErrorExtra, Forbidden, MarketplaceError


def iso_utc(moment: datetime) -> str:
    """``moment`` as the response models write date-times (UTC, ``Z``), for error extras."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class OffensiveContent(MarketplaceError):
    """A chat or DM body matched the term filter: the message was not stored, and the send was
    recorded as an offense against the sender. The message names neither the body nor the term:
    the answer may be shown or logged where the body must not be."""

    code = "offensive_content"
    status = 422
    default_message = (
        "the message contains a term that is not allowed; it was not sent and counts as an "
        "offense against your account"
    )


class SendingSuspended(Forbidden):
    """The account's sending is suspended after repeated offenses; ``until`` (ISO date-time) is
    when sends are accepted again, unless a moderation admin lifts it earlier."""

    code = "sending_suspended"
    default_message = "sending messages is suspended for this account after repeated offenses"
    # The extra field as the OpenAPI error examples show it.
    example_extra: ClassVar[ErrorExtra] = {"until": "2025-03-02T12:00:00Z"}

    def __init__(self, until: datetime, message: str | None = None) -> None:
        super().__init__(message, {"until": iso_utc(until)})

    @property
    def until(self) -> str:
        return str(self.extra["until"])


class NotModerationAdmin(Forbidden):
    code = "not_moderation_admin"
    default_message = "only moderation admins may do this"


class NotOffenseViewer(Forbidden):
    code = "not_offense_viewer"
    default_message = "only the user itself or a moderation admin may read a user's offenses"
