"""GET/PUT /v1/notifications/preferences and the one-click unsubscribe link (RFC 8058)."""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
import asyncpg

from marketplace.notifications import preferences
from marketplace.notifications.models import NotificationEventType
from marketplace.notifications.unsubscribe import make_token, read_token, unsubscribe_url
from tests.api.identity.conftest import agent, create_key
from tests.api.notifications.conftest import (
    ALL_ON,
    UNSUBSCRIBE_KEY,
    error_code,
    signed_in,
)
from tests.conftest import Servers, bearer, make_settings, new_user

PREFS = "/v1/notifications/preferences"
UNSUBSCRIBE = "/v1/notifications/unsubscribe"
ONE_CLICK = {"List-Unsubscribe": "One-Click"}


async def get_prefs(client: Any, headers: dict[str, str]) -> dict[str, Any]:
    resp = await client.get(PREFS, headers=headers)
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


def token_for(user_id: uuid.UUID, event_type: str) -> str:
    return make_token(UNSUBSCRIBE_KEY, user_id, NotificationEventType(event_type))


async def one_click(client: Any, token: str, **kwargs: Any) -> Any:
    return await client.post(UNSUBSCRIBE, params={"token": token}, data=ONE_CLICK, **kwargs)


async def test_defaults_put_and_get_round_trip(client: Any) -> None:
    user = await signed_in(client)
    assert await get_prefs(client, user.headers) == ALL_ON

    resp = await client.put(
        PREFS,
        json={"direct_message": {"email": False}, "bid_draft": {"email": True}},
        headers=user.headers,
    )
    assert resp.status == 200, await resp.text()
    expected = {**ALL_ON, "direct_message": {"email": False}}
    assert await resp.json() == expected
    assert await get_prefs(client, user.headers) == expected

    # A subset leaves the rest alone; repeating is a no-op.
    for _ in range(2):
        resp = await client.put(
            PREFS, json={"dispute_evidence": {"email": False}}, headers=user.headers
        )
        assert resp.status == 200
    expected["dispute_evidence"] = {"email": False}
    assert await get_prefs(client, user.headers) == expected

    # Turned back on.
    resp = await client.put(PREFS, json={"direct_message": {"email": True}}, headers=user.headers)
    expected["direct_message"] = {"email": True}
    assert await resp.json() == expected

    # Another user is unaffected.
    other = await signed_in(client)
    assert await get_prefs(client, other.headers) == ALL_ON


async def test_an_agent_key_reads_and_writes_its_users_preferences(client: Any) -> None:
    user = await signed_in(client)
    key = await create_key(client, user)
    resp = await client.put(
        PREFS, json={"bid_draft": {"email": False}}, headers=agent(key["secret"])
    )
    assert resp.status == 200, await resp.text()
    assert (await get_prefs(client, user.headers))["bid_draft"] == {"email": False}


async def test_preference_validation(client: Any) -> None:
    user = await signed_in(client)
    bodies: tuple[dict[str, Any], ...] = (
        {"newsletter": {"email": False}},
        {"direct_message": {"email": "no"}},
        {"direct_message": {"email": 0}},
        {"direct_message": {"sms": True}},
        {"direct_message": True},
        {"direct_message": {}},
    )
    for body in bodies:
        resp = await client.put(PREFS, json=body, headers=user.headers)
        assert await error_code(resp, 400) == "invalid_request", body
    # Nothing was written by the refused requests.
    assert await get_prefs(client, user.headers) == ALL_ON


async def test_preferences_need_a_principal_and_put_is_guarded(client: Any) -> None:
    for method in ("GET", "PUT"):
        resp = await client.request(method, PREFS, json={})
        assert await error_code(resp, 401) == "unauthorized", method
        resp = await client.request(method, PREFS, json={}, headers=bearer("not-a-jwt"))
        assert await error_code(resp, 401) == "unauthorized", method
    unverified = new_user(email_verified=False)
    resp = await client.put(PREFS, json={"bid_draft": {"email": False}}, headers=unverified.headers)
    assert await error_code(resp, 403) == "email_not_verified"
    assert await get_prefs(client, unverified.headers) == ALL_ON


