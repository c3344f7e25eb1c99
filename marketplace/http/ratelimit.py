"""Per-route rate limits and the failed-authentication limit, shared by every frontend.

Both are GCRA limits (``marketplace.gcra``) kept in Redis; when Redis does not answer they are
enforced per process instead of being switched off.

Per route: a signed-in caller is counted by user, an anonymous one by client address, the
scheduler not at all.

Failed authentication: every request that presents a credential which then fails verification
(a bad or expired bearer token, a wrong scheduler secret, an unknown agent key) counts against
its client address (``rl:auth-failed:ip:<addr>``, IPv6 by /64 since one host holds a whole /64).
Once that budget is spent, requests from the address that present any credentials get 429 before
the credentials are looked at, so guessing keys is limited to the budget's rate. While the
address has failures on record, each attempt is counted in advance and given back when it
succeeds, so firing many guesses at once does not get more of them checked.

The client address is the TCP peer: behind a reverse proxy that is the proxy, and the limits
apply to everyone behind it together.
"""

from __future__ import annotations

import ipaddress
import logging

import redis.asyncio as aioredis
from aiohttp import web

from marketplace.auth import Principal
from marketplace.config import Settings
from marketplace.config.settings import parse_rate
from marketplace.errors import RateLimited
from marketplace.gcra import Gcra, Rate, Verdict
from marketplace.metrics import RATE_LIMITED

log = logging.getLogger(__name__)

AUTH_FAILED = "auth-failed"


def client_address(request: web.Request) -> str:
    """The peer's address as a limit key: IPv4 as is, IPv6 as its /64 network."""
    remote = request.remote or "unknown"
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return remote
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class RateLimiter:
    """Both limits; per-route limits are looked up by route name (``Settings.rate_for``)."""

    def __init__(self, redis: aioredis.Redis, settings: Settings) -> None:
        self.settings = settings
        self.gcra = Gcra(redis, timeout_seconds=settings.rate_limit_redis_timeout_ms / 1000)
        self.auth_failure_rate = Rate(*parse_rate(settings.rate_limit_auth_failures))

    async def check(
        self, request: web.Request, route_name: str, principal: Principal | None, scheduler: bool
    ) -> None:
        if not self.settings.rate_limit_enabled:
            return
        if principal is not None:
            caller = f"u:{principal.user_id}"
        elif scheduler:
            return
        else:
            caller = f"ip:{client_address(request)}"
        verdict = await self.gcra.hit(
            f"rl:{route_name}:{caller}", Rate(*self.settings.rate_for(route_name))
        )
        if not verdict.allowed:
            RATE_LIMITED.labels(route_name).inc()
            raise RateLimited(retry_after=verdict.retry_after_seconds)

    # --- failed authentication -------------------------------------------------------------

    def _auth_key(self, request: web.Request) -> str:
        return f"rl:{AUTH_FAILED}:ip:{client_address(request)}"

    async def before_credentials(self, request: web.Request) -> Verdict:
        """Refuse (429) an address whose failed-authentication budget is spent."""
        if not self.settings.rate_limit_enabled:
            return Verdict()
        verdict = await self.gcra.attempt(self._auth_key(request), self.auth_failure_rate)
        if not verdict.allowed:
            RATE_LIMITED.labels(AUTH_FAILED).inc()
            raise RateLimited(
                retry_after=verdict.retry_after_seconds,
                message="too many failed authentication attempts from this address; retry later",
            )
        return verdict

    async def credentials_failed(self, request: web.Request, attempt: Verdict) -> None:
        if self.settings.rate_limit_enabled and not attempt.recorded:
            await self.gcra.hit(self._auth_key(request), self.auth_failure_rate)

    async def credentials_accepted(self, request: web.Request, attempt: Verdict) -> None:
        if attempt.recorded:
            await self.gcra.refund(self._auth_key(request), self.auth_failure_rate)


# Set when Redis is connected (marketplace.http.app); the router reads it on every request.
RATE_LIMITER: web.AppKey[RateLimiter] = web.AppKey("rate_limiter", RateLimiter)
