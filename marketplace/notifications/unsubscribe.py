"""One-click unsubscribe tokens and links (docs/notifications.md, "Preferences and unsubscribe").

A token binds one user id and one event type under HMAC-SHA256 keyed with
``MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET``::

    token = "u1." + base64url(user_id (16 bytes) || type code (1 byte) || mac (32 bytes))
    mac   = HMAC-SHA256(secret, "marketplace/notification-unsubscribe/v1\\0" || user_id || type)

A token has exactly one spelling: the base64url alphabet (``-`` and ``_``, never ``+`` or
``/``), no padding, no other characters, and the unused low bits of its last character zero.
Any other spelling of the same bytes (padded, the standard alphabet, a last character that
differs only in those unused bits) is refused like a forgery, so a token is its own identity:
whoever logs, compares or caches tokens never sees two names for one link.

It is URL-safe (no padding), carries no expiry (a link in an old e-mail keeps working, as
RFC 8058 one-click requires) and cannot be moved to another user or event type without the
secret: both are inside the MAC, and the MAC is compared in constant time. Rotating the secret
invalidates every link already mailed. Pure functions, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import uuid
from dataclasses import dataclass
from urllib.parse import quote

from marketplace.config import Settings
from marketplace.notifications.errors import InvalidUnsubscribeToken
from marketplace.notifications.models import NotificationEventType

TOKEN_PREFIX = "u1."
UNSUBSCRIBE_PATH = "/v1/notifications/unsubscribe"
_DOMAIN = b"marketplace/notification-unsubscribe/v1\x00"
_MAC_BYTES = 32
_RAW_BYTES = 16 + 1 + _MAC_BYTES
# The token's length is fixed: base64url of 49 bytes without padding, plus the prefix.
TOKEN_LENGTH = len(TOKEN_PREFIX) + (_RAW_BYTES * 4 + 2) // 3

# Stable one-byte codes (never renumber: mailed links carry them).
_TYPE_CODES: dict[NotificationEventType, int] = {
    NotificationEventType.BID_DRAFT: 1,
    NotificationEventType.DISPUTE_EVIDENCE: 2,
    NotificationEventType.PROJECT_CHAT_MESSAGE: 3,
    NotificationEventType.DIRECT_MESSAGE: 4,
}
_TYPES_BY_CODE = {code: event_type for event_type, code in _TYPE_CODES.items()}


class MissingUnsubscribeSecret(ValueError):
    """No secret configured: unsubscribe links can be neither made nor checked."""


@dataclass(frozen=True)
class UnsubscribeTarget:
    """Who unsubscribes from what."""

    user_id: uuid.UUID
    event_type: NotificationEventType


def unsubscribe_key(settings: Settings) -> bytes:
    """The HMAC key; :class:`MissingUnsubscribeSecret` when none is configured (``serve`` needs
    ``MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET``; ``up`` keeps one in the data dir)."""
    secret = settings.notification_unsubscribe_secret
    if secret is None:
        raise MissingUnsubscribeSecret(
            "no unsubscribe secret configured: set MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET "
            "(at least 32 characters; `marketplace up` keeps one in its data dir)"
        )
    return secret.get_secret_value().encode()


def _mac(key: bytes, user_id: uuid.UUID, code: int) -> bytes:
    return hmac.new(key, _DOMAIN + user_id.bytes + bytes([code]), hashlib.sha256).digest()


def make_token(key: bytes, user_id: uuid.UUID, event_type: NotificationEventType) -> str:
    code = _TYPE_CODES[NotificationEventType(event_type)]
    raw = user_id.bytes + bytes([code]) + _mac(key, user_id, code)
    return TOKEN_PREFIX + _encode(raw)


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def read_token(key: bytes, token: str) -> UnsubscribeTarget:
    """The target a token names; :class:`InvalidUnsubscribeToken` for anything this server did
    not sign (wrong shape, a spelling other than the canonical one, unknown type code, bad
    MAC)."""
    if len(token) != TOKEN_LENGTH or not token.isascii() or not token.startswith(TOKEN_PREFIX):
        raise InvalidUnsubscribeToken()
    body = token[len(TOKEN_PREFIX) :]
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise InvalidUnsubscribeToken() from None
    # The decoder also takes "+" and "/" and ignores the last character's unused bits: only the
    # spelling make_token writes is a token.
    if len(raw) != _RAW_BYTES or _encode(raw) != body:
        raise InvalidUnsubscribeToken()
    user_bytes, code, mac = raw[:16], raw[16], raw[17:]
    user_id = uuid.UUID(bytes=user_bytes)
    # The MAC is checked (in constant time) before the code is interpreted.
    if not hmac.compare_digest(mac, _mac(key, user_id, code)):
        raise InvalidUnsubscribeToken()
    event_type = _TYPES_BY_CODE.get(code)
    if event_type is None:
        raise InvalidUnsubscribeToken()
    return UnsubscribeTarget(user_id, event_type)


def public_base_url(settings: Settings) -> str:
    """Where clients reach this service: ``MARKETPLACE_PUBLIC_BASE_URL`` without a trailing
    slash, else ``http://<listen address>`` (fine for a local demo, wrong behind a proxy)."""
    configured = settings.public_base_url.strip().rstrip("/")
    return configured or f"http://{settings.listen_address}"


def unsubscribe_url(
    settings: Settings, user_id: uuid.UUID, event_type: NotificationEventType
) -> str:
    """The absolute one-click unsubscribe link for the ``List-Unsubscribe`` header and the
    e-mail's footer (``POST`` unsubscribes; ``GET`` shows a confirmation page)."""
    token = make_token(unsubscribe_key(settings), user_id, event_type)
    return f"{public_base_url(settings)}{UNSUBSCRIBE_PATH}?token={quote(token, safe='')}"
