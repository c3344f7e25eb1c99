"""The notification pipeline in the frontend: the notifications consumer (active in one
frontend, standby in the others) and its rate-limiter actor (docs/notifications.md,
"Pipeline")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from marketplace.actors.notification_limiter import RemoteLimiter
from marketplace.aio import cancel_and_wait
from marketplace.http import keys
from marketplace.notifications.consumer import ConsumerConfig, NotificationConsumer

log = logging.getLogger(__name__)

CONSUMER: web.AppKey[NotificationConsumer] = web.AppKey(
    "notification_consumer", NotificationConsumer
)


async def notification_consumer(app: web.Application) -> AsyncIterator[None]:
    settings = app[keys.SETTINGS]
    if not settings.notification_pipeline_enabled:
        yield
        return
    consumer = NotificationConsumer(
        settings.database_url,
        RemoteLimiter(app[keys.ACTORS]),
        ConsumerConfig.from_settings(settings),
    )
    app[CONSUMER] = consumer
    task = asyncio.create_task(consumer.run(), name="notification-consumer")
    yield
    await cancel_and_wait(task)
