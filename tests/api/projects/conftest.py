from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.conftest import Servers


@pytest.fixture
async def db(client: Any, servers: Servers) -> AsyncIterator[asyncpg.Connection]:
    """A connection to the (freshly emptied) database the ``client`` app reads."""
    conn = await asyncpg.connect(servers.database_url)
    try:
        yield conn
    finally:
        await conn.close()
