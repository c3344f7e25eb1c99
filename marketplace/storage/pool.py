"""The asyncpg pool every component shares within one process."""

from __future__ import annotations

import json

import asyncpg


async def _init_connection(conn: asyncpg.Connection) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool reset without asyncpg's default reset query (one extra round trip per release).

    Safe because pooled connections never carry session state: locks are transaction-scoped
    (``pg_advisory_xact_lock``), nothing uses LISTEN, SET or cursors outside a transaction, and
    asyncpg itself rolls back a transaction left open before calling this.
    """


async def create_pool(dsn: str, *, min_size: int = 2, max_size: int = 20) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        reset=_keep_session,
        # A statement cache keyed by text is safe here: the schema only changes through
        # migrations, which run before any pool serves requests.
        command_timeout=30,
    )
    assert pool is not None
    return pool


async def connect(dsn: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn)
    await _init_connection(conn)
    return conn
