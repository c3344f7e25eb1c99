"""The SSRF guard: every URL a verifier policy fetches goes only to public addresses.

A host is resolved once, every address it resolves to is checked (private, loopback,
link-local, multicast, reserved, unspecified, shared and documentation ranges; IPv4, IPv6, and
IPv4 embedded in IPv6: mapped, NAT64, 6to4), and the connection goes to the addresses that were
checked: aiohttp gets a resolver that answers only checked addresses (and IP literals, which
aiohttp never hands to a resolver, are checked before the request); git gets the checked address
pinned with ``http.curloptResolve``. Redirects are followed by hand, each hop checked.

``verifier_allow_private_hosts`` turns the guard off (local fixtures, a private git server). It
also admits plain ``http://`` URLs, which only a local fixture needs.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_REDIRECTS = 5
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_EXTRA_FORBIDDEN = (
    ipaddress.IPv4Network("100.64.0.0/10"),  # carrier-grade NAT, not globally routed
    ipaddress.IPv4Network("192.0.0.0/24"),
    ipaddress.IPv4Network("198.18.0.0/15"),
    ipaddress.IPv6Network("fec0::/10"),  # deprecated site-local
)


class HostRefused(Exception):
    """The URL's host is, or resolves to, an address the guard refuses (message says which)."""


class TooManyRedirects(Exception):
    """A fetch was redirected more times than :data:`MAX_REDIRECTS`."""


class HostNotFound(Exception):
    """The host name does not exist (a deterministic answer, unlike a DNS timeout)."""


def address_forbidden(ip: IPAddress) -> bool:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            # The socket connects to the IPv4 address: it alone decides.
            return address_forbidden(ip.ipv4_mapped)
        embedded = ip.sixtofour
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None and address_forbidden(embedded):
            return True
        if ip.teredo is not None and address_forbidden(ip.teredo[1]):
            return True
    if any(ip.version == net.version and ip in net for net in _EXTRA_FORBIDDEN):
        return True
    return (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


def check_address(text: str, *, allow_private: bool) -> IPAddress:
    ip = ipaddress.ip_address(text.split("%", 1)[0])
    if not allow_private and address_forbidden(ip):
        raise HostRefused(f"{text} is not a public address")
    return ip


def ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


async def resolve_checked(host: str, port: int, *, allow_private: bool) -> list[str]:
    """The host's addresses, all checked; refuses the host if any address is forbidden (a name
    that mixes public and private answers is how rebinding attacks start)."""
    literal = ip_literal(host)
    if literal is not None:
        check_address(str(literal), allow_private=allow_private)
        return [str(literal)]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
            raise HostNotFound(f"{host} does not resolve") from exc
        # EAI_AGAIN and friends: the resolver is unwell, not the name wrong.
        raise OSError(f"resolving {host}: {exc}") from exc
    addresses: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        address = str(sockaddr[0])
        check_address(address, allow_private=allow_private)
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise HostNotFound(f"{host} has no address")
    return addresses


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that answers only addresses :func:`resolve_checked` accepted, so the
    connection goes to exactly what was checked (no second lookup to rebind)."""

    def __init__(self, *, allow_private: bool) -> None:
        self._allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results: list[ResolveResult] = []
        for address in await resolve_checked(host, port, allow_private=self._allow_private):
            ip = ipaddress.ip_address(address)
            results.append(
                ResolveResult(
                    hostname=host,
                    host=address,
                    port=port,
                    family=socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                    proto=0,
                    flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                )
            )
        return results

    async def close(self) -> None:
        return None


def guarded_session(*, allow_private: bool, timeout_s: float) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(allow_private=allow_private), use_dns_cache=False
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        # No ambient proxy or netrc: a proxy would make the checked address meaningless.
        trust_env=False,
    )


def check_url_scheme(url: URL, *, allow_private: bool) -> None:
    allowed = ("https", "http") if allow_private else ("https",)
    if url.scheme not in allowed or not url.host:
        raise HostRefused(f"{url.scheme}:// URLs are not fetched (only {', '.join(allowed)})")


@dataclass
class FetchTrace:
    """Every hop a fetch went through: (url, status) pairs, the last one answered."""

    hops: list[tuple[str, int]] = field(default_factory=list)


@asynccontextmanager
async def guarded_get(
    session: aiohttp.ClientSession,
    url: str,
    *,
    allow_private: bool,
    trace: FetchTrace,
    max_redirects: int = MAX_REDIRECTS,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """GET ``url`` through ``session`` (made by :func:`guarded_session`), following up to
    ``max_redirects`` redirects by hand, each hop's scheme and host checked.

    Raises :class:`HostRefused`, :class:`HostNotFound`, :class:`TooManyRedirects` or the
    transport's errors (``aiohttp.ClientError``, ``TimeoutError``).
    """
    current = URL(url)
    for _ in range(max_redirects + 1):
        check_url_scheme(current, allow_private=allow_private)
        literal = ip_literal(current.raw_host or "")
        if literal is not None:
            check_address(str(literal), allow_private=allow_private)
        response = await session.get(current, allow_redirects=False)
        trace.hops.append((str(current), response.status))
        location = response.headers.get("Location")
        if response.status in (301, 302, 303, 307, 308) and location:
            response.release()
            current = current.join(URL(location))
            continue
        try:
            yield response
        finally:
            response.release()
        return
    raise TooManyRedirects(f"more than {max_redirects} redirects from {url}")
