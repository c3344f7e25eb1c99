"""The relay: id order into the stream, crash safety, exactly one active relay, retention."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import asyncpg
import redis.asyncio as aioredis

from marketplace.outbox.consumer import EventStream
from marketplace.outbox.relay import EventRelay, relay_application_name
from marketplace.storage.repositories import events as repo
from tests.conftest import Servers
from tests.integration.events.conftest import (
    RELAY_LOCK_HOLDERS,
    RelayStarter,
    collect,
    committed_ids,
    produce,
    stream_entries,
    stream_ids,
    wait_relayed,
)
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[3]
RELAY_LOCK_HELD = """
SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND ((classid::bigint << 32) | objid::bigint) = $1
"""


async def relay_lock_held(pool: asyncpg.Pool) -> bool:
    return bool(await pool.fetchval(RELAY_LOCK_HELD, repo.RELAY_LOCK_KEY))


async def test_committed_events_reach_the_stream_in_id_order_under_their_ids(
    pool: asyncpg.Pool, redis: aioredis.Redis, start_relay: RelayStarter
) -> None:
    ids = await produce(pool, 25, per_transaction=10)
    running = await start_relay()
    await wait_relayed(pool, ids[-1])
    assert await stream_ids(redis) == ids
    assert running.relay.relayed == 250
    assert running.relay.active
    (stored,) = await repo.read_after(pool, ids[6], 1)
    ((entry_id, fields),) = await stream_entries(redis, f"{ids[7]}-0", f"{ids[7]}-0")
    assert entry_id == f"{stored.id}-0".encode()
    assert fields[b"type"] == b"project.removed"
    assert fields[b"subject"].decode() == stored.subject
    assert json.loads(fields[b"payload"]) == stored.payload
    assert fields[b"createdAt"].decode() == stored.created_at.isoformat()


async def test_a_commit_wakes_the_relay_before_its_poll_interval(
    pool: asyncpg.Pool, start_relay: RelayStarter
) -> None:
    running = await start_relay(poll_interval=30.0)

    async def active() -> bool:
        return running.relay.active

    await eventually(active, within=5, what="the relay to become active", interval=0.02)
    await asyncio.sleep(0.2)  # idle now, waiting for a notification or 30 s
    started = time.monotonic()
    ids = await produce(pool, 1)
    await wait_relayed(pool, ids[-1], within=5)
    assert time.monotonic() - started < 2


class CountingRelay(EventRelay):
    """Counts its rounds."""

    rounds = 0

    async def work(self, conn: asyncpg.Connection) -> bool:
        self.rounds += 1
        return await super().work(conn)


async def test_an_idle_relay_takes_one_round_per_commit_and_producers_wake_only_the_relay(
    pool: asyncpg.Pool, servers: Servers, start_relay: RelayStarter
) -> None:
    running = await start_relay(CountingRelay, poll_interval=30.0)
    relay = running.relay
    assert isinstance(relay, CountingRelay)

    async def idle_key_held() -> bool:
        return bool(await pool.fetchval(RELAY_LOCK_HELD, repo.RELAY_IDLE_KEY))

    await eventually(idle_key_held, within=5, what="the relay to sleep", interval=0.02)
    heard: list[str] = []
    conn = await asyncpg.connect(servers.database_url)
    try:
        for channel in (repo.WAKE_CHANNEL, repo.RELAY_WAKE_CHANNEL):
            await conn.add_listener(channel, lambda _c, _p, channel, _m: heard.append(channel))
        for _ in range(3):
            before = relay.rounds
            ids = await produce(pool, 1)
            await wait_relayed(pool, ids[-1], within=5)
            await eventually(idle_key_held, within=5, what="the relay to sleep", interval=0.02)
            await asyncio.sleep(0.1)
            # Woken by the producer, it positions and relays in one round, then sleeps again:
            # its own positioning's NOTIFY does not cost an empty round.
            assert relay.rounds == before + 1
    finally:
        await conn.close()
    # The producers (the relay slept) woke the relay's channel; the consumers' channel heard
    # only the relay's positioning.
    assert heard.count(repo.RELAY_WAKE_CHANNEL) == 3
    assert heard.count(repo.WAKE_CHANNEL) == 3


class FreezingRelay(EventRelay):
    """Stops for good between its second XADD pipeline and the cursor update."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.batches = 0
        self.frozen = asyncio.Event()

    async def _mark_relayed(self, conn: asyncpg.Connection, last_id: int) -> None:
        self.batches += 1
        if self.batches == 2:
            self.frozen.set()
            await asyncio.Event().wait()
        await super()._mark_relayed(conn, last_id)


