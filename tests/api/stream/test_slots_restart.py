"""The per-user limit on open streams holds across a Redis restart: the open streams' slots come
back at once (the hubs notice the lost epoch within a second and re-register), and opening a
stream meanwhile is 503 with Retry-After rather than a slot the count no longer knows about.
A real Redis of the test's own, stopped and started again on the same port."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from marketplace.errors import RateLimited, ServiceUnavailable
from marketplace.stream.slots import EPOCH_KEY, StreamSlots, slot_key
from marketplace_devstack.embedded.redis import EmbeddedRedis
from tests.api.records.conftest import error_code
from tests.api.stream.conftest import AppFactory, SseReader, open_stream
from tests.conftest import new_user


async def test_the_stream_limit_holds_right_after_redis_restarts(
    make_client: AppFactory, tmp_path: Path
) -> None:
    own = EmbeddedRedis(tmp_path)
    own.start()
    try:
        # A heartbeat far away: only the restart handling can bring the slots back in time.
        settings: dict[str, Any] = {
            "redis_url": own.url,
            "stream_max_per_user": 2,
            "stream_heartbeat_seconds": 600,
        }
        first = await make_client(**settings)
        second = await make_client(**settings, events_relay_enabled=False)
        user, other = new_user(), new_user()
        streams = [await open_stream(first, user.headers), await open_stream(second, user.headers)]
        resp = await first.get("/v1/stream", headers=user.headers)
        assert await error_code(resp, 429) == "rate_limited"

        own.stop()
        restarted = EmbeddedRedis(tmp_path, port=own.port)
        restarted.start()
        try:
            came_back = time.monotonic()
            answers: list[int] = []
            while True:
                # Both frontends are asked, as fast as they answer: never a third stream.
                for client in (first, second):
                    resp = await client.get("/v1/stream", headers=user.headers)
                    answers.append(resp.status)
                    if resp.status == 200:
                        SseReader(resp).close()
                        pytest.fail(f"a third stream opened after the restart: {answers}")
                    assert resp.status in (429, 503), await resp.text()
                    if resp.status == 503:
                        assert int(resp.headers["Retry-After"]) >= 1
                    resp.close()
                if answers[-2:] == [429, 429]:
                    break
                assert time.monotonic() - came_back < 10, answers
                await asyncio.sleep(0.05)
            # Both hubs re-registered their stream (one each).
            check = aioredis.Redis.from_url(restarted.url)
            try:
                assert await check.zcard(slot_key(user.user_id)) == 2
                assert await check.get(EPOCH_KEY) is not None
            finally:
                await check.aclose()
            # Other users open streams as usual, and a closed stream frees its slot.
            (await open_stream(second, other.headers)).close()
            streams.pop().close()
            deadline = time.monotonic() + 5
            while True:
                resp = await first.get("/v1/stream", headers=user.headers)
                if resp.status == 200:
                    streams.append(SseReader(resp))
                    break
                assert resp.status == 429, await resp.text()
                resp.close()
                assert time.monotonic() < deadline, "the closed stream's slot was not freed"
                await asyncio.sleep(0.2)
            # The streams that were open across the restart are still open.
            assert all(not s.resp.content.at_eof() for s in streams)
        finally:
            for stream in streams:
                stream.close()
            restarted.stop()
    finally:
        own.stop()


async def test_opening_a_stream_first_after_a_loss_waits_for_the_recount(tmp_path: Path) -> None:
    """The slots script itself notices a lost epoch (a stream opened before any hub looked)."""
    own = EmbeddedRedis(tmp_path)
    own.start()
    redis = aioredis.Redis.from_url(own.url)
    try:
        slots = StreamSlots(redis, limit=1, lease_seconds=30, recovery_seconds=0.5)
        await slots.start_epoch()
        user = uuid.uuid4()
        await slots.acquire(user, "a")
        await redis.flushdb()  # what a restart without persistence leaves
        with pytest.raises(ServiceUnavailable):
            await slots.acquire(user, "b")
        # The stream's hub re-registers "a" within the window; then the limit holds.
        epoch = await slots.reregister([(user, "a")])
        assert epoch == await slots.epoch()
        await asyncio.sleep(0.6)
        with pytest.raises(RateLimited):
            await slots.acquire(user, "b")
    finally:
        await redis.aclose()
        own.stop()
