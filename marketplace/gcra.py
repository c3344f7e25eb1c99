"""Rate limiting with GCRA, shared through Redis, with a per-process fallback.

GCRA (the generic cell rate algorithm) keeps one number per key, the theoretical arrival time
(TAT) of the next request: a limit of N per T seconds allows a burst of N and then one request
every T/N seconds. The shared check is one Lua script, so it is atomic across every process that
uses the same Redis, and it reads Redis's own clock, so processes with skewed clocks agree.

When Redis does not answer, the same algorithm runs in this process's memory with the same
limits instead of letting everything through: each process then enforces the limit on its own
(with K processes a caller may get up to K times the limit), which is far better than no limit at
all. A metric and a rate-limited warning say so; after :data:`REDIS_RETRY_SECONDS` the next check
tries Redis again, so a dead Redis costs one failed attempt per interval, not one per request.

Nothing here knows about HTTP: actors can limit their own work with the same class.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from marketplace.metrics import (
    RATE_LIMITER_ERRORS,
    RATE_LIMITER_FALLBACK_ACTIVE,
    RATE_LIMITER_FALLBACK_CHECKS,
)

log = logging.getLogger(__name__)

# A limiter check must never hold a request up for long: beyond this Redis counts as down.
# Generous, because a Redis answer that comes late under load is still the right one: a loaded
# machine (load average 18 on 2 cores) took over 0.25 s for some of 30 concurrent checks. The
# timeout runs on the caller's event loop, so a busy loop counts against it too.
REDIS_TIMEOUT_SECONDS = 1.0
# While Redis is down, try it again at most this often (the checks in between run locally).
REDIS_RETRY_SECONDS = 1.0
# While Redis is down, repeat the warning at most this often.
WARN_INTERVAL_SECONDS = 60.0
# Keys the local fallback keeps at most; expired ones are dropped first, then the oldest.
LOCAL_MAX_KEYS = 100_000

# ARGV: emission interval (ms), burst (requests), operation:
#   hit    count one request if it conforms
#   try    refuse if one more request would not conform; count it only when the key already
#          holds counted requests (see Gcra.attempt)
#   refund give back one request counted earlier
# Returns {1, recorded, remaining, reset_ms} when allowed (recorded: 1 if counted),
# {0, wait_ms, 0, reset_ms} when refused. remaining: requests the key would still accept now;
# reset_ms: until the key is back to its full burst (its TAT). Both as after the operation.
SCRIPT = """
local emission = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local op = ARGV[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local stored = tonumber(redis.call('GET', KEYS[1]) or 0)
local tat = math.max(stored, now)
if op == 'refund' then
  local back = tat - emission
  if back <= now then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], back, 'PX', math.ceil(back - now))
  end
  return {1, 0, 0, 0}
end
local new_tat = tat + emission
local allow_at = new_tat - burst * emission
if allow_at > now then
  return {0, math.ceil(allow_at - now), 0, math.ceil(tat - now)}
end
local function left(after)
  return math.max(0, math.min(burst, math.floor((now - after) / emission + burst + 1e-6)))
end
if op == 'hit' or stored > now then
  redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil(new_tat - now))
  return {1, 1, left(new_tat), math.ceil(new_tat - now)}
