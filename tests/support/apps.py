"""The app fixtures most API suites share: a factory of fresh apps (each with settings
overrides, on the suite's PostgreSQL, Redis and Ray, state reset first), a default client, and a
direct database connection opened after the client (so the reset precedes it).

A suite's conftest imports the ones it uses (``from tests.support.apps import client, db,
make_client``); a suite whose app differs (extra routes, other defaults) defines its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from tests.conftest import Servers, make_settings

AppFactory = Callable[..., Awaitable[Any]]


@pytest.fixture
def make_client(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None
) -> AppFactory:
    """Build a client of a fresh app with settings overrides (each call is another frontend
    on the same PostgreSQL and Redis)."""
    from marketplace.http.app import create_app

    async def build(**overrides: Any) -> Any:
        return await aiohttp_client(create_app(make_settings(servers, **overrides)))

    return build


@pytest.fixture
async def client(make_client: AppFactory) -> Any:
    return await make_client()


@pytest.fixture
async def db(servers: Servers, client: Any) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(servers.database_url)
    try:
        yield conn
    finally:
        await conn.close()
