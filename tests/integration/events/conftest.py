"""Change-event tests: real PostgreSQL and Redis, relays run as tasks of the test's loop.

The relay lock is database-wide, so tests that start relays of their own keep the apps they
build from starting one (``events_relay_enabled=False``) unless the app's relay is the subject.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, cast

import asyncpg
import pytest
import redis.asyncio as aioredis

from marketplace.events.types import Event, NewEvent, ProjectRemovedPayload
from marketplace.outbox.consumer import EventStream
from marketplace.outbox.relay import EventRelay, RelayConfig
from marketplace.redis_client import Redis
from marketplace.storage.repositories import events as repo
from tests.conftest import Servers
from tests.support.db import open_pool
from tests.support.waiting import eventually

STREAM = "marketplace:events"
RELAY_CONFIG = RelayConfig(
    stream=STREAM,
    maxlen=100_000,
    poll_interval=0.05,
    batch_size=100,
    retention=None,
    standby_interval=0.2,
)


@pytest.fixture
async def pool(servers: Servers) -> AsyncIterator[asyncpg.Pool]:
    async with open_pool(servers, max_size=12) as pool:
        yield pool


@pytest.fixture
async def redis(servers: Servers, pool: asyncpg.Pool) -> AsyncIterator[aioredis.Redis]:
    # Raw bytes, unlike the app's client: the consumer must cope with either. The service's
    # client class all the same: a plain redis-py client can lose a task's cancellation
    # (marketplace/redis_client.py), which left a cancelled stream follower reading on for
    # good (test_consumer's live-consumer test hung until pytest's timeout).
    client = Redis.from_url(servers.redis_url)
    yield client
    await client.aclose()


@dataclasses.dataclass
class RunningRelay:
    relay: EventRelay
    task: asyncio.Task[None]

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


RELAY_LOCK_HOLDERS = """
SELECT a.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND ((l.classid::bigint << 32) | l.objid::bigint) = $1
"""


async def no_other_relay(servers: Servers, within: float = 15.0) -> None:
    """Fail at once, naming the holder, if a relay the test did not start holds the relay lock:
    one leaked by an earlier test would relay this test's events and fail it obscurely."""
    conn = await asyncpg.connect(servers.database_url)
    try:
        deadline = time.monotonic() + within
        while holders := await conn.fetch(RELAY_LOCK_HOLDERS, repo.RELAY_LOCK_KEY):
            if time.monotonic() > deadline:
                named = ", ".join(f"pid {h['pid']} ({h['application_name']})" for h in holders)
                pytest.fail(f"a relay from an earlier test still holds the relay lock: {named}")
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


RelayStarter = Callable[..., Awaitable[RunningRelay]]


@pytest.fixture
async def start_relay(servers: Servers, redis: aioredis.Redis) -> AsyncIterator[RelayStarter]:
    """Start a relay (optionally of a subclass, with config overrides); all stop at teardown."""
    await no_other_relay(servers)
    running: list[RunningRelay] = []

    async def start(cls: type[EventRelay] = EventRelay, **overrides: Any) -> RunningRelay:
        config = dataclasses.replace(RELAY_CONFIG, **overrides)
        relay = cls(servers.database_url, redis, config)
        handle = RunningRelay(relay, asyncio.create_task(relay.run()))
        running.append(handle)
        return handle

    yield start
    for handle in running:
        await handle.stop()


@pytest.fixture
def stream(redis: aioredis.Redis, pool: asyncpg.Pool) -> EventStream:
    return EventStream(redis, pool, stream=STREAM, block_ms=100)


def removal(i: int) -> NewEvent:
    """A small event of a real type (its subject is a random address)."""
    return NewEvent("0x" + os.urandom(20).hex(), ProjectRemovedPayload(reason="reorg", forkBlock=i))


async def produce(pool: asyncpg.Pool, transactions: int, per_transaction: int = 1) -> list[int]:
    """Commit ``transactions`` transactions of ``per_transaction`` events, one after the other;
    their ids, which are also their positions (they commit in id order)."""
    ids: list[int] = []
    for t in range(transactions):
        async with pool.acquire() as conn, conn.transaction():
            ids += await repo.append(conn, [removal(t) for _ in range(per_transaction)])
    return ids


async def committed_ids(pool: asyncpg.Pool) -> list[int]:
    """The positions (what consumers see as ids) of every committed event, in order; committed
    events nobody positioned yet are positioned first."""
    await repo.position_committed(pool, wait=True)
    rows = await pool.fetch("SELECT position FROM events WHERE position IS NOT NULL ORDER BY 1")
    return [row["position"] for row in rows]


async def stream_entries(
    redis: aioredis.Redis, first: str = "-", last: str = "+"
) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """Entries of the stream (the fixture's client answers in bytes)."""
    return cast(list[tuple[bytes, dict[bytes, bytes]]], await redis.xrange(STREAM, first, last))


async def stream_ids(redis: aioredis.Redis) -> list[int]:
    return [int(entry_id.split(b"-")[0]) for entry_id, _ in await stream_entries(redis)]


async def warm_shards(client: Any, within: float = 90.0) -> None:
    """Wait until the app's shard actors answer: on a loaded machine a new actor process can take
    longer to start than one request's actor-call timeout."""
    from marketplace.errors import ServiceUnavailable
    from marketplace.http import keys

    async def answered() -> bool:
        await client.app[keys.PROJECT_SHARDS].ping_all()
        return True

    await eventually(
        answered,
        within=within,
        what="the shard actors to answer",
        interval=0,
        retry_on=(ServiceUnavailable,),
    )


async def wait_relayed(pool: asyncpg.Pool, upto: int, within: float = 10.0) -> None:
    async def done() -> bool:
        return await repo.relay_cursor(pool) >= upto

    await eventually(done, within=within, what=f"relay cursor at {upto}", interval=0.02)


async def collect(
    stream: EventStream,
    count: int,
    *,
    after_id: int = 0,
    types: Collection[str] | None = None,
    within: float = 15.0,
) -> list[Event]:
    """The first ``count`` events ``subscribe`` yields."""
    events: list[Event] = []

    async def run() -> None:
        async with contextlib.aclosing(stream.subscribe(types, after_id)) as events_iter:
            async for event in events_iter:
                events.append(event)
                if len(events) == count:
                    return

    try:
        await asyncio.wait_for(run(), within)
    except TimeoutError:
        raise AssertionError(f"got {len(events)} of {count} events: {events[-3:]}") from None
    return events
