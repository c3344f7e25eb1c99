"""The asyncio Redis client every long-running part of the service uses.

redis-py sends each command through ``asyncio.wait_for`` (with a socket timeout), which on
Python 3.11 swallows a cancellation that arrives while the write completes (CPython gh-86296):
the command then runs on and returns normally, and a loop around it (a stream follower's XREAD
BLOCK, say) never learns that it was cancelled. Measured: a follower cancelled right after it
sent XREAD BLOCK 1000 returned ``[]`` a second later in 5 of 5 tries and went on reading, which
left a stopping app waiting for its context-stop bound. This client raises ``CancelledError``
after a command or pipeline during which the calling task was cancelled, so a cancelled caller
stops there instead of reading on; a command issued while the task is already being cancelled
(cleanup in a ``finally``) returns normally.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from marketplace.aio import cancellation_mark, raise_if_cancelled_since


class CancellationSafePipeline(Pipeline):
    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        mark = cancellation_mark()
        try:
            result = await super().execute(raise_on_error)
        except Exception:
            raise_if_cancelled_since(mark)
            raise
        raise_if_cancelled_since(mark)
        return result


class Redis(aioredis.Redis):
    """``redis.asyncio.Redis`` that keeps cancellations (see the module's docstring)."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        mark = cancellation_mark()
        try:
            result = await super().execute_command(*args, **options)
        except Exception:
            raise_if_cancelled_since(mark)
            raise
        raise_if_cancelled_since(mark)
        return result

    def pipeline(
        self, transaction: bool = True, shard_hint: str | None = None
    ) -> CancellationSafePipeline:
        return CancellationSafePipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
