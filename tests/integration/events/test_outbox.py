"""The outbox itself: events exist exactly when their transaction committed, in commit order."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Coroutine
from typing import Any

import asyncpg
import pytest

from marketplace.events.types import ChainReorgPayload, EventType, NewEvent
from marketplace.storage.repositories import events as repo
from tests.integration.events.conftest import committed_ids, removal


class Rollback(Exception):
    pass


async def test_events_are_refused_outside_a_transaction(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        with pytest.raises(RuntimeError, match="inside the transaction"):
            await repo.append(conn, [removal(0)])
    assert await committed_ids(pool) == []


async def test_a_rolled_back_transaction_leaves_no_event(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn, conn.transaction():
        (first,) = await repo.append(conn, [removal(1)])

    async def rolled_back() -> None:
        async with pool.acquire() as conn, conn.transaction():
            await repo.append(conn, [removal(2), removal(3)])
            raise Rollback

    with pytest.raises(Rollback):
        await rolled_back()
    async with pool.acquire() as conn, conn.transaction():
        (last,) = await repo.append(conn, [removal(4)])
    # The rolled-back ids are a hole, never filled later.
    assert await committed_ids(pool) == [first, last]
    assert last == first + 3
    rows = await repo.read_after(pool, 0, 10)
    assert [(r.type, r.payload["forkBlock"]) for r in rows] == [
        (EventType.PROJECT_REMOVED, 1),
        (EventType.PROJECT_REMOVED, 4),
    ]


async def test_one_transaction_gets_consecutive_ids_in_the_given_order(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn, conn.transaction():
        ids = await repo.append(conn, [removal(i) for i in range(50)])
    assert ids == list(range(ids[0], ids[0] + 50))
    rows = await repo.read_after(pool, 0, 100)
    assert [r.payload["forkBlock"] for r in rows] == list(range(50))


async def test_a_second_producer_does_not_wait_and_the_later_commit_gets_the_later_position(
    pool: asyncpg.Pool,
) -> None:
    """Producers take no lock (issue 28): B appends and commits while A, which appended first,
    is still open; a reader sees B alone, and A only after its commit, at a larger position."""
    a = await pool.acquire()
    b = await pool.acquire()
    try:
        tx_a = a.transaction()
        await tx_a.start()
        (id_a,) = await repo.append(a, [removal(1)])

        async def produce_b() -> int:
            async with b.transaction():
                (id_b,) = await repo.append(b, [removal(2)])
            return id_b

        id_b = await asyncio.wait_for(produce_b(), 5)  # did not wait for A
        assert id_b > id_a
        (only_b,) = await committed_ids(pool)
        (row_b,) = await repo.read_after(pool, 0, 10)
        assert (row_b.id, row_b.payload["forkBlock"]) == (only_b, 2)
        await tx_a.commit()
        positions = await committed_ids(pool)
        assert positions[0] == only_b and positions[1] > only_b
        rows = await repo.read_after(pool, only_b, 10)
        assert [(r.id, r.payload["forkBlock"]) for r in rows] == [(positions[1], 1)]
    finally:
        await pool.release(a)
        await pool.release(b)


Batch = Callable[[random.Random, int], list[NewEvent]]
Observer = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


async def race_producers(
    pool: asyncpg.Pool, producers: int, rounds: int, batch: Batch, observe: Observer
) -> None:
    """``producers`` concurrent producers, ``rounds`` transactions each: work of random length,
    then the events ``batch`` makes, and one in ten failing at
    commit time (a hole); ``observe`` reads meanwhile until told that production is done."""

    async def produce(worker: int) -> None:
        rng = random.Random(worker)
        for n in range(rounds):
            with contextlib.suppress(asyncpg.DivisionByZeroError):
                async with pool.acquire() as conn, conn.transaction():
                    await conn.execute("SELECT pg_sleep($1)", rng.random() * 0.004)
                    await repo.append(conn, batch(rng, n))
                    if rng.random() < 0.1:
                        await conn.execute("SELECT 1/0")  # fails at commit time: a hole

    done = asyncio.Event()
    observer = asyncio.create_task(observe(done))
    await asyncio.gather(*(produce(w) for w in range(producers)))
    done.set()
    await asyncio.wait_for(observer, 30)


async def test_concurrent_producers_never_show_a_smaller_id_after_a_larger_one(
    pool: asyncpg.Pool,
) -> None:
    """A reader that only asks for ``position > last seen`` must end up with every committed
    event: any event positioned after a larger position was visible would be skipped for good."""
    seen: list[int] = []

    async def observe(done: asyncio.Event) -> None:
        last = 0
        while True:
            finished = done.is_set()
            rows = await repo.read_after(pool, last, 1000)
            for row in rows:
                assert row.id > last
                seen.append(row.id)
                last = row.id
            if finished and not rows:
                return
            await asyncio.sleep(0.001)

    def batch(rng: random.Random, n: int) -> list[NewEvent]:
        return [removal(n) for _ in range(rng.randint(1, 3))]

    producers, rounds = 8, 25
    await race_producers(pool, producers, rounds, batch, observe)
    committed = await committed_ids(pool)
    assert len(committed) > producers * rounds // 2
    assert seen == committed


def reorg(i: int) -> NewEvent:
    """An event of another type than :func:`removal`'s."""
    return NewEvent(
        "chain:1",
        ChainReorgPayload(
            chainId=1,
            forkBlock=i,
            depth=0,
            previousSyncedBlock=i,
            headBlock=i,
            removedProjects=[],
            resnapshotProjects=[],
        ),
    )


