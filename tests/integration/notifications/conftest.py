"""Notification pipeline tests: real PostgreSQL, Redis and Ray. Events come from the real
producers (chat, DMs, bid drafts, dispute evidence through HTTP); the consumer runs in the
test's loop, the rate limiter is the real actor.

Apps are built with `jobs_enabled=False` (tests/conftest.py also keeps apps from starting
`notifications` workers): jobs stay `queued` unless a test runs a worker itself.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from marketplace.actors.notification_limiter import RemoteLimiter
from marketplace.config.notifications import NotificationRates
from marketplace.http import keys
from marketplace.notifications.consumer import ConsumerConfig, NotificationConsumer, consume_all
from marketplace.storage.pool import connect
from tests.api.records.conftest import AppFactory, Party
from tests.conftest import Servers, make_settings


@pytest.fixture
def make_client(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None
) -> AppFactory:
    from marketplace.http.app import create_app

    async def build(**overrides: Any) -> Any:
        values: dict[str, Any] = {"jobs_enabled": False}
        values.update(overrides)
        return await aiohttp_client(create_app(make_settings(servers, **values)))

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


def config(rate: str = "5/3600", max_attempts: int = 5) -> ConsumerConfig:
    return ConsumerConfig(
        rates=NotificationRates.parse(rate),
        poll_interval=0.05,
        standby_interval=0.2,
        max_attempts=max_attempts,
    )


@dataclass
class Pipeline:
    consumer: NotificationConsumer
    conn: asyncpg.Connection

    async def consume(self) -> int:
        return await consume_all(self.consumer, self.conn)


@pytest.fixture
async def make_pipeline(
    client: Any, servers: Servers
) -> AsyncIterator[Callable[..., Awaitable[Pipeline]]]:
    conns: list[asyncpg.Connection] = []

    async def build(rate: str = "5/3600", max_attempts: int = 5) -> Pipeline:
        consumer = NotificationConsumer(
            servers.database_url,
            RemoteLimiter(client.app[keys.ACTORS]),
            config(rate, max_attempts),
        )
        conn = await connect(servers.database_url)  # with the pool's codecs, as the consumer's
        conns.append(conn)
        return Pipeline(consumer, conn)

    yield build
    for conn in conns:
        await conn.close()


@pytest.fixture
async def pipeline(make_pipeline: Callable[..., Awaitable[Pipeline]]) -> Pipeline:
    return await make_pipeline()


async def set_email(db: asyncpg.Connection, party: Party, email: str | None = None) -> str:
    """Record a verified address for the party's user, as the session recorder does."""
    address = email or f"u{uuid.uuid4().hex[:10]}@example.test"
    status = await db.execute(
        "UPDATE users SET email = $2 WHERE user_id = $1", party.user.user_id, address
    )
    assert status == "UPDATE 1"
    return address


async def deliveries(db: asyncpg.Connection) -> list[asyncpg.Record]:
    return await db.fetch(
        "SELECT d.*, e.type AS outbox_type FROM notification_deliveries d"
        " LEFT JOIN events e ON e.id = d.event_id ORDER BY d.seq"
    )


async def wait_until(
    predicate: Callable[[], Awaitable[Any]], limit_s: float, what: str = "condition"
) -> None:
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} not met within {limit_s} s")
