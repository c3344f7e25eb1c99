"""The service's Redis client keeps a cancellation that arrives while a command is being sent.

redis-py sends through ``asyncio.wait_for``, which on Python 3.11 can swallow it (see
``marketplace/redis_client.py``): a stream follower cancelled just after sending XREAD BLOCK then
went on reading and kept its app's shutdown waiting. With this client the command in flight may
still run to its end (at most its block time), but its caller then stops instead of getting
the reply and reading again. Real Redis, real blocking reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redis.asyncio as aioredis

from marketplace.redis_client import Redis
from tests.conftest import Servers

BLOCK_MS = 1_000
STREAM = "mkt-test:cancel"


async def _reads(client: aioredis.Redis, done: list[object]) -> None:
    while True:
        done.append(await client.xread({STREAM: "0-0"}, count=10, block=BLOCK_MS))


async def _pipelines(client: aioredis.Redis, done: list[object]) -> None:
    while True:
        async with client.pipeline(transaction=False) as pipe:
            pipe.xread({STREAM: "0-0"}, count=1, block=BLOCK_MS)
            done.append(await pipe.execute())


async def _cancel_three_times(
    servers: Servers,
    loop: Callable[[aioredis.Redis, list[object]], Coroutine[Any, Any, None]],
    delay: float,
) -> None:
    """Start ``loop`` (blocking reads, one after the other), cancel it ``delay`` s later: it must
    stop by the end of the read in flight at the latest, without handing that read back."""
    client = Redis.from_url(servers.redis_url, socket_timeout=5.0)
    assert isinstance(client, Redis)
    try:
        await client.ping()
        for _ in range(3):
            done: list[object] = []
            task = asyncio.create_task(loop(client, done))
            await asyncio.sleep(delay)
            started = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                async with asyncio.timeout(3 * BLOCK_MS / 1000):
                    await task
            assert time.monotonic() - started < BLOCK_MS / 1000 + 0.5
            assert done == []
    finally:
        await client.aclose()


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.05])
async def test_a_cancelled_follower_stops_after_the_read_in_flight(
    servers: Servers, delay: float
) -> None:
    await _cancel_three_times(servers, _reads, delay)


async def test_a_cancelled_pipeline_stops_after_the_one_in_flight(servers: Servers) -> None:
    await _cancel_three_times(servers, _pipelines, 0.0)


async def test_commands_in_the_cleanup_of_a_cancelled_task_all_run(servers: Servers) -> None:
    """Cleanup that talks to Redis while its task is already being cancelled (releasing a lease,
    say) runs every command: only a cancellation arriving during a command stops the caller."""
    client = Redis.from_url(servers.redis_url, socket_timeout=5.0)
    try:
        await client.delete("mkt-test:cleanup:a", "mkt-test:cleanup:b")

        async def owner() -> None:
            try:
                await asyncio.sleep(3600)
            finally:
                await client.set("mkt-test:cleanup:a", "1")
                async with client.pipeline(transaction=False) as pipe:
                    pipe.set("mkt-test:cleanup:b", "1")
                    await pipe.execute()

        task = asyncio.create_task(owner())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await client.get("mkt-test:cleanup:a") == b"1"
        assert await client.get("mkt-test:cleanup:b") == b"1"
    finally:
        await client.aclose()
