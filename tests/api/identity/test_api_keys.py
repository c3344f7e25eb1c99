"""Agent API keys: issue, authenticate, list, rotate, revoke, usage audit."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from typing import Any

from marketplace.http.routes.api_keys import USAGE_RECORDER
from marketplace.identity.api_keys import generate_key
from tests.api.identity.conftest import (
    GUARDED_PATH,
    agent,
    create_key,
    error_of,
    other_id,
)
from tests.conftest import bearer, make_token, new_user

RECORD_FIELDS = {
    "id",
    "name",
    "userId",
    "keyPrefix",
    "keyLast4",
    "createdAt",
    "lastUsedAt",
    "revokedAt",
}


async def _works(client: Any, secret: str) -> bool:
    resp = await client.get("/v1/auth/permissions", headers=agent(secret))
    if resp.status == 401:
        return False
    assert resp.status == 200, await resp.text()
    return True


async def _rotate(client: Any, key_id: str, headers: dict[str, str], **body: Any) -> Any:
    return await client.post(f"/v1/api-keys/{key_id}/rotate", json=body, headers=headers)


async def test_create_returns_the_secret_once(client: Any) -> None:
    user = new_user()
    key = await create_key(client, user, name="deploy bot")
    assert set(key) == RECORD_FIELDS | {"secret"}
    assert key["name"] == "deploy bot"
    assert key["userId"] == str(user.user_id)
    assert re.fullmatch(r"mkt_live_[0-9A-Za-z]{49}", key["secret"])
    assert key["keyPrefix"] == key["secret"][:13]
    assert key["keyLast4"] == key["secret"][-4:]
    assert key["lastUsedAt"] is None and key["revokedAt"] is None

    resp = await client.get(f"/v1/api-keys?userId={user.user_id}", headers=user.headers)
    listing = await resp.json()
    assert resp.status == 200
    assert listing["userId"] == str(user.user_id) and listing["count"] == 1
    assert set(listing["items"][0]) == RECORD_FIELDS
    assert key["secret"] not in await resp.text()


async def test_the_key_authenticates_as_its_user(client: Any) -> None:
    user = new_user()
    key = await create_key(client, user)
    resp = await client.get("/v1/auth/permissions", headers=agent(key["secret"]))
    assert (await resp.json())["userId"] == str(user.user_id)
    resp = await client.get("/v1/api-keys", headers=agent(key["secret"]))  # list: either
    assert (await resp.json())["items"][0]["id"] == key["id"]
    # Session and key of the same user together are fine; of different users, refused.
    both = {**user.headers, **agent(key["secret"])}
    assert (await client.get("/v1/auth/permissions", headers=both)).status == 200
    mixed = {**new_user().headers, **agent(key["secret"])}
    resp = await client.get("/v1/auth/permissions", headers=mixed)
    assert await error_of(resp, 401) == "principal_mismatch"


async def test_malformed_and_unknown_keys_are_refused(client: Any) -> None:
    user = new_user()
    key = await create_key(client, user)
    secret = key["secret"]
    flipped = secret[:20] + ("A" if secret[20] != "A" else "B") + secret[21:]
    for bad in (
        flipped,
        secret[:-1],
        secret + "x",
        "mkt_live_",
        "",
        "not a key",
        generate_key("mkt_live_"),
    ):
        resp = await client.get("/v1/auth/permissions", headers=agent(bad))
        assert await error_of(resp, 401) == "unauthorized", bad


async def test_create_validation_and_authorization(client: Any) -> None:
    user, stranger = new_user(), new_user()
    key = await create_key(client, user)
    uid = str(user.user_id)
    for name in ("", "   ", "x" * 101):
        resp = await client.post(
            "/v1/api-keys", json={"name": name, "userId": uid}, headers=user.headers
        )
        assert await error_of(resp, 400) == "invalid_request", name
    resp = await client.post("/v1/api-keys", json={"name": "n"}, headers=user.headers)
    assert await error_of(resp, 400) == "invalid_request"
    assert (
        await client.post(
            "/v1/api-keys", json={"name": "x" * 100, "userId": uid}, headers=user.headers
        )
    ).status == 201
    # Session only: an agent key cannot mint keys, even for its own user.
    resp = await client.post(
        "/v1/api-keys", json={"name": "n", "userId": uid}, headers=agent(key["secret"])
    )
    assert await error_of(resp, 403) == "forbidden"
    # Strangers and anonymous callers.
    resp = await client.post(
        "/v1/api-keys", json={"name": "n", "userId": uid}, headers=stranger.headers
    )
    assert await error_of(resp, 403) == "forbidden"
    resp = await client.post("/v1/api-keys", json={"name": "n", "userId": uid})
    assert await error_of(resp, 401) == "unauthorized"


async def test_list_is_self_only(client: Any) -> None:
    user, stranger = new_user(), new_user()
    key = await create_key(client, user)
    resp = await client.get(f"/v1/api-keys?userId={user.user_id}", headers=stranger.headers)
    assert await error_of(resp, 403) == "forbidden"
    resp = await client.get(f"/v1/api-keys?userId={stranger.user_id}", headers=agent(key["secret"]))
    assert await error_of(resp, 403) == "forbidden"
    resp = await client.get("/v1/api-keys", headers=stranger.headers)
    assert (await resp.json())["count"] == 0
    resp = await client.get("/v1/api-keys")
    assert await error_of(resp, 401) == "unauthorized"


async def test_active_key_limit(make_client: Any) -> None:
    client = await make_client(api_key_max_active_per_user=2)
    user = new_user()
    first = await create_key(client, user)
    await create_key(client, user)
    resp = await client.post(
        "/v1/api-keys", json={"name": "third", "userId": str(user.user_id)}, headers=user.headers
    )
    assert await error_of(resp, 409) == "api_key_limit_reached"
    await client.post(f"/v1/api-keys/{first['id']}/revoke", headers=user.headers)
    await create_key(client, user, name="third")


async def test_rotate_without_grace_stops_the_old_secret_at_once(client: Any) -> None:
    user = new_user()
    key = await create_key(client, user)
    resp = await _rotate(client, key["id"], user.headers)
    rotated = await resp.json()
    assert resp.status == 200, rotated
    assert set(rotated) == RECORD_FIELDS | {"secret", "graceExpiresAt"}
    assert rotated["id"] == key["id"] and rotated["graceExpiresAt"] is None
    assert rotated["secret"] != key["secret"]
    assert rotated["keyLast4"] == rotated["secret"][-4:]
    assert not await _works(client, key["secret"])
    assert await _works(client, rotated["secret"])
    # An empty body is a rotation without grace, too.
    resp = await client.post(f"/v1/api-keys/{key['id']}/rotate", headers=user.headers)
    assert resp.status == 200
    assert not await _works(client, rotated["secret"])


async def test_rotate_with_grace_keeps_the_old_secret_until_it_ends(client: Any) -> None:
    user = new_user()
    key = await create_key(client, user)
    resp = await _rotate(client, key["id"], user.headers, gracePeriodSeconds=1)
    rotated = await resp.json()
    assert resp.status == 200
    grace_end = datetime.fromisoformat(rotated["graceExpiresAt"])
    assert await _works(client, key["secret"])
    assert await _works(client, rotated["secret"])
    await asyncio.sleep(
        max(0.0, (grace_end - datetime.now(grace_end.tzinfo)).total_seconds()) + 0.2
    )
    assert not await _works(client, key["secret"])
    assert await _works(client, rotated["secret"])

    for bad in (-1, 7 * 24 * 3600 + 1, "soon"):
        resp = await _rotate(client, key["id"], user.headers, gracePeriodSeconds=bad)
        assert await error_of(resp, 400) == "invalid_request"
    resp = await _rotate(client, key["id"], user.headers, gracePeriodSeconds=7 * 24 * 3600)
    assert resp.status == 200


async def test_an_agent_key_may_rotate_only_itself(client: Any) -> None:
    user = new_user()
    key, sibling = await create_key(client, user), await create_key(client, user, "sibling")
    resp = await _rotate(client, sibling["id"], agent(key["secret"]))
    assert await error_of(resp, 403) == "forbidden"
    assert await _works(client, sibling["secret"])

    resp = await _rotate(client, key["id"], agent(key["secret"]), gracePeriodSeconds=60)
    rotated = await resp.json()
    assert resp.status == 200, rotated
    assert await _works(client, rotated["secret"])
    assert await _works(client, key["secret"])  # in grace: the deployed agent can switch over


async def test_revoke_takes_effect_at_once_on_every_frontend(make_client: Any) -> None:
    frontend_a, frontend_b = await make_client(), await make_client()
    user = new_user()
    key = await create_key(frontend_a, user)
    assert await _works(frontend_b, key["secret"])
    # An agent key cannot revoke (session only), not even itself.
    resp = await frontend_a.post(f"/v1/api-keys/{key['id']}/revoke", headers=agent(key["secret"]))
    assert await error_of(resp, 403) == "forbidden"

    resp = await frontend_a.post(f"/v1/api-keys/{key['id']}/revoke", headers=user.headers)
    revoked = await resp.json()
    assert resp.status == 200, revoked
    assert set(revoked) == RECORD_FIELDS and revoked["revokedAt"] is not None
    assert not await _works(frontend_a, key["secret"])
    assert not await _works(frontend_b, key["secret"])

    again = await (
        await frontend_b.post(f"/v1/api-keys/{key['id']}/revoke", headers=user.headers)
    ).json()
    assert again["revokedAt"] == revoked["revokedAt"]
    resp = await _rotate(frontend_b, key["id"], user.headers)
    assert await error_of(resp, 409) == "api_key_revoked"


async def test_revoking_during_grace_ends_both_secrets(client: Any) -> None:
    user = new_user()
    key = await create_key(client, user)
    rotated = await (await _rotate(client, key["id"], user.headers, gracePeriodSeconds=600)).json()
    await client.post(f"/v1/api-keys/{key['id']}/revoke", headers=user.headers)
    assert not await _works(client, key["secret"])
    assert not await _works(client, rotated["secret"])


async def test_strangers_and_anonymous_on_key_routes(client: Any) -> None:
    owner, stranger = new_user(), new_user()
    key = await create_key(client, owner)
    kid = key["id"]
    for path in (f"/v1/api-keys/{kid}/rotate", f"/v1/api-keys/{kid}/revoke"):
        # Someone else's key is indistinguishable from no key at all (issue 9).
        resp = await client.post(path, headers=stranger.headers)
        assert await error_of(resp, 404) == "api_key_not_found", path
        unknown = await client.post(path.replace(kid, other_id()), headers=stranger.headers)
        assert await unknown.json() == await resp.json()
        resp = await client.post(path)
        assert await error_of(resp, 401) == "unauthorized", path
        resp = await client.post(path.replace(kid, other_id()), headers=owner.headers)
        assert await error_of(resp, 404) == "api_key_not_found", path
        resp = await client.post(path.replace(kid, "not-a-uuid"), headers=owner.headers)
        assert await error_of(resp, 400) == "invalid_request", path
    resp = await client.get(f"/v1/api-keys/{kid}/audit", headers=stranger.headers)
    assert await error_of(resp, 404) == "api_key_not_found"
    resp = await client.get(
        f"/v1/api-keys/{kid}/audit?userId={owner.user_id}", headers=stranger.headers
    )
    assert await error_of(resp, 403) == "forbidden"
    resp = await client.get(f"/v1/api-keys/{kid}/audit")
    assert await error_of(resp, 401) == "unauthorized"
    resp = await client.get(f"/v1/api-keys/{kid}/audit", headers=agent(key["secret"]))
    assert await error_of(resp, 403) == "forbidden"  # session only
    assert await _works(client, key["secret"])  # untouched by all of that


async def test_audit_logs_every_request_of_the_key_newest_first(client: Any) -> None:
    user = new_user()
    key = await create_key(client, user)
    secret = key["secret"]
    await client.get("/v1/auth/permissions", headers=agent(secret))
    await client.get(f"/v1/api-keys?userId={user.user_id}", headers=agent(secret))
    await client.post(
        "/v1/api-keys", json={"name": "n", "userId": str(user.user_id)}, headers=agent(secret)
    )  # refused (session only), still logged
    await client.get("/v1/auth/permissions", headers=user.headers)  # session: not logged

    resp = await client.get(f"/v1/api-keys/{key['id']}/audit", headers=user.headers)
    body = await resp.json()
    assert resp.status == 200, body
    assert body["keyId"] == key["id"] and body["userId"] == str(user.user_id)
    assert body["count"] == 3 and body["nextCursor"] is None
    assert [(i["method"], i["route"], i["status"]) for i in body["items"]] == [
        ("POST", "/v1/api-keys", 403),
        ("GET", "/v1/api-keys", 200),
        ("GET", "/v1/auth/permissions", 200),
    ]
    assert all(i["clientAddress"] == "127.0.0.1" for i in body["items"])
    times = [i["occurredAt"] for i in body["items"]]
    assert times == sorted(times, reverse=True)

    listing = await (await client.get("/v1/api-keys", headers=user.headers)).json()
    assert listing["items"][0]["lastUsedAt"] == times[0]

    # The route template, not the concrete path, is recorded.
    await _rotate(client, key["id"], agent(secret), gracePeriodSeconds=60)
    body = await (await client.get(f"/v1/api-keys/{key['id']}/audit", headers=user.headers)).json()
    assert body["items"][0]["route"] == "/v1/api-keys/{keyId}/rotate"


async def test_audit_pagination(client: Any) -> None:
    user = new_user()
    key = await create_key(client, user)
    for _ in range(5):
        await client.get("/v1/auth/permissions", headers=agent(key["secret"]))
    url = f"/v1/api-keys/{key['id']}/audit?userId={user.user_id}&limit=2"
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await (
            await client.get(url + (f"&cursor={cursor}" if cursor else ""), headers=user.headers)
        ).json()
        pages += 1
        assert page["count"] == len(page["items"]) <= 2
        seen.extend(i["occurredAt"] for i in page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert pages == 3 and len(seen) == 5
    assert seen == sorted(seen, reverse=True)
    for bad in ("garbage", "1_2_3"):
        resp = await client.get(url + f"&cursor={bad}", headers=user.headers)
        assert await error_of(resp, 400) == "invalid_request"
    resp = await client.get(url.replace("limit=2", "limit=201"), headers=user.headers)
    assert await error_of(resp, 400) == "invalid_request"


async def test_usage_is_written_in_batches_not_per_request(make_client: Any, db: Any) -> None:
    client = await make_client(
        api_key_audit_flush_interval_ms=60_000, api_key_audit_flush_max_rows=4
    )
    user = new_user()
    key = await create_key(client, user)
    for _ in range(3):
        await client.get("/v1/auth/permissions", headers=agent(key["secret"]))
    recorder = client.app[USAGE_RECORDER]
    assert recorder.pending == 3
    assert await db.fetchval("SELECT count(*) FROM api_key_usage") == 0
    await client.get("/v1/auth/permissions", headers=agent(key["secret"]))  # 4th row: flush
    for _ in range(100):
        if await db.fetchval("SELECT count(*) FROM api_key_usage") == 4:
            break
        await asyncio.sleep(0.02)
    assert await db.fetchval("SELECT count(*) FROM api_key_usage") == 4
    assert recorder.pending == 0


async def test_usage_is_flushed_by_the_timer_and_on_shutdown(make_client: Any, db: Any) -> None:
    client = await make_client(api_key_audit_flush_interval_ms=50)
    user = new_user()
    key = await create_key(client, user)
    await client.get("/v1/auth/permissions", headers=agent(key["secret"]))
    for _ in range(100):
        if await db.fetchval("SELECT count(*) FROM api_key_usage") == 1:
            break
        await asyncio.sleep(0.02)
    assert await db.fetchval("SELECT count(*) FROM api_key_usage") == 1

    slow = await make_client(api_key_audit_flush_interval_ms=60_000)
    await slow.get("/v1/auth/permissions", headers=agent(key["secret"]))
    assert slow.app[USAGE_RECORDER].pending == 1
    await slow.close()
    assert await db.fetchval("SELECT count(*) FROM api_key_usage") == 2


async def test_agent_key_guarded_requests_use_the_users_latest_email_state(client: Any) -> None:
    user_id = new_user().user_id
    unverified = bearer(make_token(user_id, email_verified=False))
    verified = bearer(make_token(user_id, email_verified=True))
    await client.get("/v1/auth/permissions", headers=unverified)
    resp = await client.post(
        "/v1/api-keys", json={"name": "n", "userId": str(user_id)}, headers=unverified
    )
    key = await resp.json()
    resp = await client.post(GUARDED_PATH, json={"value": 1}, headers=agent(key["secret"]))
    assert await error_of(resp, 403) == "email_not_verified"
    await client.get("/v1/auth/permissions", headers=verified)  # the latest session is verified
    resp = await client.post(GUARDED_PATH, json={"value": 1}, headers=agent(key["secret"]))
    assert resp.status == 200