REMOVED = [str(EventType.PROJECT_REMOVED)]


async def test_a_consumer_of_some_types_moves_its_cursor_past_the_others(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn, conn.transaction():
        others = await repo.append(conn, [reorg(i) for i in range(3)])
    # Nothing of its types: it may still move past the three others, for good.
    assert await repo.read_consumed(pool, 0, 10, REMOVED) == ([], others[-1])
    async with pool.acquire() as conn, conn.transaction():
        ids = await repo.append(conn, [removal(1), reorg(4), removal(2), removal(3), reorg(5)])
    rows, position = await repo.read_consumed(pool, others[-1], 10, REMOVED)
    assert [r.id for r in rows] == [ids[0], ids[2], ids[3]]
    assert position == ids[-1]  # the batch did not fill up: up to the newest event
    rows, position = await repo.read_consumed(pool, others[-1], 2, REMOVED)
    assert [r.id for r in rows] == [ids[0], ids[2]]
    assert position == ids[2]  # a full batch: no further than its last event
    # A position never goes back.
    assert await repo.read_consumed(pool, ids[-1] + 100, 10, REMOVED) == ([], ids[-1] + 100)


async def test_a_consumer_of_some_types_misses_none_under_concurrent_producers(
    pool: asyncpg.Pool,
) -> None:
    """Moving past other types' events must never pass an event of its types that commits
    later: the same check as above, for a consumer that skips most events."""
    seen: list[int] = []

    async def observe(done: asyncio.Event) -> None:
        position = 0
        while True:
            finished = done.is_set()
            rows, position_now = await repo.read_consumed(pool, position, 7, REMOVED)
            assert position_now >= position
            seen.extend(row.id for row in rows)
            moved = position_now != position
            position = position_now
            if finished and not rows and not moved:
                return
            await asyncio.sleep(0.001)

    def batch(rng: random.Random, n: int) -> list[NewEvent]:
        return [(removal if rng.random() < 0.2 else reorg)(n) for _ in range(3)]

    await race_producers(pool, 6, 25, batch, observe)
    await committed_ids(pool)  # positions every committed event
    committed = [
        row["position"]
        for row in await pool.fetch(
            "SELECT position FROM events WHERE type = $1 ORDER BY position", REMOVED[0]
        )
    ]
    assert len(committed) > 10
    assert seen == committed