async def test_one_click_unsubscribes_that_type_only_and_is_idempotent(
    client: Any, db: asyncpg.Connection
) -> None:
    user = await signed_in(client)
    token = token_for(user.user_id, "project_chat_message")

    # GET shows a confirmation page and changes nothing (link prefetchers fetch it).
    for _ in range(2):
        resp = await client.get(UNSUBSCRIBE, params={"token": token})
        assert resp.status == 200
        assert resp.content_type == "text/html"
        page = await resp.text()
        assert "project chat messages" in page and 'name="List-Unsubscribe"' in page
        assert resp.headers["Referrer-Policy"] == "no-referrer"
        assert resp.headers["Cache-Control"] == "no-store"
    assert await get_prefs(client, user.headers) == ALL_ON

    # The one-click POST (no credentials) turns that type off, and only that type.
    for _ in range(2):
        resp = await one_click(client, token)
        assert resp.status == 200, await resp.text()
        assert await resp.json() == {"eventType": "project_chat_message", "email": False}
        assert await get_prefs(client, user.headers) == {
            **ALL_ON,
            "project_chat_message": {"email": False},
        }

    # The pipeline's check sees it.
    chat, dm = NotificationEventType.PROJECT_CHAT_MESSAGE, NotificationEventType.DIRECT_MESSAGE
    assert await preferences.email_enabled(db, user.user_id, chat) is False
    assert await preferences.email_enabled(db, user.user_id, dm) is True

    # The confirmation page now says so, without a button.
    resp = await client.get(UNSUBSCRIBE, params={"token": token})
    page = await resp.text()
    assert "no longer get e-mails about project chat messages" in page
    assert "<form" not in page


async def test_multipart_one_click_and_browser_form_submission(client: Any) -> None:
    user = await signed_in(client)
    form = aiohttp.FormData()
    form.add_field("List-Unsubscribe", "One-Click")
    form.add_field("ignored", "x")
    form._is_multipart = True  # as RFC 8058's example sends it: multipart/form-data
    resp = await client.post(
        UNSUBSCRIBE, params={"token": token_for(user.user_id, "bid_draft")}, data=form
    )
    assert resp.status == 200, await resp.text()
    assert (await get_prefs(client, user.headers))["bid_draft"] == {"email": False}

    # A browser submitting the confirmation page's form gets a page back.
    resp = await one_click(
        client, token_for(user.user_id, "direct_message"), headers={"Accept": "text/html"}
    )
    assert resp.status == 200 and resp.content_type == "text/html"
    assert "no longer get e-mails about direct messages" in await resp.text()
    assert (await get_prefs(client, user.headers))["direct_message"] == {"email": False}


async def test_forged_and_foreign_tokens_are_refused(client: Any, db: asyncpg.Connection) -> None:
    victim = await signed_in(client)
    attacker = await signed_in(client)
    own = token_for(attacker.user_id, "direct_message")
    target = read_token(UNSUBSCRIBE_KEY, own)
    assert target.user_id == attacker.user_id

    forged = [
        # Signed with another secret.
        make_token(
            b"another-secret-" + b"q" * 32, victim.user_id, NotificationEventType.DIRECT_MESSAGE
        ),
        # The attacker's own token with the user id swapped for the victim's.
        _swap_user(own, victim.user_id),
        # ... or with the event type byte changed.
        _swap_type(own, 1),
        # Truncated, padded, garbage.
        own[:-1],
        own + "A",
        "u1." + "A" * 66,
        "not-a-token",
    ]
    for token in forged:
        resp = await one_click(client, token)
        assert await error_code(resp, 400) == "invalid_unsubscribe_token", token
        resp = await client.get(UNSUBSCRIBE, params={"token": token})
        assert await error_code(resp, 400) == "invalid_unsubscribe_token", token
    assert await get_prefs(client, victim.headers) == ALL_ON
    assert await get_prefs(client, attacker.headers) == ALL_ON

    # A genuine token of an account that does not exist writes nothing.
    ghost = token_for(uuid.uuid4(), "direct_message")
    resp = await one_click(client, ghost)
    assert await error_code(resp, 400) == "invalid_unsubscribe_token"
    resp = await client.get(UNSUBSCRIBE, params={"token": ghost})
    assert await error_code(resp, 400) == "invalid_unsubscribe_token"
    assert await db.fetchval("SELECT count(*) FROM notification_preferences") == 0

    # No token at all.
    resp = await client.post(UNSUBSCRIBE, data=ONE_CLICK)
    assert await error_code(resp, 400) == "invalid_request"


