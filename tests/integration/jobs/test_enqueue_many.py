"""`enqueue_many`, the one-statement enqueue of many jobs: jobs exist only if the caller's
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
from tests.integration.jobs.handlers import SCRIPTED, Script


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
        await enqueue_many(conn, SCRIPTED, [("a", Script(tag=1))])
        await transaction.rollback()
        assert await conn.fetchval("SELECT count(*) FROM jobs") == 0
        assert heard.empty()

        async with conn.transaction():
            first = await enqueue_many(conn, SCRIPTED, [("a", Script(tag=1)), ("b", Script(tag=2))])
        assert await asyncio.wait_for(heard.get(), 5) == SCRIPTED.name
        async with conn.transaction():
            again = await enqueue_many(conn, SCRIPTED, [("b", Script(tag=9)), ("c", Script(tag=3))])
        assert again["b"] == first["b"] and again["c"] not in first.values()
        rows = await conn.fetch(
            "SELECT idempotency_key, payload, status FROM jobs ORDER BY idempotency_key"
        )
        assert [(r["idempotency_key"], r["payload"]["tag"], r["status"]) for r in rows] == [
            ("a", 1, "queued"),
            ("b", 2, "queued"),
            ("c", 3, "queued"),
        ]
        with pytest.raises(ValueError, match="distinct"):
            await enqueue_many(conn, SCRIPTED, [("d", Script()), ("d", Script())])
    finally:
        await listener.close()
