"""The leaderboards consumer in the frontend: active in one frontend, standby in the others
(docs/leaderboards.md, "Maintenance")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from marketplace.aio import cancel_and_wait
from marketplace.http import keys
from marketplace.leaderboards.boards import BoardsConsumer, ConsumerConfig

BOARDS_CONSUMER: web.AppKey[BoardsConsumer] = web.AppKey("boards_consumer", BoardsConsumer)


async def boards_consumer(app: web.Application) -> AsyncIterator[None]:
    settings = app[keys.SETTINGS]
    if not settings.leaderboard_consumer_enabled:
        yield
        return
    poll = settings.events_relay_poll_interval_ms / 1000
    consumer = BoardsConsumer(
        settings.database_url,
        ConsumerConfig(poll_interval=poll, standby_interval=max(1.0, 10 * poll)),
    )
    app[BOARDS_CONSUMER] = consumer
    task = asyncio.create_task(consumer.run(), name="leaderboards-consumer")
    yield
    await cancel_and_wait(task)
