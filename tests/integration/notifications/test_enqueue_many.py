"""`enqueue_many`, the consumer's one-statement enqueue: jobs exist only if the caller's
transaction commits, a key already taken keeps its first job (and answers its id), and the
queue's workers are notified at commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from marketplace.jobs import enqueue_many
from marketplace.storage.pool import connect
from tests.conftest import Servers, reset_state


@pytest.fixture
async def conn(servers: Servers) -> AsyncIterator[asyncpg.Connection]:
    await reset_state(servers)
    connection = await connect(servers.database_url)
    yield connection
    await connection.close()


async def test_enqueue_many_is_transactional_idempotent_and_notifies(
    conn: asyncpg.Connection, servers: Servers
) -> None:
    listener = await asyncpg.connect(servers.database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("marketplace_jobs", lambda *args: heard.put_nowait(args[-1]))
    try:
        transaction = conn.transaction()
        await transaction.start()
        await enqueue_many(conn, "notifications", [("a", {"n": 1})])
        await transaction.rollback()
        assert await conn.fetchval("SELECT count(*) FROM jobs") == 0
        assert heard.empty()

        async with conn.transaction():
            first = await enqueue_many(conn, "notifications", [("a", {"n": 1}), ("b", {"n": 2})])
        assert await asyncio.wait_for(heard.get(), 5) == "notifications"
        async with conn.transaction():
            again = await enqueue_many(conn, "notifications", [("b", {"n": 9}), ("c", {"n": 3})])
        assert again["b"] == first["b"] and again["c"] not in first.values()
        rows = await conn.fetch(
            "SELECT idempotency_key, payload, status FROM jobs ORDER BY idempotency_key"
        )
        assert [(r["idempotency_key"], r["payload"], r["status"]) for r in rows] == [
            ("a", {"n": 1}, "queued"),
            ("b", {"n": 2}, "queued"),
            ("c", {"n": 3}, "queued"),
        ]
        with pytest.raises(ValueError, match="distinct"):
            await enqueue_many(conn, "notifications", [("d", {}), ("d", {})])
    finally:
        await listener.close()
