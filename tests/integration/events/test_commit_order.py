"""Commit order without a lock (issue 28): many producers whose transactions commit in random
order, some long (one appends first and commits last), read by the durable consumer API, by a
live ``subscribe`` and by subscribers resuming from random positions. Every committed event is
seen exactly once, none of a rolled-back transaction; the events of one transaction together
and in order; a transaction that committed before another began comes first; nothing skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from dataclasses import dataclass, field

import asyncpg

from marketplace.events.types import Event, NewEvent, ProjectRemoved, ProjectRemovedPayload
from marketplace.outbox.consumer import EventStream, event_from_row
from marketplace.storage.repositories import events as repo
from tests.conftest import Servers
from tests.integration.events.conftest import RelayStarter, committed_ids
from tests.support.waiting import eventually

PRODUCERS = 32
TRANSACTIONS_PER_PRODUCER = 6
REMOVED = ["project.removed"]


@dataclass
class Transaction:
    key: int
    events: int
    began: float = 0.0  # before its BEGIN was sent
    committed: float | None = None  # when its COMMIT returned (None: rolled back)
    positions: list[int] = field(default_factory=list)


def event(key: int, index: int) -> NewEvent:
    # forkBlock names the transaction and the event's place in it.
    payload = ProjectRemovedPayload(reason="reorg", forkBlock=key * 100 + index)
    return NewEvent(f"0x{key:040x}", payload)


def origin(e: Event) -> tuple[int, int]:
    assert isinstance(e, ProjectRemoved) and e.payload.forkBlock is not None
    return divmod(e.payload.forkBlock, 100)


async def run_transaction(
    conn: asyncpg.Connection, tx: Transaction, rng: random.Random, hold: asyncio.Event | None
) -> None:
    """Events at random places among random delays; one in eight rolls back at the end."""
    rollback = hold is None and rng.random() < 0.125
    tx.began = time.monotonic()
    transaction = conn.transaction()
    await transaction.start()
    try:
        written = 0
        while written < tx.events:
            await asyncio.sleep(rng.random() * 0.02)
            n = rng.randint(1, tx.events - written)
            await repo.append(conn, [event(tx.key, written + i) for i in range(n)])
            written += n
        if hold is not None:
            await hold.wait()  # appended first, commits last
        await asyncio.sleep(rng.random() * 0.03)
    except BaseException:
        await transaction.rollback()
        raise
    if rollback:
        await transaction.rollback()
        return
    await transaction.commit()
    tx.committed = time.monotonic()


async def no_committed_event_unpositioned(pool: asyncpg.Pool) -> bool:
    # Another session's uncommitted rows are invisible here: only committed ones count.
    return not await pool.fetchval("SELECT EXISTS (SELECT FROM events WHERE position IS NULL)")


async def durable_consumer(pool: asyncpg.Pool, seen: list[Event]) -> None:
    """The durable consumers' way: ``read_consumed`` in small batches from a cursor, until
    cancelled (a positioner at work elsewhere can make a read come back empty for now)."""
    position = 0
    while True:
        rows, position_now = await repo.read_consumed(pool, position, 7, REMOVED)
        assert position_now >= position
        seen.extend(event_from_row(row) for row in rows)
        position = position_now
        if not rows:
            await asyncio.sleep(0.005)


async def follow(stream: EventStream, after: int, seen: list[Event]) -> None:
    async with contextlib.aclosing(stream.subscribe(None, after)) as events:
        async for e in events:
            seen.append(e)


async def test_random_commit_order_is_seen_once_in_commit_order_by_every_kind_of_reader(
    servers: Servers, pool: asyncpg.Pool, start_relay: RelayStarter, stream: EventStream
) -> None:
    rng = random.Random(2028)
    await start_relay(batch_size=13)  # many small batches interleaved with the commits
    connections = [await asyncpg.connect(servers.database_url) for _ in range(PRODUCERS)]
    keys = itertools.count(1)
    transactions: list[Transaction] = []
    release_long = asyncio.Event()
    long_keys: set[int] = set()

    async def producer(worker: int, conn: asyncpg.Connection) -> None:
        prng = random.Random(worker)
        if worker < 2:  # a long transaction: appends first, commits after everyone else
            tx = Transaction(next(keys), 3)
            transactions.append(tx)
            long_keys.add(tx.key)
            await run_transaction(conn, tx, prng, release_long)
            return
        for _ in range(TRANSACTIONS_PER_PRODUCER):
            tx = Transaction(next(keys), prng.randint(1, 4))
            transactions.append(tx)
            await run_transaction(conn, tx, prng, None)

    live: list[Event] = []
    durable: list[Event] = []
    resumed: list[tuple[int, list[Event]]] = []
    done = asyncio.Event()
    followers = [asyncio.create_task(follow(stream, 0, live))]
    consumer = asyncio.create_task(durable_consumer(pool, durable))

    async def resume_now_and_then() -> None:
        # Subscribers resuming from random positions seen so far (or 0), while commits go on.
        while not done.is_set():
            await asyncio.sleep(rng.random() * 0.3)
            start = rng.choice([0, *(e.id for e in live)])
            seen: list[Event] = []
            resumed.append((start, seen))
            followers.append(asyncio.create_task(follow(stream, start, seen)))

    resumer = asyncio.create_task(resume_now_and_then())
    try:
        short = [producer(w, c) for w, c in enumerate(connections) if w >= 2]
        long = [asyncio.create_task(producer(w, connections[w])) for w in range(2)]
        await asyncio.sleep(0.05)  # the long ones append first
        await asyncio.gather(*short)
        # Every short transaction positioned before the long ones commit: a positioning round
        # that found both would order them by xid (the long ones began first), which is a valid
        # order, but not the one the last assertion below checks for.
        await eventually(
            lambda: no_committed_event_unpositioned(pool),
            within=30,
            what="the short transactions' events positioned",
        )
        release_long.set()
        await asyncio.gather(*long)
        done.set()
        await asyncio.wait_for(resumer, 5)
        committed = [tx for tx in transactions if tx.committed is not None]
        total = sum(tx.events for tx in committed)
        assert total > 150 and len(committed) < len(transactions)  # some did roll back

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (  # noqa: ASYNC110 - several lists to fill
            len(live) >= total
            and len(durable) >= total
            and all(len(s) >= total_after(live, a) for a, s in resumed)
        ):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # and nothing beyond what was committed arrives
    finally:
        # All at once, and without waiting on any one: a redis-py read cancelled while others
        # share its client may finish with a ConnectionError, or late.
        tasks = [*followers, consumer, resumer]
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=10)
        for task in tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: not logged as never retrieved
        for conn in connections:
            await conn.close()

    by_key = {tx.key: tx for tx in transactions}
    # Exactly once, nothing of a rolled-back transaction, nothing skipped, positions growing.
    assert sorted(origin(e) for e in live) == sorted(
        (tx.key, i) for tx in committed for i in range(tx.events)
    )
    positions = [e.id for e in live]
    assert all(a < b for a, b in itertools.pairwise(positions))
    assert positions == await committed_ids(pool)
    # Commits did come out of insertion order (else this test would prove little).
    assert await pool.fetchval("SELECT count(*) FROM events WHERE position <> id") > 0
    for e in live:
        by_key[origin(e)[0]].positions.append(e.id)
    # One transaction's events together (consecutive among all events) and in the order given.
    index = {p: n for n, p in enumerate(positions)}
    for e, after in itertools.pairwise(live):
        if origin(e)[0] == origin(after)[0]:
            assert origin(after)[1] == origin(e)[1] + 1
    for tx in committed:
        places = [index[p] for p in tx.positions]
        assert places == list(range(places[0], places[0] + tx.events)), tx
    # Commit order: a transaction that committed before another began comes first.
    for a, b in itertools.permutations(committed, 2):
        assert a.committed is not None
        if a.committed < b.began:
            assert max(a.positions) < min(b.positions), (a, b)
    # The two long transactions appended first and committed last: their events come last.
    assert {origin(e)[0] for e in live[-6:]} == long_keys
    # The durable consumer and every resumed subscriber saw the same sequence (from their start).
    assert [(e.id, origin(e)) for e in durable] == [(e.id, origin(e)) for e in live]
    for start, seen in resumed:
        expected = [(e.id, origin(e)) for e in live if e.id > start]
        assert [(e.id, origin(e)) for e in seen] == expected


def total_after(live: list[Event], start: int) -> int:
    return sum(1 for e in live if e.id > start)
