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

The client address (:func:`forwarded_client`, applied to ``request.remote`` once per request by
the request middleware) is the TCP peer, unless the peer is one of the trusted proxies
(``MARKETPLACE_TRUSTED_PROXIES``): then it is the right-most ``X-Forwarded-For`` hop (or, without
that header, ``Forwarded`` ``for=``) that is not a trusted proxy, so the clients behind a proxy
have budgets of their own. A peer that is not trusted cannot choose its address that way: its
forwarding headers are ignored.

Every response of a rate-limited route (a success or the 429) carries the route limit's state in
``RateLimit-Limit``, ``RateLimit-Remaining``, ``RateLimit-Reset`` (seconds until the full limit is
available again) and ``RateLimit-Policy`` (``<limit>;w=<window seconds>``), after the IETF
draft "RateLimit header fields for HTTP"; a 429 also has ``Retry-After``.
"""

from __future__ import annotations

import ipaddress
import logging
import math
from collections.abc import Iterable, Sequence

import redis.asyncio as aioredis
from aiohttp import hdrs, web
from multidict import CIMultiDictProxy

from marketplace.auth import Principal
from marketplace.config import Settings
from marketplace.config.settings import parse_rate
from marketplace.errors import RateLimited
from marketplace.gcra import Gcra, Rate, Verdict
from marketplace.metrics import RATE_LIMITED

log = logging.getLogger(__name__)

AUTH_FAILED = "auth-failed"

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# The rate-limit headers of this request's route limit (set by RateLimiter.check; the request
# middleware adds them to whatever the request answers).
RATE_LIMIT_HEADERS: web.RequestKey[dict[str, str]] = web.RequestKey("rate_limit_headers", dict)


def _parse_hop(value: str) -> IPAddress | None:
    """One forwarded hop: an address, with or without a port (``[v6]:port``, ``v4:port``)."""
    value = value.strip().strip('"')
    if value.startswith("["):
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _forwarded_for(values: Iterable[str]) -> list[str]:
    """The ``for=`` values of ``Forwarded`` headers (RFC 7239), in order."""
    hops: list[str] = []
    for value in values:
        for element in value.split(","):
            for pair in element.split(";"):
                name, _, param = pair.strip().partition("=")
                if name.lower() == "for":
                    hops.append(param)
    return hops


def _trusted(address: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    return any(address.version == net.version and address in net for net in networks)


def forwarded_client(
    peer: str | None, headers: CIMultiDictProxy[str], networks: Sequence[IPNetwork]
) -> str | None:
    """The client's address of a request from the TCP peer ``peer``.

    ``peer`` itself unless it is in ``networks`` (the trusted proxies). From a trusted peer: the
    right-most hop of ``X-Forwarded-For`` (all such headers, in order), or of ``Forwarded``
    ``for=`` when there is no ``X-Forwarded-For``, that is not a trusted proxy. Each proxy
    appends the address it received the request from, so that hop is the last one a trusted
    proxy vouches for; anything left of it is what the client wrote. A hop that is no address
    (``unknown``, an obfuscated name) ends the walk at the last trusted address seen.
    """
    if not networks or peer is None:
        return peer
    address = _parse_hop(peer)
    if address is None or not _trusted(address, networks):
        return peer
    xff = headers.getall(hdrs.X_FORWARDED_FOR, [])
    if xff:
        hops = [hop for value in xff for hop in value.split(",")]
    else:
        hops = _forwarded_for(headers.getall(hdrs.FORWARDED, []))
    client = str(address)
    for hop in reversed(hops):
        if not hop.strip():
            continue
        hop_address = _parse_hop(hop)
        if hop_address is None:
            break
        client = str(hop_address)
        if not _trusted(hop_address, networks):
            break
    return client


def limit_headers(rate: Rate, verdict: Verdict) -> dict[str, str]:
    """The rate-limit header fields of a route limit after ``verdict``."""
    window = rate.period_seconds
    window_text = str(int(window)) if window == int(window) else f"{window:g}"
    return {
        "RateLimit-Limit": str(rate.count),
        "RateLimit-Remaining": str(verdict.remaining if verdict.allowed else 0),
        "RateLimit-Reset": str(math.ceil(verdict.reset_ms / 1000)),
        "RateLimit-Policy": f"{rate.count};w={window_text}",
    }


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
        rate = Rate(*self.settings.rate_for(route_name))
        verdict = await self.gcra.hit(f"rl:{route_name}:{caller}", rate)
        request[RATE_LIMIT_HEADERS] = limit_headers(rate, verdict)
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
