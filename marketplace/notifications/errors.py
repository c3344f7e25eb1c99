"""Refusals of the notifications API (docs/notifications.md)."""

from __future__ import annotations

from marketplace.errors import Forbidden, MarketplaceError


class NotDeliveryViewer(Forbidden):
    code = "not_delivery_viewer"
    default_message = (
        "only the recipient or a moderation admin may read a user's notification deliveries"
    )


class InvalidUnsubscribeToken(MarketplaceError):
    """The unsubscribe token is malformed, forged, or names an account that does not exist. The
    message never says which, so the answer teaches a forger nothing."""

    code = "invalid_unsubscribe_token"
    status = 400
    default_message = "this unsubscribe link is not valid"
