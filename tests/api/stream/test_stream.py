"""GET /v1/stream: who receives what, resuming, heartbeats, the per-user limit, several
frontends and slow clients; real PostgreSQL, Redis and Ray, the app's own relay."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any, cast

import aiohttp
import asyncpg
import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from marketplace.events.types import BidDraftCreatedPayload, NewEvent
from marketplace.http.routes.stream import STREAM_HUB
from tests.api.identity.conftest import create_key
from tests.api.records.conftest import error_code, linked_party, seed_project
from tests.api.stream.conftest import (
    AppFactory,
    Message,
    SseReader,
    change_project,
    commit_events,
    open_stream,
    streaming,
)
from tests.conftest import Servers, bearer, make_token, new_user
from tests.support.waiting import eventually


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def last_stream_id(redis: aioredis.Redis) -> int:
    newest = cast(list[tuple[bytes, Any]], await redis.xrevrange("marketplace:events", count=1))
    return int(newest[0][0].split(b"-")[0]) if newest else 0


def ids(messages: list[Message]) -> list[int | None]:
    return [m.id for m in messages]


async def test_anonymous_and_bad_credentials_get_401(make_client: AppFactory) -> None:
    client = await make_client()
    resp = await client.get("/v1/stream")
    assert await error_code(resp, 401) == "unauthorized"
    resp = await client.get("/v1/stream", headers=bearer(make_token(ttl=-60)))
    assert await error_code(resp, 401) == "unauthorized"


async def test_owner_and_worker_get_project_changes_and_a_stranger_does_not(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    owner, worker, stranger = [await linked_party(client) for _ in range(3)]
    project = await seed_project(
        db, owner_address=owner.lower, selected_builder_address=worker.lower
    )
    strangers_project = await seed_project(db, owner_address=stranger.lower)
    delivered = sample(
        "marketplace_stream_events_delivered_total", type="project.changed", source="live"
    )
    latencies = sample("marketplace_stream_delivery_seconds_count")

    async with (
        streaming(client, owner.headers) as owner_stream,
        streaming(client, worker.headers) as worker_stream,
        streaming(client, stranger.headers) as stranger_stream,
    ):
        assert sample("marketplace_stream_connections") >= 3
        # Not streamed: a type without an audience rule, on the owner's own project.
        await commit_events(
            db,
            [
                NewEvent(
                    project,
                    BidDraftCreatedPayload(
                        draftId="d",
                        projectAddress=project,
                        bidderAddress=worker.lower,
                        draftHash="0x" + "11" * 32,
                        userId=str(worker.user.user_id),
                    ),
                )
            ],
        )
        first = await change_project(db, project, status="building")
        second = await change_project(db, strangers_project, status="completed")

        message = await owner_stream.event()
        assert message.id == first
        assert message.event == "project.changed"
        data = message.data
        assert data["id"] == first
        assert data["type"] == "project.changed"
        assert data["subject"] == project
        assert data["payload"]["changes"] == {"status": "building"}
        assert data["payload"]["milestones"] == []
        assert data["createdAt"].endswith("Z")
        assert (await worker_stream.event()).id == first
        # The stranger's first event is its own project's, later: the owner's never came.
        assert (await stranger_stream.event()).id == second

    assert (
        sample("marketplace_stream_events_delivered_total", type="project.changed", source="live")
        == delivered + 3
    )
    assert sample("marketplace_stream_delivery_seconds_count") == latencies + 3


async def test_an_agent_key_streams_its_users_events(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    owner = await linked_party(client)
    key = await create_key(client, owner.user)
    project = await seed_project(db, owner_address=owner.lower)
    async with streaming(client, {"x-agent-api-key": key["secret"]}) as stream:
        event_id = await change_project(db, project)
        assert (await stream.event()).id == event_id


async def test_authorization_is_checked_per_event(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    owner, worker = await linked_party(client), await linked_party(client)
    project = await seed_project(
        db, owner_address=owner.lower, selected_builder_address=worker.lower
    )
    async with (
        streaming(client, owner.headers) as owner_stream,
        streaming(client, worker.headers) as worker_stream,
    ):
        before = await change_project(db, project, status="building")
        assert (await worker_stream.event()).id == before
        assert (await owner_stream.event()).id == before
        # The worker is deselected; the next event is the owner's only.
        await db.execute(
            "UPDATE projects SET selected_builder_address = NULL WHERE project_address = $1",
            project,
        )
        after = await change_project(db, project, selectedBuilderAddress=None)
        workers_own = await seed_project(db, owner_address=worker.lower)
        marker = await change_project(db, workers_own)
        assert (await owner_stream.event()).id == after
        assert (await worker_stream.event()).id == marker


async def test_last_event_id_resumes_with_exactly_the_missed_visible_events(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    owner, stranger = await linked_party(client), await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    other = await seed_project(db, owner_address=stranger.lower)

    async with streaming(client, owner.headers) as stream:
        seen = await change_project(db, project)
        assert (await stream.event()).id == seen
    missed = []
    for n in range(3):
        missed.append(await change_project(db, project, title=f"t{n}"))
        await change_project(db, other)  # not the owner's: never replayed to it
    async with streaming(client, owner.headers, last_event_id=seen) as stream:
        replayed = await stream.events(3)
        assert ids(replayed) == missed
        assert [m.data["payload"]["changes"]["title"] for m in replayed] == ["t0", "t1", "t2"]
        live = await change_project(db, project)
        assert (await stream.event()).id == live
    # The query parameter works too, and the header wins over it.
    async with streaming(client, owner.headers, params={"lastEventId": str(missed[0])}) as stream:
        assert ids(await stream.events(3)) == [*missed[1:], live]
    async with streaming(
        client, owner.headers, last_event_id=missed[2], params={"lastEventId": "0"}
    ) as stream:
        assert (await stream.event()).id == live


async def test_resume_reads_from_postgres_when_the_redis_stream_was_trimmed(
    make_client: AppFactory, db: asyncpg.Connection, servers: Servers
) -> None:
    client = await make_client()
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    async with streaming(client, owner.headers) as stream:
        seen = await change_project(db, project)
        assert (await stream.event()).id == seen
    missed = [await change_project(db, project, title=f"t{n}") for n in range(4)]
    redis = aioredis.Redis.from_url(servers.redis_url)
    try:
        # Wait for the relay to have copied them, then drop the whole stream.
        await eventually(
            lambda: last_stream_id(redis),
            until=lambda last: last >= missed[-1],
            within=10,
            what="the relay to copy the events",
        )
        await redis.xtrim("marketplace:events", maxlen=0)
        assert await redis.xlen("marketplace:events") == 0
    finally:
        await redis.aclose()
    async with streaming(client, owner.headers, last_event_id=seen) as stream:
        assert ids(await stream.events(4)) == missed
        live = await change_project(db, project)
        assert (await stream.event()).id == live


async def test_catch_up_hands_over_to_live_events_without_gaps_or_duplicates(
    make_client: AppFactory, db: asyncpg.Connection, servers: Servers
) -> None:
    """Events keep coming while a client reconnects: it gets each one after its position once."""
    client = await make_client()
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    produced: list[int] = []
    producer_conn = await asyncpg.connect(servers.database_url)

    async def produce(count: int) -> None:
        for n in range(count):
            produced.append(await change_project(producer_conn, project, title=f"p{n}"))
            await asyncio.sleep(0.005)

    try:
        first = await change_project(db, project)
        producing = asyncio.create_task(produce(120))
        while len(produced) < 40:  # noqa: ASYNC110  (reconnect mid-way through the burst)
            await asyncio.sleep(0.01)
        async with streaming(client, owner.headers, last_event_id=first) as stream:
            await producing
            received = await stream.events(len(produced))
            assert ids(received) == produced
            extra = await change_project(db, project)
            assert (await stream.event()).id == extra  # and nothing in between
    finally:
        await producer_conn.close()


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "99999999999999999999", "1 2"])
async def test_a_malformed_last_event_id_is_400(make_client: AppFactory, value: str) -> None:
    client = await make_client()
    owner = await linked_party(client)
    resp = await client.get("/v1/stream", headers={**owner.headers, "Last-Event-ID": value})
    assert await error_code(resp, 400) == "invalid_request"
    resp = await client.get("/v1/stream", headers=owner.headers, params={"lastEventId": value})
    assert await error_code(resp, 400) == "invalid_request"
    # A refused stream holds no slot.
    for _ in range(5):
        (await open_stream(client, owner.headers)).close()


async def test_heartbeats_arrive_with_the_streams_position(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client(stream_heartbeat_seconds=0.2)
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    async with streaming(client, owner.headers) as stream:
        event_id = await change_project(db, project)
        assert (await stream.event()).id == event_id
        started = time.monotonic()
        beats: list[Message] = []
        while len(beats) < 2:
            message = await stream.message(within=3)
            assert not message.is_event
            beats.append(message)
        assert time.monotonic() - started < 2
        assert all(m.comments == ["heartbeat"] for m in beats)
        assert all(m.id == event_id for m in beats)


async def test_a_sixth_stream_is_429_and_a_closed_stream_frees_its_slot(
    make_client: AppFactory,
) -> None:
    client = await make_client()
    owner, other = await linked_party(client), await linked_party(client)
    streams = [await open_stream(client, owner.headers) for _ in range(5)]
    resp = await client.get("/v1/stream", headers=owner.headers)
    assert await error_code(resp, 429) == "rate_limited"
    assert 1 <= int(resp.headers["Retry-After"]) <= 45
    # Another user is not limited by this one's streams.
    (await open_stream(client, other.headers)).close()

    streams.pop().close()
    deadline = time.monotonic() + 5
    while True:
        resp = await client.get("/v1/stream", headers=owner.headers)
        if resp.status == 200:
            resp.close()
            break
        assert resp.status == 429
        resp.close()
        assert time.monotonic() < deadline, "the closed stream's slot was not freed"
        await asyncio.sleep(0.2)
    for stream in streams:
        stream.close()


async def test_a_crashed_frontends_slots_expire(servers: Servers, clean_state: None) -> None:
    """Leases not renewed (their frontend died) free their slots after the lease time."""
    import uuid

    from marketplace.errors import RateLimited
    from marketplace.stream.slots import StreamSlots

    redis = aioredis.Redis.from_url(servers.redis_url)
    try:
        slots = StreamSlots(redis, limit=2, lease_seconds=0.5)
        await slots.start_epoch()  # as a hub does when it starts
        user = uuid.uuid4()
        await slots.acquire(user, "a")
        await slots.acquire(user, "b")
        with pytest.raises(RateLimited):
            await slots.acquire(user, "c")
        await asyncio.sleep(0.3)
        await slots.renew([(user, "a")])  # a's frontend is alive, b's is not
        await asyncio.sleep(0.3)
        await slots.acquire(user, "c")  # b expired
        with pytest.raises(RateLimited):
            await slots.acquire(user, "d")
    finally:
        await redis.aclose()


async def test_two_frontends_share_events_and_the_stream_limit(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    relaying = await make_client()
    # The second frontend runs no relay: what it streams was relayed by the first.
    other = await make_client(events_relay_enabled=False)
    owner = await linked_party(relaying)
    project = await seed_project(db, owner_address=owner.lower)
    async with streaming(other, owner.headers) as stream:
        # Committed through the first frontend's pool.
        pool = relaying.app[STREAM_HUB].pool
        async with pool.acquire() as conn:
            event_id = await change_project(conn, project)
        message = await stream.event()
        assert message.id == event_id
        assert message.data["subject"] == project
        # Slots are counted across both: 1 here + 3 there + 1 here = 5, then 429 on either.
        streams = [await open_stream(relaying, owner.headers) for _ in range(3)]
        streams.append(await open_stream(other, owner.headers))
        for client in (relaying, other):
            resp = await client.get("/v1/stream", headers=owner.headers)
            assert await error_code(resp, 429) == "rate_limited"
        for opened in streams:
            opened.close()


async def test_a_client_that_does_not_read_is_cut_off_without_holding_up_others(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client(stream_queue_size=16)
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    hub = client.app[STREAM_HUB]
    overflows = sample("marketplace_stream_closed_total", reason="overflow")

    # A raw connection with a tiny receive buffer that never reads what it is sent: once the
    # kernel's buffers are full the server's writes to it block.
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(slow, (client.server.host, client.server.port))
    authorization = owner.headers["Authorization"]
    request = f"GET /v1/stream HTTP/1.1\r\nHost: test\r\nAuthorization: {authorization}\r\n\r\n"
    await loop.sock_sendall(slow, request.encode())
    mine = hub.by_user
    try:
        async with streaming(client, owner.headers) as fast:
            deadline = time.monotonic() + 10
            while len(mine.get(owner.user.user_id, ())) < 2:
                assert time.monotonic() < deadline, "the slow stream did not open"
                await asyncio.sleep(0.05)
            received: list[Message] = []

            async def read_fast() -> None:
                while True:
                    received.append(await fast.event(within=30))

            reading = asyncio.create_task(read_fast())
            big = "x" * 32_000
            produced: list[int] = []
            # Until the slow stream is dropped (a few MB fill the kernel's buffers), bounded.
            while len(mine[owner.user.user_id]) == 2 and len(produced) < 400:
                produced.append(await change_project(db, project, description=f"{big}"))
            assert len(mine[owner.user.user_id]) == 1, "the slow stream was never dropped"
            produced.append(await change_project(db, project))
            deadline = time.monotonic() + 30
            while len(received) < len(produced):
                assert time.monotonic() < deadline, f"{len(received)} of {len(produced)}"
                await asyncio.sleep(0.05)
            reading.cancel()
            # The reader that kept up got every event, in order, while the other was stuck.
            assert ids(received) == produced
        assert sample("marketplace_stream_closed_total", reason="overflow") == overflows + 1
    finally:
        slow.close()


async def test_a_stream_without_last_event_id_starts_now(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    old = await change_project(db, project)
    resp = await client.get("/v1/stream", headers=owner.headers)
    assert resp.status == 200
    stream_reader = SseReader(resp)
    position = await stream_reader.message()
    assert position.id is not None and position.id >= old and not position.is_event
    new = await change_project(db, project)
    assert (await stream_reader.event()).id == new
    resp.close()
    # A position ahead of every event (another deployment's id) also starts now.
    async with streaming(client, owner.headers, last_event_id=10**12) as stream:
        newer = await change_project(db, project)
        assert (await stream.event()).id == newer


async def test_shutting_down_ends_open_streams_instead_of_waiting_for_them(
    make_client: AppFactory,
) -> None:
    """A frontend that stops ends its streams first (their clients reconnect elsewhere), rather
    than waiting out the server's shutdown timeout (60 s) for handlers that never return."""
    client = await make_client()
    owner = await linked_party(client)
    stream = await open_stream(client, owner.headers)
    started = time.monotonic()
    closing = asyncio.create_task(client.server.close())
    with pytest.raises(EOFError):
        await stream.message(within=10)
    await closing
    assert time.monotonic() - started < 10


