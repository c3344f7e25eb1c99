"""GET /v1/moderation/suspensions (issue 27): the accounts suspended now (or ever, with
`state=all`), newest suspension first, for moderation admins only; anonymous 401, anyone else
403; keyset pages with `limit` and `cursor`."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from marketplace.moderation.models import SuspensionListResponse
from tests.api.moderation.conftest import (
    SUSPEND_AFTER,
    error_of,
    moderation_admin,
    offend,
    signed_in,
)

SUSPENSIONS = "/v1/moderation/suspensions"


def lift_path(user_id: uuid.UUID | str) -> str:
    return f"{SUSPENSIONS}/{user_id}"


async def listing(client: Any, caller: Any, **query: Any) -> dict[str, Any]:
    resp = await client.get(SUSPENSIONS, params=query, headers=caller.headers)
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    SuspensionListResponse.model_validate(body)
    assert body["count"] == len(body["items"])
    return body


async def seed_suspension(
    db: Any,
    user_id: uuid.UUID,
    *,
    started: timedelta,
    lasts: timedelta = timedelta(days=1),
    offenses: int = 1,
    lifted: bool = False,
) -> None:
    """A suspension that started ``started`` ago (and ``offenses`` offenses just before it),
    written straight into the tables as the user shard would."""
    offense_ids = [uuid.uuid4() for _ in range(offenses)]
    for offense_id in offense_ids:
        await db.execute(
            "INSERT INTO moderation_offenses (id, user_id, term, context, created_at) "
            "VALUES ($1, $2, 'badword-canary', 'direct', now() - $3::interval)",
            offense_id,
            user_id,
            started,
        )
    await db.execute(
        "INSERT INTO moderation_suspensions (user_id, offense_id, starts_at, ends_at, lifted_at) "
        "VALUES ($1, $2, now() - $3::interval, now() - $3::interval + $4::interval, "
        "CASE WHEN $5 THEN now() END)",
        user_id,
        offense_ids[-1],
        started,
        lasts,
        lifted,
    )


async def test_admins_see_the_suspended_accounts(client: Any, db: Any) -> None:
    admin = await moderation_admin(client, db)
    suspended, offender, clean = (
        await signed_in(client),
        await signed_in(client),
        await signed_in(client),
    )
    await offend(client, suspended, SUSPEND_AFTER)  # the threshold: suspended
    await offend(client, offender, SUSPEND_AFTER - 1)  # offenses, but not suspended

    body = await listing(client, admin)
    assert [item["userId"] for item in body["items"]] == [str(suspended.user_id)]
    assert body["nextCursor"] is None
    [item] = body["items"]
    assert set(item) == {"userId", "suspendedUntil", "suspendedAt", "offenses"}
    starts, ends = await db.fetchrow("SELECT starts_at, ends_at FROM moderation_suspensions")
    assert datetime.fromisoformat(item["suspendedUntil"]) == ends
    assert datetime.fromisoformat(item["suspendedAt"]) == starts
    assert item["offenses"] == SUSPEND_AFTER
    assert str(clean.user_id) not in str(body)

    # Lifted: no longer listed by default, still with state=all (not suspended now).
    assert (await client.delete(lift_path(suspended.user_id), headers=admin.headers)).status == 204
    assert (await listing(client, admin))["items"] == []
    everything = await listing(client, admin, state="all")
    [item] = everything["items"]
    assert item["userId"] == str(suspended.user_id)
    assert item["suspendedUntil"] is None
    assert datetime.fromisoformat(item["suspendedAt"]) == starts
    assert item["offenses"] == SUSPEND_AFTER


async def test_only_moderation_admins_list_suspensions(client: Any, db: Any) -> None:
    suspended, stranger = await signed_in(client), await signed_in(client)
    await offend(client, suspended, SUSPEND_AFTER)

    resp = await client.get(SUSPENSIONS)
    assert (await error_of(resp, 401))["error"] == "unauthorized"
    for caller in (stranger, suspended):  # not even the suspended account itself
        for query in ({}, {"state": "all"}):
            resp = await client.get(SUSPENSIONS, params=query, headers=caller.headers)
            body = await error_of(resp, 403)
            assert body["error"] == "not_moderation_admin"
            assert str(suspended.user_id) not in str(body)


async def test_pages_newest_suspension_first(client: Any, db: Any) -> None:
    admin = await moderation_admin(client, db)
    users = [uuid.uuid4() for _ in range(7)]
    for user_id in users:
        await db.execute("INSERT INTO users (user_id) VALUES ($1)", user_id)
    # users[i] suspended i hours ago; users[5] and users[6] start at the same moment (the user
    # id breaks the tie); one more whose suspension ended and one lifted: not active.
    started = [timedelta(hours=i) for i in range(5)] + [timedelta(hours=10)] * 2
    for index, (user_id, ago) in enumerate(zip(users, started, strict=True)):
        await seed_suspension(db, user_id, started=ago, offenses=index % 3 + 1)
    ended, lifted = uuid.uuid4(), uuid.uuid4()
    for user_id in (ended, lifted):
        await db.execute("INSERT INTO users (user_id) VALUES ($1)", user_id)
    await seed_suspension(db, ended, started=timedelta(days=3), lasts=timedelta(days=1))
    await seed_suspension(db, lifted, started=timedelta(minutes=1), lifted=True)
    # The same moment in the database for users[5] and users[6].
    await db.execute(
        "UPDATE moderation_suspensions SET starts_at = (SELECT starts_at FROM "
        "moderation_suspensions WHERE user_id = $1) WHERE user_id = $2",
        users[5],
        users[6],
    )
    tied = sorted([str(users[5]), str(users[6])], reverse=True)
    expected = [str(u) for u in users[:5]] + tied

    seen: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        query: dict[str, Any] = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        body = await listing(client, admin, **query)
        assert body["count"] <= 3
        seen += body["items"]
        pages += 1
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert pages == 3
    assert [item["userId"] for item in seen] == expected
    assert [item["offenses"] for item in seen[:5]] == [1, 2, 3, 1, 2]
    assert all(item["suspendedUntil"] is not None for item in seen)
    # One page of everything equals the pages joined.
    whole = await listing(client, admin, limit=100)
    assert whole["items"] == seen and whole["nextCursor"] is None

    # state=all: the lifted one (started a minute ago) and the ended one (oldest) too.
    everything = await listing(client, admin, state="all", limit=100)
    ids = [item["userId"] for item in everything["items"]]
    assert ids == [expected[0], str(lifted), *expected[1:], str(ended)]
    assert everything["items"][1]["suspendedUntil"] is None
    assert everything["items"][-1]["suspendedUntil"] is None
    # The ended suspension's offenses left the window (a day by default): zero now.
    assert everything["items"][-1]["offenses"] == 0

    # A cursor of one state is not a cursor of the other.
    first = await listing(client, admin, limit=2)
    resp = await client.get(
        SUSPENSIONS,
        params={"state": "all", "cursor": first["nextCursor"]},
        headers=admin.headers,
    )
    assert (await error_of(resp, 400))["error"] == "invalid_request"


@pytest.mark.parametrize(
    "query",
    [
        {"limit": "0"},
        {"limit": "101"},
        {"state": "lifted"},
        {"cursor": "bm90LWEtY3Vyc29y"},
        {"cursor": "x"},
    ],
)
async def test_suspension_query_validation(client: Any, db: Any, query: dict[str, str]) -> None:
    admin = await moderation_admin(client, db)
    resp = await client.get(SUSPENSIONS, params=query, headers=admin.headers)
    assert (await error_of(resp, 400))["error"] == "invalid_request"


async def test_the_document_lists_the_suspensions_route(client: Any) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    operation = doc["paths"][SUSPENSIONS]["get"]
    assert operation["operationId"] == "listModerationSuspensions"
    assert "`not_moderation_admin`" in operation["responses"]["403"]["description"]
    assert {"200", "400", "401", "403"} <= set(operation["responses"])
    params = {p["name"]: p for p in operation["parameters"]}
    assert set(params) == {"state", "limit", "cursor"}
    assert params["limit"]["schema"]["maximum"] == 100
    assert params["state"]["schema"]["default"] == "active"
    item = doc["components"]["schemas"]["SuspensionItem"]
    assert set(item["properties"]) == {"userId", "suspendedUntil", "suspendedAt", "offenses"}
