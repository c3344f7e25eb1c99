"""A relay in a process of its own that kills itself (SIGKILL) right after its first XADD
pipeline, before it can advance the cursor: a frontend dying at the worst moment.

Run as ``python -m tests.integration.events.relay_child DSN REDIS_URL`` from the repository root.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import asyncpg
import redis.asyncio as aioredis

from marketplace.outbox.relay import EventRelay
from tests.integration.events.conftest import RELAY_CONFIG


class DyingRelay(EventRelay):
    async def _mark_relayed(self, conn: asyncpg.Connection, last_id: int) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


async def main(dsn: str, redis_url: str) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    await DyingRelay(dsn, redis, RELAY_CONFIG).run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