async def test_a_crowd_of_clients_opening_at_once_all_get_their_streams(
    make_client: AppFactory,
) -> None:
    """120 streams opened in the same moment (clients reconnecting after a frontend restart):
    more Redis commands at once than the app's Redis pool has connections (100), so they must
    wait for one rather than fail with 503."""
    client = await make_client()
    users = [new_user() for _ in range(24)]
    url = client.make_url("/v1/stream")
    # A session of its own: the test client's connector holds at most 100 connections.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        async with asyncio.timeout(60):
            opened = await asyncio.gather(
                *(http.get(url, headers=user.headers) for user in users for _ in range(5)),
                return_exceptions=True,
            )
        try:
            answered = [r for r in opened if isinstance(r, aiohttp.ClientResponse)]
            assert len(answered) == len(opened), [r for r in opened if r not in answered][:3]
            refused = [r for r in answered if r.status != 200]
            assert [(r.status, await r.text()) for r in refused[:3]] == []
        finally:
            for resp in opened:
                if isinstance(resp, aiohttp.ClientResponse):
                    resp.close()


async def read_to_the_end(reader: SseReader, within: float) -> None:
    """Read until the server ends the stream; heartbeats may come first, events may not."""
    while True:
        try:
            message = await reader.message(within=within)
        except EOFError:
            return
        assert not message.is_event, message