end
return {1, 0, left(tat), math.ceil(tat - now)}
"""


@dataclass(frozen=True)
class Rate:
    """``count`` requests per ``period_seconds``."""

    count: int
    period_seconds: float

    @property
    def emission_ms(self) -> float:
        return self.period_seconds * 1000 / self.count


@dataclass(frozen=True)
class Verdict:
    """Outcome of one check: ``wait_ms`` > 0 means refused for that long; ``recorded`` says
    whether the request was counted (only a counted ``attempt`` needs a ``refund``).
    ``remaining`` (requests the key still accepts now) and ``reset_ms`` (until it is back to its
    full burst) describe the key after the check, for rate-limit response headers."""

    wait_ms: int = 0
    recorded: bool = False
    remaining: int = 0
    reset_ms: int = 0

    @property
    def allowed(self) -> bool:
        return self.wait_ms == 0

    @property
    def retry_after_seconds(self) -> int:
        return max(1, math.ceil(self.wait_ms / 1000))


class LocalGcra:
    """The same algorithm and operations as :data:`SCRIPT`, in this process's memory."""

    def __init__(
        self, *, max_keys: int = LOCAL_MAX_KEYS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._tat: dict[str, float] = {}
        self._max_keys = max_keys
        self._clock = clock

    def __len__(self) -> int:
        return len(self._tat)

    def run(self, key: str, rate: Rate, op: str) -> Verdict:
        now = self._clock() * 1000
        emission = rate.emission_ms
        stored = self._tat.get(key, 0.0)
        tat = max(stored, now)
        if op == "refund":
            back = tat - emission
            if back <= now:
                self._tat.pop(key, None)
            else:
                self._tat[key] = back
            return Verdict()
        new_tat = tat + emission
        allow_at = new_tat - rate.count * emission
        if allow_at > now:
            return Verdict(wait_ms=math.ceil(allow_at - now), reset_ms=math.ceil(tat - now))

        def left(after: float) -> int:
            return max(0, min(rate.count, math.floor((now - after) / emission + rate.count + 1e-6)))

        if op == "hit" or stored > now:
            # Re-inserted so the dict's order is least recently counted first.
            self._tat.pop(key, None)
            self._tat[key] = new_tat
            if len(self._tat) > self._max_keys:
                self._prune(now)
            return Verdict(
                recorded=True, remaining=left(new_tat), reset_ms=math.ceil(new_tat - now)
            )
        return Verdict(remaining=left(tat), reset_ms=math.ceil(tat - now))

    def _prune(self, now: float) -> None:
        for key in [k for k, tat in self._tat.items() if tat <= now]:
            del self._tat[key]
        while len(self._tat) > self._max_keys:
            del self._tat[next(iter(self._tat))]


class Gcra:
    """GCRA limits shared through Redis, falling back to :class:`LocalGcra` while Redis is down.

    ``hit`` counts a request if it conforms. ``attempt`` and ``refund`` serve limits on failures
    (such as failed authentication): ``attempt`` refuses once the failure budget is spent and,
    while earlier failures are on record, counts the attempt in advance, so concurrent attempts
    cannot all slip through before their failures are counted; the caller gives a counted attempt
    back with ``refund`` when it turns out not to be a failure, or counts an uncounted failed one
    with ``hit``.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        name: str = "rate limiter",
        timeout_seconds: float = REDIS_TIMEOUT_SECONDS,
    ) -> None:
        self._script = redis.register_script(SCRIPT)
        self.local = LocalGcra()
        self.name = name
        self.timeout_seconds = timeout_seconds
        self._retry_at = 0.0
        self._fallback_since: float | None = None
        self._warned_at = 0.0
        self._fallback_checks = 0

    @property
    def in_fallback(self) -> bool:
        return self._fallback_since is not None

    async def hit(self, key: str, rate: Rate) -> Verdict:
        return await self._run(key, rate, "hit")

    async def attempt(self, key: str, rate: Rate) -> Verdict:
        return await self._run(key, rate, "try")

    async def refund(self, key: str, rate: Rate) -> None:
        await self._run(key, rate, "refund")

    async def _run(self, key: str, rate: Rate, op: str) -> Verdict:
        if time.monotonic() >= self._retry_at:
            try:
                async with asyncio.timeout(self.timeout_seconds):
                    allowed, value, remaining, reset_ms = await self._script(
                        keys=[key], args=[rate.emission_ms, rate.count, op]
                    )
            except (RedisError, OSError, TimeoutError) as exc:
                self._redis_failed(exc)
            else:
                if self._fallback_since is not None:
                    self._redis_recovered()
                if int(allowed) == 1:
                    return Verdict(
                        recorded=int(value) == 1,
                        remaining=int(remaining),
                        reset_ms=max(0, int(reset_ms)),
                    )
                return Verdict(wait_ms=max(1, int(value)), reset_ms=max(0, int(reset_ms)))
        self._fallback_checks += 1
        RATE_LIMITER_FALLBACK_CHECKS.inc()
        return self.local.run(key, rate, op)

    def _redis_failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        RATE_LIMITER_ERRORS.inc()
        self._retry_at = now + REDIS_RETRY_SECONDS
        if self._fallback_since is None:
            self._fallback_since = now
            self._fallback_checks = 0
            RATE_LIMITER_FALLBACK_ACTIVE.set(1)
        if now - self._warned_at >= WARN_INTERVAL_SECONDS:
            self._warned_at = now
            log.warning(
                "%s: Redis unavailable (%s); enforcing limits per process",
                self.name,
                type(exc).__name__,
                extra={
                    "fallback_seconds": round(now - self._fallback_since, 1),
                    "fallback_checks": self._fallback_checks,
                },
            )

    def _redis_recovered(self) -> None:
        assert self._fallback_since is not None
        log.warning(
            "%s: Redis answers again; limits shared again",
            self.name,
            extra={
                "fallback_seconds": round(time.monotonic() - self._fallback_since, 1),
                "fallback_checks": self._fallback_checks,
            },
        )
        self._fallback_since = None
        self._warned_at = 0.0
        RATE_LIMITER_FALLBACK_ACTIVE.set(0)
