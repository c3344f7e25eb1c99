"""Notification pipeline tests: real PostgreSQL, Redis and Ray. Events come from the real
producers (chat, DMs, bid drafts, dispute evidence through HTTP); the consumer runs in the
test's loop, the rate limiter is the real actor.

Apps are built with `jobs_enabled=False` (tests/conftest.py also keeps apps from starting
`notifications` workers): jobs stay `queued` unless a test runs a worker itself.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from marketplace.actors.notification_limiter import RemoteLimiter
from marketplace.config import Settings
from marketplace.config.notifications import NotificationRates
from marketplace.http import keys
from marketplace.notifications.consumer import ConsumerConfig, NotificationConsumer, consume_all
from marketplace.storage.pool import connect
from tests.api.records.conftest import Party
from tests.conftest import Servers, make_settings
from tests.support import apps
from tests.support.apps import AppFactory

# Apps of this suite run no job worker (``jobs_enabled=False``) unless a test turns it on.
APP_DEFAULTS: dict[str, Any] = {"jobs_enabled": False}


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return make_settings(servers, **APP_DEFAULTS)


@pytest.fixture
def make_client(make_client: AppFactory) -> AppFactory:
    return functools.partial(make_client, **APP_DEFAULTS)


# A direct connection, opened after the client (tests/support/apps.py).
db = apps.db


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
