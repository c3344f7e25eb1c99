"""Per-route rate limits shared by every frontend, as a GCRA in one Redis script.

GCRA keeps one timestamp per (route, caller) key, so a limit of N per T seconds allows bursts of
N and then one request every T/N seconds. Redis's own clock is used so frontends with skewed
clocks agree. When Redis does not answer the check fails open (the request is served and a metric
counts it): losing the limiter must not take the API down with it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
from aiohttp import web
from redis.exceptions import RedisError

from marketplace.auth import Principal
from marketplace.config import Settings
from marketplace.errors import RateLimited
from marketplace.metrics import RATE_LIMITED, RATE_LIMITER_ERRORS

if TYPE_CHECKING:
    from marketplace.http.routing import Route

log = logging.getLogger(__name__)

GCRA = """
local emission = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + emission
local allow_at = new_tat - burst * emission
if allow_at > now then
  return {0, allow_at - now}
end
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil(new_tat - now))
return {1, 0}
"""


class RateLimiter:
    def __init__(self, redis: aioredis.Redis, settings: Settings) -> None:
        self.settings = settings
        self._script = redis.register_script(GCRA)

    async def hit(self, key: str, count: int, period_seconds: int) -> int:
        """Count one request; return 0 when allowed, else the milliseconds until allowed."""
        emission_ms = period_seconds * 1000 / count
        allowed, wait_ms = await self._script(keys=[key], args=[emission_ms, count])
        return 0 if int(allowed) == 1 else int(wait_ms)

    async def check(
        self, request: web.Request, route: Route, principal: Principal | None, scheduler: bool
    ) -> None:
        if not self.settings.rate_limit_enabled:
            return
        if principal is not None:
            caller = f"u:{principal.user_id}"
        elif scheduler:
            return
        else:
            caller = f"ip:{request.remote or 'unknown'}"
        count, period = self.settings.rate_for(route.name)
        try:
            wait_ms = await self.hit(f"rl:{route.name}:{caller}", count, period)
        except (RedisError, OSError):
            RATE_LIMITER_ERRORS.inc()
            log.warning("rate limiter unavailable; failing open", extra={"route": route.name})
            return
        if wait_ms:
            RATE_LIMITED.labels(route.name).inc()
            raise RateLimited(retry_after=-(-wait_ms // 1000))
