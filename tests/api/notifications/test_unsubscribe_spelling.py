"""The unsubscribe endpoints accept a token only in its canonical spelling (issue 27): another
spelling of the same signed bytes is 400 `invalid_unsubscribe_token` on GET and POST and
unsubscribes nobody; the canonical token then works."""

from __future__ import annotations

from typing import Any

import asyncpg

from marketplace.notifications.models import NotificationEventType
from marketplace.notifications.unsubscribe import TOKEN_PREFIX, make_token
from tests.api.notifications.conftest import (
    ALL_ON,
    UNSUBSCRIBE_KEY,
    error_code,
    signed_in,
)
from tests.support import apps
from tests.unit.notifications.test_unsubscribe_spelling import lenient_bytes, spellings

UNSUBSCRIBE = "/v1/notifications/unsubscribe"
ONE_CLICK = {"List-Unsubscribe": "One-Click"}

# A direct connection, opened after the shared ``client`` (tests/support/apps.py).
db = apps.db


async def test_only_the_canonical_spelling_unsubscribes(
    client: Any, db: asyncpg.Connection
) -> None:
    # A user whose token has a character the standard alphabet spells differently.
    for _ in range(50):
        user = await signed_in(client)
        token = make_token(UNSUBSCRIBE_KEY, user.user_id, NotificationEventType.DIRECT_MESSAGE)
        if any(c in token[len(TOKEN_PREFIX) :] for c in "-_"):
            break
    else:
        raise AssertionError("no token with - or _")

    for kind, variant in spellings(token).items():
        assert lenient_bytes(variant.replace("U1.", TOKEN_PREFIX).strip()) == lenient_bytes(token)
        resp = await client.get(UNSUBSCRIBE, params={"token": variant})
        assert await error_code(resp, 400) == "invalid_unsubscribe_token", kind
        resp = await client.post(UNSUBSCRIBE, params={"token": variant}, data=ONE_CLICK)
        assert await error_code(resp, 400) == "invalid_unsubscribe_token", kind
    assert await db.fetchval("SELECT count(*) FROM notification_preferences") == 0
    resp = await client.get("/v1/notifications/preferences", headers=user.headers)
    assert await resp.json() == ALL_ON

    resp = await client.post(UNSUBSCRIBE, params={"token": token}, data=ONE_CLICK)
    assert resp.status == 200, await resp.text()
    assert await resp.json() == {"eventType": "direct_message", "email": False}