async def test_one_click_body_is_required(client: Any) -> None:
    user = await signed_in(client)
    token = token_for(user.user_id, "direct_message")
    resp = await client.post(UNSUBSCRIBE, params={"token": token})
    assert await error_code(resp, 400) == "invalid_request"
    resp = await client.post(
        UNSUBSCRIBE, params={"token": token}, data={"List-Unsubscribe": "Yes-Please"}
    )
    assert await error_code(resp, 400) == "invalid_request"
    resp = await client.post(UNSUBSCRIBE, params={"token": token}, json=ONE_CLICK)
    assert await error_code(resp, 415) == "unsupported_media_type"
    assert await get_prefs(client, user.headers) == ALL_ON


async def test_unsubscribe_is_rate_limited_per_address(make_client: Any) -> None:
    client = await make_client(rate_limits={"notificationUnsubscribe": "2/60"})
    user = await signed_in(client)
    token = token_for(user.user_id, "direct_message")
    assert (await one_click(client, token)).status == 200
    assert (await one_click(client, token)).status == 200
    resp = await one_click(client, token)
    assert await error_code(resp, 429) == "rate_limited"
    assert "Retry-After" in resp.headers


def test_unsubscribe_url_uses_the_public_base_url(servers: Servers) -> None:
    user_id = uuid.uuid4()
    settings = make_settings(servers, public_base_url="https://market.example/")
    url = unsubscribe_url(settings, user_id, NotificationEventType.DISPUTE_EVIDENCE)
    prefix = "https://market.example/v1/notifications/unsubscribe?token="
    assert url.startswith(prefix)
    token = url[len(prefix) :]
    assert read_token(UNSUBSCRIBE_KEY, token).event_type is NotificationEventType.DISPUTE_EVIDENCE
    # Without one: the listen address.
    local = make_settings(servers, host="127.0.0.1", port=9090)
    assert unsubscribe_url(local, user_id, NotificationEventType.BID_DRAFT).startswith(
        "http://127.0.0.1:9090/v1/notifications/unsubscribe?token="
    )


def _swap_user(token: str, user_id: uuid.UUID) -> str:
    import base64

    raw = bytearray(base64.urlsafe_b64decode(token[3:] + "=" * (-len(token[3:]) % 4)))
    raw[:16] = user_id.bytes
    return "u1." + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def _swap_type(token: str, code: int) -> str:
    import base64

    raw = bytearray(base64.urlsafe_b64decode(token[3:] + "=" * (-len(token[3:]) % 4)))
    raw[16] = code
    return "u1." + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


async def test_a_malformed_multipart_body_is_400_not_500(client: Any) -> None:
    """Found by the schemathesis fuzzer: a part header that is not valid HTTP made aiohttp's
    form parser raise InvalidHeader, answered as 500."""
    user = await signed_in(client)
    boundary = "XyZ"
    body = (
        f"--{boundary}\r\n".encode()
        + b'Content-Disposition: form-data; name="\xc2\xa3\x0cnN"\r\n\r\nOne-Click\r\n'
        + f"--{boundary}--\r\n".encode()
    )
    resp = await client.post(
        UNSUBSCRIBE,
        params={"token": token_for(user.user_id, "direct_message")},
        data=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert await error_code(resp, 400) == "invalid_request"
    assert await get_prefs(client, user.headers) == ALL_ON
