"""At most N open streams per user across every frontend, as leases in Redis.

Each user has a sorted set ``marketplace:stream:slots:<user id>`` whose members are the ids of
that user's open streams, scored by the lease's expiry (Redis server time, milliseconds, so the
frontends' clocks do not matter). Opening a stream first drops expired members, then adds its
own if fewer than N remain: one script, so two frontends cannot both take the last slot. The
hub renews the leases of its streams with every heartbeat, and a closing stream removes its
member; a frontend that dies without closing leaves leases that expire after
``lease_seconds`` (three heartbeats), which frees its users' slots.

Redis restarts (or loses its data) while streams stay open: the sets are gone, and the leases
would only come back with each frontend's next heartbeat (15 s), letting a user open up to N
more streams meanwhile. So an *epoch* key (``marketplace:stream:slots:epoch``, a random value
set when missing) tells the frontends that Redis lost the slots: each hub reads it every second
(one ``GET``), and when it is missing or changed it re-registers all of its open streams at once
(``reregister``). Whoever finds it missing first (a hub, or a stream being opened) creates it and
opens a *recovery window* (``marketplace:stream:slots:recovering``, ``recovery_seconds``: three
of the hubs' one-second checks) during which opening a stream answers 503 with ``Retry-After``
instead of counting slots that are not all back yet. After the window the count is complete
again. A hub that starts while the epoch is missing creates it without a window (nothing tells a
fresh Redis from a restarted one there); the other hubs still re-register within a second.
"""

from __future__ import annotations

import math
import secrets
import uuid
from collections.abc import Sequence

import redis.asyncio as aioredis

from marketplace.errors import RateLimited, ServiceUnavailable

KEY_PREFIX = "marketplace:stream:slots:"
EPOCH_KEY = "marketplace:stream:slots:epoch"
RECOVERING_KEY = "marketplace:stream:slots:recovering"

# KEYS[1] the user's set, KEYS[2] the epoch, KEYS[3] the recovery window; ARGV: limit, lease ms,
# stream id, a new epoch value, recovery ms. A missing epoch means Redis lost the slots: it is
# created and the recovery window opened. Returns -2 - ms while the window is open (ms: its
# remaining time), -1 when the slot is taken, else the milliseconds until the soonest lease
# expires (the earliest a slot can free itself).
_ACQUIRE = """
if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('SET', KEYS[2], ARGV[4])
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
end
local recovering = redis.call('PTTL', KEYS[3])
if recovering > 0 then
    return -2 - recovering
end
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
# A hub re-registering its streams after a loss: KEYS[1] the epoch, KEYS[2] the recovery
# window, KEYS[i] (i > 2) the set of stream ARGV[i + 1]; ARGV[1] a new epoch value, ARGV[2]
# recovery ms, ARGV[3] lease ms. Creates the epoch and opens the window when the epoch is
# missing (as _ACQUIRE), adds the leases, returns the epoch.
_REREGISTER = """
if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('SET', KEYS[1], ARGV[1])
    redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 3, #KEYS do
    redis.call('ZADD', KEYS[i], now + tonumber(ARGV[3]), ARGV[i + 1])
    redis.call('PEXPIRE', KEYS[i], ARGV[3])
end
return redis.call('GET', KEYS[1])
"""


def slot_key(user_id: uuid.UUID) -> str:
    return f"{KEY_PREFIX}{user_id}"


def _new_epoch() -> str:
    return secrets.token_hex(8)


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


class StreamSlots:
    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        limit: int,
        lease_seconds: float,
        recovery_seconds: float = 3.0,
    ) -> None:
        self.redis = redis
        self.limit = limit
        self.lease_ms = max(1, int(lease_seconds * 1000))
        self.recovery_ms = max(1, int(recovery_seconds * 1000))
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._reregister = redis.register_script(_REREGISTER)

    async def acquire(self, user_id: uuid.UUID, stream_id: str) -> None:
        """Take a slot for ``stream_id``; 429 ``rate_limited`` when the user has none left, 503
        while the slots are being recounted after Redis lost them."""
        args: list[str | int] = [
            self.limit,
            self.lease_ms,
            stream_id,
            _new_epoch(),
            self.recovery_ms,
        ]
        keys = [slot_key(user_id), EPOCH_KEY, RECOVERING_KEY]
        wait_ms = int(await self._acquire(keys=keys, args=args))
        if wait_ms <= -2:
            raise ServiceUnavailable(
                "open event streams are being recounted after a Redis restart; retry shortly",
                retry_after=max(1, math.ceil((-2 - wait_ms) / 1000)),
            )
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

    async def start_epoch(self) -> str:
        """The current epoch, created when missing (without a recovery window: a frontend
        starting cannot tell a fresh Redis from one that lost its data)."""
        await self.redis.set(EPOCH_KEY, _new_epoch(), nx=True)
        return await self.epoch() or ""

    async def epoch(self) -> str | None:
        """The current epoch; None: Redis lost it (restarted, or flushed)."""
        return _text(await self.redis.get(EPOCH_KEY))

    async def reregister(self, streams: Sequence[tuple[uuid.UUID, str]]) -> str:
        """After a loss: note it (creating the epoch and the recovery window if nobody has yet)
        and take the slots of ``streams`` again, in one script; returns the epoch."""
        keys = [EPOCH_KEY, RECOVERING_KEY, *(slot_key(user_id) for user_id, _ in streams)]
        args: list[str | int] = [
            _new_epoch(),
            self.recovery_ms,
            self.lease_ms,
            *(sid for _, sid in streams),
        ]
        return _text(await self._reregister(keys=keys, args=args)) or ""
