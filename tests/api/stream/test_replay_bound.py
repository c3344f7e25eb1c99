"""Bounded catch-up: a Last-Event-ID too far behind (more than stream_replay_max_events ids) or
older than the outbox retention gets `event: reset` and the stream goes on live, so opening a
stream costs at most the bound whatever id the client sends; real PostgreSQL, Redis and Ray."""

from __future__ import annotations

import time

import asyncpg
from prometheus_client import REGISTRY

from tests.api.records.conftest import linked_party, seed_project
from tests.api.stream.bulk import bulk_project_changes
from tests.api.stream.conftest import (
    AppFactory,
    Message,
    SseReader,
    change_project,
    open_stream,
    streaming,
)


def resets(reason: str) -> float:
    return REGISTRY.get_sample_value("marketplace_stream_resets_total", {"reason": reason}) or 0.0


async def open_resumed(client: object, headers: dict[str, str], last_event_id: int) -> SseReader:
    resp = await client.get(  # type: ignore[attr-defined]
        "/v1/stream", headers={**headers, "Last-Event-ID": str(last_event_id)}
    )
    assert resp.status == 200, await resp.text()
    return SseReader(resp)


def assert_reset(message: Message, *, position: int, last_event_id: int, reason: str) -> None:
    assert message.event == "reset"
    assert message.id == position
    assert message.data == {"position": position, "lastEventId": last_event_id, "reason": reason}


async def test_an_old_last_event_id_over_100k_events_is_reset_at_once_and_a_recent_one_replays(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    setup = await make_client()
    owner = await linked_party(setup)
    project = await seed_project(db, owner_address=owner.lower)
    await setup.close()
    # 100,000 events the owner may see, in one statement (about 1-2 s).
    bulk = await bulk_project_changes(db, project, 100_000)
    client = await make_client()  # its hub starts after them
    before = resets("replay_limit")

    started = time.monotonic()
    stream = await open_resumed(client, owner.headers, 0)
    try:
        first = await stream.message()
        # Before the bound, this open replayed all 100,000 (40 s here) before any live event.
        assert time.monotonic() - started < 5
        assert_reset(first, position=bulk[-1], last_event_id=0, reason="replay_limit")
        live = await change_project(db, project)
        assert (await stream.message()).id == live  # nothing replayed in between
    finally:
        stream.close()
    assert resets("replay_limit") == before + 1

    # Within the bound (1,000 by default): replayed, exactly, then live.
    after = bulk[-1] - 300
    async with streaming(client, owner.headers, last_event_id=after) as resumed:
        replayed = await resumed.events(300)
        assert [m.id for m in replayed] == [*range(after + 1, bulk[-1] + 1)]
        assert replayed[-1].data["payload"]["changes"] == {"title": "t100000"}
        assert (await resumed.event()).id == live
        newest = await change_project(db, project)
        assert (await resumed.event()).id == newest


async def test_the_replay_bound_counts_ids_behind_the_streams_position(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client(stream_replay_max_events=3)
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    async with streaming(client, owner.headers) as stream:
        ids = [await change_project(db, project, title=f"t{n}") for n in range(5)]
        assert [m.id for m in await stream.events(5)] == ids  # the hub is at ids[-1]
    # Three behind: replayed.
    async with streaming(client, owner.headers, last_event_id=ids[1]) as resumed:
        assert [m.id for m in await resumed.events(3)] == ids[2:]
    # Four behind: reset, then live; the query parameter is treated the same.
    for how in ("header", "query"):
        if how == "header":
            stream = await open_resumed(client, owner.headers, ids[0])
        else:
            resp = await client.get(
                "/v1/stream", headers=owner.headers, params={"lastEventId": str(ids[0])}
            )
            assert resp.status == 200
            stream = SseReader(resp)
        try:
            assert_reset(
                await stream.message(),
                position=ids[-1],
                last_event_id=ids[0],
                reason="replay_limit",
            )
            live = await change_project(db, project)
            assert (await stream.message()).id == live
        finally:
            stream.close()
        ids[-1] = live


async def test_a_last_event_id_older_than_the_retention_is_reset(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    async with streaming(client, owner.headers) as stream:
        ids = [await change_project(db, project, title=f"t{n}") for n in range(5)]
        assert [m.id for m in await stream.events(5)] == ids
    # The retention sweep deleted everything up to ids[1] (the Redis Stream still has them).
    await db.execute("DELETE FROM events WHERE id <= $1", ids[1])
    before = resets("retention")
    stream = await open_resumed(client, owner.headers, ids[0])
    try:
        # ids[1], which the client has not seen, is gone: the client must re-read.
        assert_reset(
            await stream.message(), position=ids[-1], last_event_id=ids[0], reason="retention"
        )
        live = await change_project(db, project)
        assert (await stream.message()).id == live
    finally:
        stream.close()
    assert resets("retention") == before + 1
    # A client that saw ids[1] misses nothing that was swept: replayed as usual.
    async with streaming(client, owner.headers, last_event_id=ids[1]) as resumed:
        assert [m.id for m in await resumed.events(4)] == [*ids[2:], live]


async def test_a_client_up_to_date_is_not_reset(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client(stream_replay_max_events=1)
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    async with streaming(client, owner.headers) as stream:
        seen = await change_project(db, project)
        assert (await stream.event()).id == seen
    # At the position, and ahead of it: a plain position message, no reset.
    for position in (seen, seen + 10**6):
        reader = await open_stream(client, owner.headers, last_event_id=position)
        try:
            assert reader.seen[0].event is None
            live = await change_project(db, project)
            assert (await reader.event()).id == live
        finally:
            reader.close()