async def test_a_stream_ends_when_its_session_token_expires(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client(jwt_leeway_seconds=0)
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    short = bearer(make_token(owner.user.user_id, ttl=3))
    started = time.monotonic()
    async with streaming(client, short) as stream:
        event_id = await change_project(db, project)
        assert (await stream.event()).id == event_id
        await read_to_the_end(stream, within=10)
    assert time.monotonic() - started < 6
    # The expired token cannot open another one.
    resp = await client.get("/v1/stream", headers=short)
    assert await error_code(resp, 401) == "unauthorized"


async def test_a_stream_ends_when_its_agent_key_is_revoked(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client(stream_heartbeat_seconds=0.5)
    owner = await linked_party(client)
    key = await create_key(client, owner.user)
    project = await seed_project(db, owner_address=owner.lower)
    async with (
        streaming(client, {"x-agent-api-key": key["secret"]}) as keyed,
        streaming(client, owner.headers) as session,
    ):
        event_id = await change_project(db, project)
        assert (await keyed.event()).id == event_id
        resp = await client.post(f"/v1/api-keys/{key['id']}/revoke", headers=owner.headers)
        assert resp.status == 200, await resp.text()
        await read_to_the_end(keyed, within=5)
        # The session's own stream goes on.
        later = await change_project(db, project)
        assert [m.id for m in await session.events(2)] == [event_id, later]