async def test_a_relay_cancelled_between_xadd_and_cursor_update_loses_and_repeats_nothing(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    start_relay: RelayStarter,
    stream: EventStream,
) -> None:
    ids = await produce(pool, 30, per_transaction=10)
    first = await start_relay(FreezingRelay)
    relay = first.relay
    assert isinstance(relay, FreezingRelay)
    await asyncio.wait_for(relay.frozen.wait(), 10)
    await first.stop()
    # The second batch is in the stream, but the cursor still says only the first is relayed.
    assert await repo.relay_cursor(pool) == ids[99]
    assert await stream_ids(redis) == ids[:200]

    second = await start_relay()
    await wait_relayed(pool, ids[-1])
    assert second.relay.already_relayed == 100  # sent again, refused by Redis as present
    assert second.relay.relayed == 100
    assert await stream_ids(redis) == ids
    events = await collect(stream, len(ids))
    assert [e.id for e in events] == ids


class CuttingRelay(EventRelay):
    """Loses its database connection between its first XADD pipeline and the cursor update."""

    cut = False

    async def _mark_relayed(self, conn: asyncpg.Connection, last_id: int) -> None:
        if not self.cut:
            self.cut = True
            conn.terminate()
        await super()._mark_relayed(conn, last_id)


async def test_a_relay_whose_connection_dies_mid_batch_recovers_by_itself(
    pool: asyncpg.Pool, redis: aioredis.Redis, start_relay: RelayStarter
) -> None:
    ids = await produce(pool, 5, per_transaction=10)
    running = await start_relay(CuttingRelay)
    await wait_relayed(pool, ids[-1])
    assert running.relay.already_relayed == 50
    assert running.relay.relayed == 50
    assert running.relay.activations == 2  # reconnected and took the lock again
    assert await stream_ids(redis) == ids
    more = await produce(pool, 3)
    await wait_relayed(pool, more[-1])
    assert await stream_ids(redis) == ids + more


async def test_one_relay_is_active_and_a_standby_takes_over_when_it_stops(
    pool: asyncpg.Pool, redis: aioredis.Redis, start_relay: RelayStarter
) -> None:
    a = await start_relay()

    async def a_active() -> bool:
        return a.relay.active

    await eventually(a_active, within=5, what="relay A to become active", interval=0.02)
    # Operators can tell which process holds the lock.
    holders = await pool.fetch(RELAY_LOCK_HOLDERS, repo.RELAY_LOCK_KEY)
    assert [h["application_name"] for h in holders] == [relay_application_name()]
    assert relay_application_name().endswith(f":{os.getpid()}")
    b = await start_relay()
    await asyncio.sleep(1.0)  # five standby intervals
    assert not b.relay.active
    ids = await produce(pool, 10)
    await wait_relayed(pool, ids[-1])
    assert (a.relay.relayed, b.relay.relayed) == (10, 0)

    await a.stop()

    async def b_active() -> bool:
        return b.relay.active

    await eventually(b_active, within=3, what="relay B to take over", interval=0.02)
    more = await produce(pool, 10)
    await wait_relayed(pool, more[-1])
    assert b.relay.relayed == 10
    assert await stream_ids(redis) == ids + more


async def test_a_relay_process_killed_after_xadd_is_replaced_and_nothing_is_lost_or_repeated(
    servers: Servers,
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    start_relay: RelayStarter,
    stream: EventStream,
) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.integration.events.relay_child",
        servers.database_url,
        servers.redis_url,
        cwd=ROOT,
    )
    try:

        async def child_holds_lock() -> bool:
            return await relay_lock_held(pool)

        await eventually(
            child_holds_lock, within=30, what="the child relay to take the lock", interval=0.02
        )
        standby = await start_relay()
        await asyncio.sleep(0.5)
        assert not standby.relay.active
        ids = await produce(pool, 1, per_transaction=40)
        # The child wakes, XADDs the batch and SIGKILLs itself before moving the cursor.
        assert await asyncio.wait_for(child.wait(), 20) == -signal.SIGKILL
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    await wait_relayed(pool, ids[-1])
    assert standby.relay.active
    assert standby.relay.already_relayed == len(ids)
    assert standby.relay.relayed == 0
    assert await stream_ids(redis) == ids
    more = await produce(pool, 2)
    events = await collect(stream, len(ids) + len(more))
    assert [e.id for e in events] == ids + more


async def test_retention_deletes_only_relayed_events_past_the_age(
    pool: asyncpg.Pool, start_relay: RelayStarter
) -> None:
    ids = await produce(pool, 6)
    await pool.execute(
        "UPDATE events SET created_at = now() - interval '10 days' WHERE id <= $1", ids[3]
    )
    async with pool.acquire() as conn:
        await repo.advance_relay_cursor(conn, ids[1])
    # Old but not yet relayed (ids[2], ids[3]) stay, as do recent ones.
    assert await repo.position_committed(pool) == 6
    assert (await repo.sweep(pool, timedelta(days=7), 100)).deleted == 2
    assert await committed_ids(pool) == ids[2:]

    await start_relay(retention=timedelta(days=7))
    await wait_relayed(pool, ids[-1])

    async def swept() -> bool:
        return await committed_ids(pool) == ids[4:]

    await eventually(swept, within=5, what="the relay's retention sweep", interval=0.02)
