"""Stream tickets (POST /v1/stream/tickets, GET /v1/stream?ticket=...): a browser's EventSource
opens the stream without headers. Issue, single use, expiry, forgery, the principal a ticket is
bound to, and that no other route takes one; real PostgreSQL, Redis and Ray."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import datetime
from typing import Any

import asyncpg
import redis.asyncio as aioredis

from marketplace.stream.tickets import KEY_PREFIX
from tests.api.identity.conftest import create_key
from tests.api.records.conftest import error_code, linked_party, seed_project
from tests.api.stream.conftest import AppFactory, SseReader, change_project
from tests.conftest import Servers, bearer, make_token, new_user


async def issue(client: Any, headers: dict[str, str], **kw: Any) -> str:
    resp = await client.post("/v1/stream/tickets", headers=headers, **kw)
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    assert set(body) == {"ticket", "expiresAt"}
    ticket = body["ticket"]
    assert isinstance(ticket, str)
    return ticket


async def open_with(client: Any, ticket: str, **params: str) -> SseReader:
    """GET /v1/stream?ticket=... with no credential headers at all (as EventSource does)."""
    resp = await client.get("/v1/stream", params={"ticket": ticket, **params})
    assert resp.status == 200, await resp.text()
    reader = SseReader(resp)
    first = await reader.message()
    assert not first.is_event and first.id is not None
    return reader


async def test_a_ticket_is_issued_opaque_and_short_lived(make_client: AppFactory) -> None:
    client = await make_client(stream_ticket_ttl_seconds=30)
    user = new_user()
    before = time.time()
    resp = await client.post("/v1/stream/tickets", headers=user.headers)  # no body at all
    assert resp.status == 201, await resp.text()
    assert resp.headers["Cache-Control"] == "no-store"
    body = await resp.json()
    assert len(body["ticket"]) == 43 and body["ticket"].replace("-", "").replace("_", "").isalnum()
    expires = datetime.fromisoformat(body["expiresAt"]).timestamp()
    assert before + 29 <= expires <= time.time() + 30.5
    # `{}` works as well, every call is a new ticket, and nothing else is accepted in the body.
    other = await issue(client, user.headers, json={})
    assert other != body["ticket"]
    resp = await client.post("/v1/stream/tickets", headers=user.headers, json={"userId": "x"})
    assert await error_code(resp, 400) == "invalid_request"


async def test_anonymous_and_bad_credentials_cannot_get_a_ticket(make_client: AppFactory) -> None:
    client = await make_client()
    resp = await client.post("/v1/stream/tickets")
    assert await error_code(resp, 401) == "unauthorized"
    resp = await client.post("/v1/stream/tickets", headers=bearer(make_token(ttl=-60)))
    assert await error_code(resp, 401) == "unauthorized"
    resp = await client.post("/v1/stream/tickets", headers={"x-agent-api-key": "mk_nope"})
    assert await error_code(resp, 401) == "unauthorized"


async def test_a_ticket_opens_the_stream_once(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    ticket = await issue(client, owner.headers)
    stream = await open_with(client, ticket)
    try:
        event_id = await change_project(db, project)
        assert (await stream.event()).id == event_id
        # Spent: the same ticket again is refused, while the first stream goes on.
        resp = await client.get("/v1/stream", params={"ticket": ticket})
        assert await error_code(resp, 401) == "unauthorized"
        later = await change_project(db, project)
        assert (await stream.event()).id == later
    finally:
        stream.close()
    resp = await client.get("/v1/stream", params={"ticket": ticket})
    assert await error_code(resp, 401) == "unauthorized"


async def test_two_frontends_racing_for_one_ticket_open_one_stream(
    make_client: AppFactory,
) -> None:
    first, second = await make_client(), await make_client(events_relay_enabled=False)
    user = new_user()
    ticket = await issue(first, user.headers)
    answers = await asyncio.gather(
        *(c.get("/v1/stream", params={"ticket": ticket}) for c in (first, second, first, second))
    )
    try:
        assert sorted(r.status for r in answers) == [200, 401, 401, 401]
    finally:
        for resp in answers:
            resp.close()


async def test_an_expired_ticket_is_401(make_client: AppFactory) -> None:
    client = await make_client(stream_ticket_ttl_seconds=5)
    user = new_user()
    ticket = await issue(client, user.headers)
    await asyncio.sleep(5.3)
    resp = await client.get("/v1/stream", params={"ticket": ticket})
    assert await error_code(resp, 401) == "unauthorized"


async def test_forged_tickets_are_401_and_count_as_failed_authentication(
    make_client: AppFactory,
) -> None:
    client = await make_client(rate_limit_auth_failures="3/60")
    user = new_user()
    real = await issue(client, user.headers)
    forged = [
        real[:-1] + ("A" if real[-1] != "A" else "B"),  # one character off
        os.urandom(32).hex(),
        "",
        "x" * 200,
    ]
    statuses = []
    for ticket in forged:
        resp = await client.get("/v1/stream", params={"ticket": ticket})
        statuses.append(resp.status)
        if resp.status == 401:
            assert (await resp.json())["error"] == "unauthorized"
        resp.close()
    # Three failures spend the address's budget: the fourth guess is not even checked.
    assert statuses == [401, 401, 401, 429]


async def test_a_ticket_streams_its_own_users_events_only(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    owner, stranger = await linked_party(client), await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    strangers = await seed_project(db, owner_address=stranger.lower)
    owners_stream = await open_with(client, await issue(client, owner.headers))
    strangers_stream = await open_with(client, await issue(client, stranger.headers))
    try:
        mine = await change_project(db, project)
        theirs = await change_project(db, strangers)
        assert (await owners_stream.event()).id == mine
        assert (await strangers_stream.event()).id == theirs  # never the owner's
        # A resume position can be given with a ticket (EventSource polyfills, a new ticket
        # after a disconnect): the missed event comes first.
    finally:
        owners_stream.close()
        strangers_stream.close()
    missed = await change_project(db, project)
    resumed = await open_with(client, await issue(client, owner.headers), lastEventId=str(mine))
    try:
        assert (await resumed.event()).id == missed
    finally:
        resumed.close()


async def test_no_other_route_takes_a_ticket(make_client: AppFactory) -> None:
    client = await make_client()
    user = new_user()
    ticket = await issue(client, user.headers)
    for method, path in (
        ("GET", "/v1/notifications/preferences"),
        ("GET", "/v1/api-keys"),
        ("POST", "/v1/stream/tickets"),
    ):
        resp = await client.request(method, path, params={"ticket": ticket})
        assert await error_code(resp, 401) == "unauthorized", (method, path)
    # Those requests did not spend it.
    (await open_with(client, ticket)).close()


async def test_a_ticket_with_credential_headers_is_400(make_client: AppFactory) -> None:
    client = await make_client()
    user = new_user()
    ticket = await issue(client, user.headers)
    resp = await client.get("/v1/stream", params={"ticket": ticket}, headers=user.headers)
    assert await error_code(resp, 400) == "invalid_request"
    (await open_with(client, ticket)).close()  # not spent


async def test_the_stream_rate_limit_applies_to_ticket_opens(make_client: AppFactory) -> None:
    client = await make_client(rate_limits={"openEventStream": "1/60"})
    user = new_user()
    (await open_with(client, await issue(client, user.headers))).close()
    resp = await client.get("/v1/stream", params={"ticket": await issue(client, user.headers)})
    assert await error_code(resp, 429) == "rate_limited"


async def test_a_ticket_stream_ends_with_the_session_that_asked_for_it(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client(jwt_leeway_seconds=0)
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    short = bearer(make_token(owner.user.user_id, ttl=3))
    resp = await client.post("/v1/stream/tickets", headers=short)
    assert resp.status == 201
    body = await resp.json()
    # A ticket never outlives the session it was issued for.
    assert datetime.fromisoformat(body["expiresAt"]).timestamp() <= time.time() + 3.5
    started = time.monotonic()
    stream = await open_with(client, body["ticket"])
    try:
        event_id = await change_project(db, project)
        assert (await stream.event()).id == event_id
        while True:
            try:
                message = await stream.message(within=10)
            except EOFError:
                break
            assert not message.is_event
    finally:
        stream.close()
    assert time.monotonic() - started < 6


async def test_an_agent_key_ticket_ends_with_the_key(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client(stream_heartbeat_seconds=0.5)
    owner = await linked_party(client)
    key = await create_key(client, owner.user)
    keyed = {"x-agent-api-key": key["secret"]}
    project = await seed_project(db, owner_address=owner.lower)
    stream = await open_with(client, await issue(client, keyed))
    unused = await issue(client, keyed)
    try:
        event_id = await change_project(db, project)
        assert (await stream.event()).id == event_id
        resp = await client.post(f"/v1/api-keys/{key['id']}/revoke", headers=owner.headers)
        assert resp.status == 200, await resp.text()
        with_timeout = time.monotonic() + 5
        while True:
            try:
                message = await stream.message(within=5)
            except EOFError:
                break
            assert not message.is_event
            assert time.monotonic() < with_timeout
    finally:
        stream.close()
    # A ticket the key got before its revocation no longer opens anything.
    resp = await client.get("/v1/stream", params={"ticket": unused})
    assert await error_code(resp, 401) == "unauthorized"


async def test_redis_holds_only_a_hash_of_the_ticket(
    make_client: AppFactory, servers: Servers
) -> None:
    client = await make_client(stream_ticket_ttl_seconds=60)
    ticket = await issue(client, new_user().headers)
    redis = aioredis.Redis.from_url(servers.redis_url, decode_responses=True)
    try:
        stored = [key async for key in redis.scan_iter(match=f"{KEY_PREFIX}*")]
        assert len(stored) == 1 and ticket not in stored[0]
        assert 55 <= await redis.ttl(stored[0]) <= 60
        value = await redis.get(stored[0])
        assert isinstance(value, str) and ticket not in value
    finally:
        await redis.aclose()
