"""Database access for tests that talk to PostgreSQL themselves (not only through an app)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg

from marketplace.storage.pool import create_pool
from tests.conftest import Servers, reset_state


@contextlib.asynccontextmanager
async def open_pool(
    servers: Servers, *, max_size: int, reset: bool = True
) -> AsyncIterator[asyncpg.Pool]:
    """A pool on the suite's database, emptied first (unless ``reset=False``: a fixture that
    already depends on a reset, an app's or ``clean_state``), closed at the end."""
    if reset:
        await reset_state(servers)
    pool = await create_pool(servers.database_url, min_size=1, max_size=max_size)
    try:
        yield pool
    finally:
        await pool.close()
