"""The asyncio Redis client every long-running part of the service uses.

redis-py sends each command through ``asyncio.wait_for`` (with a socket timeout), which on
Python 3.11 swallows a cancellation that arrives while the write completes (CPython gh-86296):
the command then runs on and returns normally, and a loop around it (a stream follower's XREAD
BLOCK, say) never learns that it was cancelled. Measured: a follower cancelled right after it
sent XREAD BLOCK 1000 returned ``[]`` a second later in 5 of 5 tries and went on reading, which
left a stopping app waiting for its context-stop bound. This client checks for a pending
cancellation after every command and pipeline, so a cancelled caller stops at its next command.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from marketplace.aio import raise_if_cancelling


class CancellationSafePipeline(Pipeline):
    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            result = await super().execute(raise_on_error)
        except Exception:
            raise_if_cancelling()
            raise
        raise_if_cancelling()
        return result


class Redis(aioredis.Redis):
    """``redis.asyncio.Redis`` that keeps cancellations (see the module's docstring)."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            result = await super().execute_command(*args, **options)
        except Exception:
            raise_if_cancelling()
            raise
        raise_if_cancelling()
        return result

    def pipeline(
        self, transaction: bool = True, shard_hint: str | None = None
    ) -> CancellationSafePipeline:
        return CancellationSafePipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
