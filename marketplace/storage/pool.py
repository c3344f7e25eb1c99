"""The asyncpg pool every component shares within one process."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

log = logging.getLogger(__name__)

# One connection, as asyncpg.connect() or pool.acquire() hands it out: what a transaction runs on.
Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
# Anything a single statement can run on: a connection, or the pool (which borrows one).
Conn: TypeAlias = "asyncpg.Pool[asyncpg.Record] | Connection"
# A row as the row -> model mappers read it: an asyncpg.Record straight from a query, or a plain
# mapping (a dict a caller assembled). Record is no Mapping, neither at runtime nor in its stubs.
Row: TypeAlias = "asyncpg.Record | Mapping[str, Any]"


async def fetch_one(conn: Conn, query: str, *args: Any) -> asyncpg.Record:
    """The row of a statement that always returns one (``INSERT ... RETURNING``, an aggregate)."""
    row = await conn.fetchrow(query, *args)
    if row is None:
        raise RuntimeError("statement returned no row")
    return row


# Stored JSON is validated on the way in (free-form objects are at most 32 levels deep), but a
# read must not fail because of what some older code or a manual edit stored: a value nested
# deeper than this is withheld (decoded as null, with a warning) instead of failing every read
# of its row. Far above any accepted value, far below what would strain a serializer.
STORED_JSON_MAX_DEPTH = 64
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_nesting_depth(text: str) -> int:
    """Deepest nesting of arrays and objects in a JSON text (without recursion)."""
    depth = deepest = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def decode_stored_json(text: str) -> Any:
    # Counting brackets is a C-speed upper bound on the depth: the scan runs only when needed.
    if (
        text.count("[") + text.count("{") > STORED_JSON_MAX_DEPTH
        and json_nesting_depth(text) > STORED_JSON_MAX_DEPTH
    ):
        log.warning(
            "stored JSON value nested deeper than %d levels withheld", STORED_JSON_MAX_DEPTH
        )
        return None
    return json.loads(text)


async def _init_connection(conn: asyncpg.Connection) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=json.dumps, decoder=decode_stored_json, schema="pg_catalog"
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
