"""Usernames: get, set (unique case-insensitively, race-safe), check, batch."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tests.api.identity.conftest import agent, create_key, error_of, other_id
from tests.conftest import User, new_user


async def _put(client: Any, user: User, username: str, user_id: Any = None) -> Any:
    body = {"userId": str(user_id or user.user_id), "username": username}
    return await client.put("/v1/username", json=body, headers=user.headers)


async def test_unset_username_is_null(client: Any) -> None:
    user = new_user()
    resp = await client.get(f"/v1/username?userId={user.user_id}", headers=user.headers)
    assert resp.status == 200
    assert await resp.json() == {"userId": str(user.user_id), "username": None}
    resp = await client.get("/v1/username", headers=user.headers)  # defaults to the caller
    assert await resp.json() == {"userId": str(user.user_id), "username": None}


async def test_set_and_get(client: Any) -> None:
    user = new_user()
    resp = await _put(client, user, "alice_01")
    record = await resp.json()
    assert resp.status == 200, record
    assert set(record) == {"userId", "username", "usernameLower", "createdAt", "updatedAt"}
    assert record["username"] == record["usernameLower"] == "alice_01"
    assert record["userId"] == str(user.user_id)

    resp = await client.get(f"/v1/username?userId={user.user_id}", headers=user.headers)
    assert await resp.json() == record

    # Setting the same name again changes nothing; changing your own name is allowed.
    same = await (await _put(client, user, "alice_01")).json()
    assert same == record
    renamed = await (await _put(client, user, "alice_02")).json()
    assert renamed["username"] == "alice_02"
    assert renamed["createdAt"] == record["createdAt"]
    assert renamed["updatedAt"] > record["updatedAt"]


async def test_another_users_name_is_taken_until_released(client: Any) -> None:
    alice, bob = new_user(), new_user()
    assert (await _put(client, alice, "shared")).status == 200
    resp = await _put(client, bob, "shared")
    assert await error_of(resp, 409) == "username_taken"
    assert (await _put(client, alice, "alice")).status == 200
    assert (await _put(client, bob, "shared")).status == 200


async def test_pattern_is_enforced_on_put(client: Any) -> None:
    user = new_user()
    for bad in ("ab", "a" * 25, "Alice", "with-dash", "spa ce", "émile", ""):
        resp = await _put(client, user, bad)
        assert await error_of(resp, 400) == "invalid_request", bad
    for good in ("abc", "a" * 24, "under_score_9"):
        assert (await _put(client, user, good)).status == 200


async def test_check(client: Any) -> None:
    alice, bob = new_user(), new_user()
    await _put(client, alice, "taken_name")

    async def check(user: User, name: str) -> dict[str, Any]:
        resp = await client.get(f"/v1/username/check?username={name}", headers=user.headers)
        assert resp.status == 200
        return dict(await resp.json())

    assert await check(bob, "free_name") == {
        "username": "free_name",
        "available": True,
        "reason": None,
    }
    assert await check(bob, "taken_name") == {
        "username": "taken_name",
        "available": False,
        "reason": "taken",
    }
    # Your own current name is available to you (a PUT of it succeeds).
    assert (await check(alice, "taken_name"))["available"] is True
    for bad in ("Taken_Name", "ab", "x" * 25, "dash-ed"):
        result = await check(bob, bad)
        assert result == {"username": bad, "available": False, "reason": "invalid_format"}
    resp = await client.get("/v1/username/check", headers=bob.headers)
    assert await error_of(resp, 400) == "invalid_request"


async def test_batch_returns_only_users_with_a_username(client: Any) -> None:
    alice, bob, carol = new_user(), new_user(), new_user()
    await _put(client, alice, "alice")
    await _put(client, bob, "bob")
    ids = [str(alice.user_id), str(bob.user_id), str(carol.user_id), str(alice.user_id)]
    resp = await client.post("/v1/username/batch", json={"userIds": ids}, headers=carol.headers)
    body = await resp.json()
    assert resp.status == 200
    assert body["count"] == 2
    assert {(i["userId"], i["username"]) for i in body["items"]} == {
        (str(alice.user_id), "alice"),
        (str(bob.user_id), "bob"),
    }

    at_limit = [other_id() for _ in range(199)] + [str(alice.user_id)]
    resp = await client.post("/v1/username/batch", json={"userIds": at_limit}, headers=bob.headers)
    assert (await resp.json())["count"] == 1
    over = [other_id() for _ in range(201)]
    resp = await client.post("/v1/username/batch", json={"userIds": over}, headers=bob.headers)
    assert await error_of(resp, 400) == "invalid_request"
    resp = await client.post("/v1/username/batch", json={"userIds": ["x"]}, headers=bob.headers)
    assert await error_of(resp, 400) == "invalid_request"


async def test_two_concurrent_claims_leave_exactly_one_owner(client: Any, db: Any) -> None:
    users = [new_user() for _ in range(2)]
    for user in users:  # create the user rows first so only the claims race
        assert (await client.get("/v1/username", headers=user.headers)).status == 200
    for round_no in range(25):
        name = f"race_{round_no}"
        first, second = await asyncio.gather(*(_put(client, u, name) for u in users))
        assert sorted([first.status, second.status]) == [200, 409], round_no
        loser = first if first.status == 409 else second
        assert (await loser.json())["error"] == "username_taken"
        owners = await db.fetch("SELECT user_id FROM usernames WHERE lower(username) = $1", name)
        winner = users[0] if first.status == 200 else users[1]
        assert [row["user_id"] for row in owners] == [winner.user_id]


async def test_strangers(client: Any) -> None:
    owner, stranger = new_user(), new_user()
    await _put(client, owner, "owner_name")
    # Nobody can set another user's name.
    resp = await _put(client, stranger, "stolen", user_id=owner.user_id)
    assert await error_of(resp, 403) == "forbidden"
    resp = await client.get(f"/v1/username?userId={owner.user_id}", headers=owner.headers)
    assert (await resp.json())["username"] == "owner_name"
    # Usernames are display names: another signed-in user may read them (as with the batch).
    resp = await client.get(f"/v1/username?userId={owner.user_id}", headers=stranger.headers)
    assert (await resp.json())["username"] == "owner_name"


async def test_anonymous_callers_are_refused(client: Any) -> None:
    for method, path, body in (
        ("GET", f"/v1/username?userId={uuid.uuid4()}", None),
        ("PUT", "/v1/username", {"userId": other_id(), "username": "anon"}),
        ("GET", "/v1/username/check?username=anon", None),
        ("POST", "/v1/username/batch", {"userIds": [other_id()]}),
    ):
        resp = await client.request(method, path, json=body)
        assert await error_of(resp, 401) == "unauthorized", path


async def test_an_agent_key_acts_for_its_user(client: Any) -> None:
    user = new_user()
    key = await create_key(client, user)
    body = {"userId": str(user.user_id), "username": "agent_set"}
    resp = await client.put("/v1/username", json=body, headers=agent(key["secret"]))
    assert resp.status == 200
    resp = await client.get("/v1/username", headers=user.headers)
    assert (await resp.json())["username"] == "agent_set"
