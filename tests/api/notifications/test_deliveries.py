"""GET /v1/notifications/deliveries: only the recipient (or a moderation admin) reads a user's
deliveries; filters, pagination, the item shape."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from tests.api.identity.conftest import agent, create_key
from tests.api.notifications.conftest import (
    add_delivery,
    deliveries,
    error_code,
    moderation_admin,
    signed_in,
)
from tests.conftest import bearer


async def test_deliveries_are_visible_only_to_their_recipient(
    client: Any, db: asyncpg.Connection
) -> None:
    recipient = await signed_in(client)
    stranger = await signed_in(client)
    mine = await add_delivery(db, recipient.user_id, subject="Alice sent you a message")
    await add_delivery(db, stranger.user_id, subject="Not for the recipient")

    resp = await deliveries(client, recipient.headers)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["count"] == 1 and body["nextCursor"] is None
    item = body["items"][0]
    assert item["id"] == str(mine)
    assert item["recipientUserId"] == str(recipient.user_id)
    assert item["subject"] == "Alice sent you a message"
    assert set(item) == {
        "id",
        "eventType",
        "recipientUserId",
        "channel",
        "status",
        "reason",
        "attempts",
        "lastError",
        "subject",
        "createdAt",
        "sentAt",
    }
    assert item["channel"] == "email" and item["status"] == "sent"
    assert item["sentAt"] is not None and item["reason"] is None and item["lastError"] is None

    # The stranger sees only their own row, and may not name the recipient.
    resp = await deliveries(client, stranger.headers)
    assert [i["subject"] for i in (await resp.json())["items"]] == ["Not for the recipient"]
    resp = await deliveries(client, stranger.headers, userId=recipient.user_id)
    assert await error_code(resp, 403) == "not_delivery_viewer"

    # Naming oneself is the same as naming nobody.
    resp = await deliveries(client, recipient.headers, userId=recipient.user_id)
    assert [i["id"] for i in (await resp.json())["items"]] == [str(mine)]

    # Anonymous and bad credentials.
    resp = await deliveries(client, {})
    assert await error_code(resp, 401) == "unauthorized"
    resp = await deliveries(client, bearer("not-a-jwt"))
    assert await error_code(resp, 401) == "unauthorized"


async def test_an_agent_key_reads_its_users_deliveries(client: Any, db: asyncpg.Connection) -> None:
    user = await signed_in(client)
    await add_delivery(db, user.user_id, event_type="bid_draft", subject="New bid draft")
    key = await create_key(client, user)
    resp = await deliveries(client, agent(key["secret"]))
    assert resp.status == 200, await resp.text()
    assert [i["subject"] for i in (await resp.json())["items"]] == ["New bid draft"]


async def test_moderation_admins_read_anyones_deliveries(
    client: Any, db: asyncpg.Connection
) -> None:
    recipient = await signed_in(client)
    admin = await moderation_admin(client, db)
    delivery = await add_delivery(
        db, recipient.user_id, status="suppressed", reason="muted", attempts=0
    )
    resp = await deliveries(client, admin.headers, userId=recipient.user_id)
    assert resp.status == 200, await resp.text()
    items = (await resp.json())["items"]
    assert [(i["id"], i["status"], i["reason"]) for i in items] == [
        (str(delivery), "suppressed", "muted")
    ]
    # Without userId an admin sees their own (none), not everyone's.
    resp = await deliveries(client, admin.headers)
    assert (await resp.json())["items"] == []

    # The flag is read per request: revoked, the admin is a stranger again.
    await db.execute("UPDATE users SET moderation_admin = false WHERE user_id = $1", admin.user_id)
    resp = await deliveries(client, admin.headers, userId=recipient.user_id)
    assert await error_code(resp, 403) == "not_delivery_viewer"


async def test_filters_and_pagination_newest_first(client: Any, db: asyncpg.Connection) -> None:
    user = await signed_in(client)
    created = []
    for n in range(7):
        event_type = "direct_message" if n % 2 == 0 else "project_chat_message"
        status = "sent" if n % 3 else "failed"
        created.append(
            (
                await add_delivery(
                    db,
                    user.user_id,
                    event_type=event_type,
                    status=status,
                    last_error="550 mailbox unavailable" if status == "failed" else None,
                    subject=f"delivery {n}",
                ),
                event_type,
                status,
            )
        )
    newest_first = list(reversed(created))

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        resp = await deliveries(client, user.headers, **params)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        assert body["count"] == len(body["items"]) <= 3
        seen += [item["id"] for item in body["items"]]
        pages += 1
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == [str(d) for d, _, _ in newest_first]

    resp = await deliveries(client, user.headers, eventType="project_chat_message")
    got = [i["id"] for i in (await resp.json())["items"]]
    assert got == [str(d) for d, t, _ in newest_first if t == "project_chat_message"]

    resp = await deliveries(client, user.headers, status="failed")
    items = (await resp.json())["items"]
    assert [i["id"] for i in items] == [str(d) for d, _, s in newest_first if s == "failed"]
    assert all(i["lastError"] == "550 mailbox unavailable" and i["sentAt"] is None for i in items)

    resp = await deliveries(
        client, user.headers, eventType="direct_message", status="failed", limit=1
    )
    body = await resp.json()
    expected = [str(d) for d, t, s in newest_first if t == "direct_message" and s == "failed"]
    assert [i["id"] for i in body["items"]] == expected[:1]
    resp = await deliveries(
        client,
        user.headers,
        eventType="direct_message",
        status="failed",
        limit=1,
        cursor=body["nextCursor"],
    )
    assert [i["id"] for i in (await resp.json())["items"]] == expected[1:2]


async def test_invalid_parameters_are_400(client: Any) -> None:
    user = await signed_in(client)
    for params in (
        {"limit": 0},
        {"limit": 101},
        {"eventType": "newsletter"},
        {"status": "bounced"},
        {"cursor": "not-a-cursor"},
        {"userId": "not-a-uuid"},
    ):
        resp = await deliveries(client, user.headers, **params)
        assert await error_code(resp, 400) == "invalid_request", params
    # A cursor of another listing is refused too.
    from marketplace.moderation.reads import AUDIT_CURSOR

    resp = await deliveries(client, user.headers, cursor=AUDIT_CURSOR.encode(5))
    assert await error_code(resp, 400) == "invalid_request"
    resp = await deliveries(client, user.headers, limit=100, userId=uuid.uuid4())
    assert await error_code(resp, 403) == "not_delivery_viewer"
