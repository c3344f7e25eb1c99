"""The consumer API: resumable, filtered, complete across trimming, lost entries and holes."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random

import asyncpg
import redis.asyncio as aioredis

from marketplace.events.types import (
    ChainReorg,
    ChainReorgPayload,
    NewEvent,
    ProjectRemoved,
    UnknownEvent,
)
from marketplace.outbox.consumer import EventHead, EventStream
from marketplace.storage.repositories import events as repo
from tests.integration.events.conftest import (
    STREAM,
    RelayStarter,
    collect,
    committed_ids,
    produce,
    removal,
    stream_ids,
    wait_relayed,
)


async def test_subscribe_resumes_after_an_id_and_filters_types(
    pool: asyncpg.Pool, start_relay: RelayStarter, stream: EventStream
) -> None:
    ids = []
    for i in range(12):
        async with pool.acquire() as conn, conn.transaction():
            other = NewEvent(
                "chain:31337",
                ChainReorgPayload(
                    chainId=31337,
                    forkBlock=i,
                    depth=1,
                    previousSyncedBlock=i + 1,
                    headBlock=i + 2,
                    removedProjects=[],
                    resnapshotProjects=[],
                ),
            )
            ids += await repo.append(conn, [removal(i), other])
    await start_relay()
    await wait_relayed(pool, ids[-1])
    removals = [i for n, i in enumerate(ids) if n % 2 == 0]

    everything = await collect(stream, len(ids))
    assert [e.id for e in everything] == ids
    events = await collect(stream, 6, after_id=removals[5], types={"project.removed"})
    assert [e.id for e in events] == removals[6:]
    assert all(isinstance(e, ProjectRemoved) for e in events)
    assert [e.payload.forkBlock for e in events] == list(range(6, 12))  # type: ignore[attr-defined]
    reorgs = await collect(stream, 2, after_id=ids[-5], types={"chain.reorg"})
    assert [type(e) for e in reorgs] == [ChainReorg, ChainReorg]
    assert [e.id for e in reorgs] == [ids[-3], ids[-1]]


async def test_subscribe_continues_with_events_committed_while_it_waits(
    pool: asyncpg.Pool, start_relay: RelayStarter, stream: EventStream
) -> None:
    first = await produce(pool, 3)
    await start_relay()
    consumer = asyncio.create_task(collect(stream, 8, after_id=first[0]))
    await asyncio.sleep(0.3)
    later = await produce(pool, 6)
    events = await asyncio.wait_for(consumer, 15)
    assert [e.id for e in events] == first[1:] + later


async def test_a_consumer_behind_the_trimmed_stream_catches_up_from_postgres(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    start_relay: RelayStarter,
    stream: EventStream,
) -> None:
    ids = await produce(pool, 100, per_transaction=10)
    await start_relay(maxlen=100)
    await wait_relayed(pool, ids[-1])
    kept = await stream_ids(redis)
    assert kept[0] > ids[0] + 500, "the stream was not trimmed"
    assert kept == ids[ids.index(kept[0]) :]

    consumer = asyncio.create_task(collect(stream, len(ids) - 10 + 5, after_id=ids[9]))
    await asyncio.sleep(0.5)
    more = await produce(pool, 5)  # and then live from the stream again
    events = await asyncio.wait_for(consumer, 30)
    assert [e.id for e in events] == ids[10:] + more
    assert len({e.id for e in events}) == len(events)


async def test_entries_lost_by_redis_are_read_from_postgres(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    start_relay: RelayStarter,
    stream: EventStream,
) -> None:
    ids = await produce(pool, 10)
    running = await start_relay()
    await wait_relayed(pool, ids[-1])
    # One entry gone from the middle, and then the whole stream (a Redis restart without
    # persistence): the relay goes on from its cursor, the older events exist only in Postgres.
    await redis.xdel(STREAM, f"{ids[4]}-0")
    events = await collect(stream, 10)
    assert [e.id for e in events] == ids
    await redis.delete(STREAM)
    more = await produce(pool, 4)
    await wait_relayed(pool, more[-1])
    assert await stream_ids(redis) == more
    assert running.relay.relayed == 14
    events = await collect(stream, 14)
    assert [e.id for e in events] == ids + more


async def test_an_empty_stream_means_postgres_up_to_the_newest_event(
    pool: asyncpg.Pool, stream: EventStream
) -> None:
    """No relay ran (or Redis lost everything): the consumer still gets every event."""
    ids = await produce(pool, 7)
    events = await collect(stream, 7, after_id=0)
    assert [e.id for e in events] == ids
    assert await repo.relay_cursor(pool) == 0


async def test_rolled_back_ids_do_not_stall_a_live_consumer(
    pool: asyncpg.Pool, start_relay: RelayStarter, stream: EventStream
) -> None:
    await start_relay()
    consumer = asyncio.create_task(collect(stream, 4))
    await asyncio.sleep(0.3)
    before = await produce(pool, 2)
    with contextlib.suppress(asyncpg.DivisionByZeroError):
        async with pool.acquire() as conn, conn.transaction():
            await repo.append(conn, [removal(99), removal(98)])
            await conn.execute("SELECT 1/0")
    after = await produce(pool, 2)
    events = await asyncio.wait_for(consumer, 15)
    assert [e.id for e in events] == before + after
    assert after[0] == before[-1] + 3  # the hole is there


async def test_concurrent_producers_reach_a_live_consumer_in_order_without_gaps(
    pool: asyncpg.Pool, start_relay: RelayStarter, stream: EventStream
) -> None:
    producers, rounds = 6, 20
    await start_relay(batch_size=7)  # many small batches interleaved with the commits

    async def produce_some(worker: int) -> int:
        rng = random.Random(worker)
        count = 0
        for n in range(rounds):
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_sleep($1)", rng.random() * 0.003)
                k = rng.randint(1, 3)
                await repo.append(conn, [removal(n) for _ in range(k)])
                count += k
        return count

    received: list[int] = []

    async def consume() -> None:
        async with contextlib.aclosing(stream.subscribe(None, 0)) as events:
            async for event in events:
                received.append(event.id)

    consumer = asyncio.create_task(consume())
    total = sum(await asyncio.gather(*(produce_some(w) for w in range(producers))))
    try:
        for _ in range(400):
            if len(received) >= total:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # and nothing beyond what was committed arrives
    finally:
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
    assert received == await committed_ids(pool)
    assert len(received) == total
    assert all(a < b for a, b in itertools.pairwise(received))


async def test_read_since_pages_through_postgres(pool: asyncpg.Pool, stream: EventStream) -> None:
    ids = await produce(pool, 5)
    async with pool.acquire() as conn, conn.transaction():
        (unknown,) = await repo.append(conn, [removal(0)])
        await conn.execute("UPDATE events SET type = 'future.thing' WHERE id = $1", unknown)
    page = await stream.read_since(0, limit=3)
    assert [e.id for e in page] == ids[:3]
    page = await stream.read_since(page[-1].id, limit=3)
    assert [e.id for e in page] == [*ids[3:], unknown]
    assert isinstance(page[-1], UnknownEvent)
    only = await stream.read_since(0, types={"future.thing"})
    assert [e.id for e in only] == [unknown]


async def test_replay_reads_a_bounded_range_from_the_stream_and_postgres_and_stops(
    pool: asyncpg.Pool, start_relay: RelayStarter, stream: EventStream, redis: aioredis.Redis
) -> None:
    ids = await produce(pool, 6)
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await repo.append(conn, [removal(99)])  # a hole: rolled back after taking an id
        await tx.rollback()
    ids += await produce(pool, 6)
    await start_relay()
    await wait_relayed(pool, ids[-1])
    # The stream keeps only the newest 5 entries: the start of the range is in Postgres only.
    await redis.xtrim(STREAM, maxlen=5, approximate=False)
    assert (await stream_ids(redis))[0] == ids[-5]

    async def replayed(after: int, through: int, types: set[str] | None = None) -> list[int]:
        async with contextlib.aclosing(stream.replay(after, through, types)) as events:
            return [event.id async for event in events]

    assert await replayed(ids[1], ids[-2]) == ids[2:-1]
    assert await replayed(0, ids[-1]) == ids
    assert await replayed(ids[-1], ids[-1]) == []
    assert await replayed(ids[3], ids[-1], {"chain.reorg"}) == []
    # Just committed (relayed or not yet): read wherever they are; replay never waits for more.
    later = await produce(pool, 2)
    assert await asyncio.wait_for(replayed(ids[-3], later[-1]), 5) == [*ids[-2:], *later]


async def test_subscribe_heads_yields_every_id_in_order_with_type_and_subject_only(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    start_relay: RelayStarter,
    stream: EventStream,
) -> None:
    """Heads come from the stream and, for an entry Redis lost, from Postgres; a type this code
    does not know and a payload its model refuses are passed on as heads like any other."""
    ids = await produce(pool, 6)
    async with pool.acquire() as conn, conn.transaction():
        unknown, malformed = await repo.append(conn, [removal(0), removal(1)])
        await conn.execute("UPDATE events SET type = 'future.thing' WHERE id = $1", unknown)
        await conn.execute("UPDATE events SET payload = '{}' WHERE id = $1", malformed)
    everything = [*ids, unknown, malformed]
    await start_relay()
    await wait_relayed(pool, malformed)
    await redis.xdel(STREAM, f"{ids[2]}-0")
    stored = {row.id: row for row in await repo.read_after(pool, 0, 100)}

    heads: list[EventHead] = []
    async with contextlib.aclosing(stream.subscribe_heads(ids[0])) as followed:
        async for head in followed:
            heads.append(head)
            if len(heads) == len(everything) - 1:
                break
    assert [h.id for h in heads] == everything[1:]
    assert all(isinstance(h, EventHead) for h in heads)
    assert [(h.type, h.subject) for h in heads] == [
        (stored[i].type, stored[i].subject) for i in everything[1:]
    ]
    assert heads[-2].type == "future.thing"
