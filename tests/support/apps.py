"""The app a test talks to, built one way: :func:`app_client` serves ``create_app(settings)``
through pytest-aiohttp's client (with our request handler, tests/conftest.py).

Fixtures every suite gets (tests/conftest.py imports them):

- ``client``: the app built from the suite's ``settings`` fixture (tests/conftest.py's default,
  or a suite's own) plus its ``app_routes``, on a freshly emptied database. A suite that needs
  other settings overrides ``settings`` (or ``app_routes``), not ``client``;
- ``make_client``: a factory of further apps with settings overrides (each call is another
  frontend on the same PostgreSQL and Redis), state reset first;
- ``app_routes``: route tables added to those apps (none by default; probe routes in some
  suites).

``db`` (a direct connection opened after the client, so the reset precedes it) is imported by
the suites that use it (``db = apps.db``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from marketplace.config import Settings

if TYPE_CHECKING:
    from marketplace.http.routing import RouteTable
    from tests.conftest import Servers

AppFactory = Callable[..., Awaitable[Any]]


async def app_client(
    aiohttp_client: Any, settings: Settings, extra_routes: Sequence[RouteTable] = ()
) -> Any:
    """A test client of a fresh app with ``settings`` (and ``extra_routes``)."""
    from marketplace.http.app import create_app

    return await aiohttp_client(create_app(settings, extra_routes=extra_routes))


@pytest.fixture
def app_routes() -> Sequence[RouteTable]:
    return ()


@pytest.fixture
async def client(
    aiohttp_client: Any,
    settings: Settings,
    app_routes: Sequence[RouteTable],
    ray_cluster: None,
    clean_state: None,
) -> Any:
    return await app_client(aiohttp_client, settings, app_routes)


@pytest.fixture
def make_client(
    aiohttp_client: Any,
    servers: Servers,
    app_routes: Sequence[RouteTable],
    ray_cluster: None,
    clean_state: None,
) -> AppFactory:
    """Build a client of a fresh app with settings overrides (each call is another frontend
    on the same PostgreSQL and Redis)."""
    from tests.conftest import make_settings

    async def build(**overrides: Any) -> Any:
        return await app_client(aiohttp_client, make_settings(servers, **overrides), app_routes)

    return build


@pytest.fixture
async def db(servers: Servers, client: Any) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(servers.database_url)
    try:
        yield conn
    finally:
        await conn.close()
