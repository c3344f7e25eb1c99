"""At most N open streams per user across every frontend, as leases in Redis.

Each user has a sorted set ``marketplace:stream:slots:<user id>`` whose members are the ids of
that user's open streams, scored by the lease's expiry (Redis server time, milliseconds, so the
frontends' clocks do not matter). Opening a stream first drops expired members, then adds its
own if fewer than N remain: one script, so two frontends cannot both take the last slot. The
hub renews the leases of its streams with every heartbeat, and a closing stream removes its
member; a frontend that dies without closing leaves leases that expire after
``lease_seconds`` (three heartbeats), which frees its users' slots.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence

import redis.asyncio as aioredis

from marketplace.errors import RateLimited

KEY_PREFIX = "marketplace:stream:slots:"

# KEYS[1] the user's set; ARGV: limit, lease ms, stream id. Returns -1 when the slot is taken,
# else the milliseconds until the soonest lease expires (the earliest a slot can free itself).
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return -1
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(0, tonumber(first[2]) - now)
"""
# KEYS: one user's set per stream; ARGV[1] lease ms, ARGV[i + 1] the stream id of KEYS[i].
# A lease that expired meanwhile (a stalled process) is taken again rather than dropping a
# stream that is still open.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i, key in ipairs(KEYS) do
    redis.call('ZADD', key, now + tonumber(ARGV[1]), ARGV[i + 1])
    redis.call('PEXPIRE', key, ARGV[1])
end
return #KEYS
"""


def slot_key(user_id: uuid.UUID) -> str:
    return f"{KEY_PREFIX}{user_id}"


class StreamSlots:
    def __init__(self, redis: aioredis.Redis, *, limit: int, lease_seconds: float) -> None:
        self.redis = redis
        self.limit = limit
        self.lease_ms = max(1, int(lease_seconds * 1000))
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)

    async def acquire(self, user_id: uuid.UUID, stream_id: str) -> None:
        """Take a slot for ``stream_id``; 429 ``rate_limited`` when the user has none left."""
        args: list[str | int] = [self.limit, self.lease_ms, stream_id]
        wait_ms = int(await self._acquire(keys=[slot_key(user_id)], args=args))
        if wait_ms >= 0:
            raise RateLimited(
                math.ceil(wait_ms / 1000),
                f"at most {self.limit} open event streams per user; close one first",
            )

    async def renew(self, streams: Sequence[tuple[uuid.UUID, str]]) -> None:
        if streams:
            keys = [slot_key(user_id) for user_id, _ in streams]
            await self._renew(keys=keys, args=[self.lease_ms, *(sid for _, sid in streams)])

    async def release(self, user_id: uuid.UUID, stream_id: str) -> None:
        await self.redis.zrem(slot_key(user_id), stream_id)
