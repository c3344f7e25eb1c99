"""The SSRF guard: every URL a verifier policy fetches goes only to public addresses.

A host is resolved once, every address it resolves to is checked (private, loopback,
link-local, multicast, reserved, unspecified, shared and documentation ranges; IPv4, IPv6, and
IPv4 embedded in IPv6: mapped, NAT64, 6to4), and the connection goes to the addresses that were
checked: aiohttp gets a resolver that answers only checked addresses (and IP literals, which
aiohttp never hands to a resolver, are checked before the request); git gets the checked address
pinned with ``http.curloptResolve``. Redirects are followed by hand, each hop checked.

``verifier_allow_private_hosts`` turns the guard off (local fixtures, a private git server). It
also admits plain ``http://`` URLs, which only a local fixture needs.

Before any of that, when a ``deliveryRef`` is read, :func:`check_host_form` refuses hosts that
no fetch could ever reach as written (legacy IPv4 forms, empty labels, port 0...), so such a
reference is a 400 instead of a job that can only fail.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from marketplace.verifier.policy import InvalidDeliveryRef

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_REDIRECTS = 5
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_EXTRA_FORBIDDEN = (
    ipaddress.IPv4Network("100.64.0.0/10"),  # carrier-grade NAT, not globally routed
    ipaddress.IPv4Network("192.0.0.0/24"),
    ipaddress.IPv4Network("198.18.0.0/15"),
    ipaddress.IPv6Network("fec0::/10"),  # deprecated site-local
)
# One label of a host name as the URL parser leaves it (lower case, IDNA names already in their
# xn-- form). Underscores are not LDH but real hosts carry them and resolvers answer for them.
_HOST_LABEL = re.compile(r"[a-z0-9_-]+", re.IGNORECASE)
# A last label that makes a URL host an IPv4 address (WHATWG URL "ends in a number"): decimal,
# or 0x hex, as inet_aton reads it.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*", re.IGNORECASE)
_MAX_HOST_NAME = 253
# The authority of an absolute or scheme-relative URL, as written.
_AUTHORITY = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//([^/?#]*)", re.IGNORECASE)


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


def check_bracketed_host(text: str) -> None:
    """Refuse (:class:`InvalidDeliveryRef`) a URL, as written, whose bracketed host is not an
    IPv6 address. yarl reads ``https://[v1.x]/`` as the name ``v1.x`` and drops the brackets,
    which make it an RFC 3986 IPvFuture literal that curl and git refuse: another place where
    parsers disagree, so it is refused before yarl reads the text."""
    match = _AUTHORITY.match(text)
    if match is None:
        return
    host = match.group(1).rpartition("@")[2]
    if host.startswith("["):
        literal = host.partition("]")[0] + "]"
        if ":" not in literal:
            raise InvalidDeliveryRef(f"host {literal} is not an IPv6 address")


def check_host_form(url: URL) -> None:
    """Refuse (:class:`InvalidDeliveryRef`) a URL whose host no fetch could ever reach as
    written; whether an acceptable host is public is decided later, when it is fetched.

    IPv4 literals must be four decimal numbers 0-255 without leading zeros. The legacy forms
    inet_aton reads (``2130706433``, ``0x7f.0.0.1``, ``0177.0.0.1``, ``127.1``) are refused: no
    TLS certificate can match them (certificates name DNS names or IP addresses, never
    ``127.1``), so a fetch could only fail, and a failed handshake looks transient and would be
    retried; and they are where parsers disagree (the resolver and browsers read an address,
    ``ipaddress`` reads a name), which is how SSRF filters are slipped past. The rule is WHATWG's:
    a host whose last label is numeric is an IPv4 address, so ``a.123`` and ``1.2.3.4.5`` are
    refused too, and so is a dotted quad with a final dot (no resolver answers for it). A name may
    end with one dot (the DNS root; it resolves). Bracketed IPv6 literals are accepted, without a
    zone (``%25eth0`` names an interface of the machine that fetches). Port 0 is refused.
    """
    host = url.raw_host
    if not host:
        raise InvalidDeliveryRef("the URL names no host")
    if url.explicit_port == 0:
        raise InvalidDeliveryRef("port 0 cannot be fetched")
    if ":" in host:
        # Only a bracketed IPv6 literal puts a colon in the host; yarl has checked its form.
        if "%" in host:
            raise InvalidDeliveryRef(f"IPv6 host [{host}] has a zone; only a plain address works")
        return
    name = host.removesuffix(".")
    labels = name.split(".")
    if "" in labels:
        raise InvalidDeliveryRef(f"host {host!r} has an empty label")
    if len(name) > _MAX_HOST_NAME:
        raise InvalidDeliveryRef(f"host name is longer than {_MAX_HOST_NAME} characters")
    if any(len(label) > 63 for label in labels):
        raise InvalidDeliveryRef(f"host {host!r} has a label longer than 63 characters")
    if not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise InvalidDeliveryRef(
            f"host {host!r} is not a host name (labels of letters, digits, '-' and '_'; "
            "international names are fine)"
        )
    if not _NUMERIC_LABEL.fullmatch(labels[-1]):
        return
    if name != host:
        raise InvalidDeliveryRef(f"IPv4 host {host!r}: write the address without the final dot")
    try:
        canonical = str(ipaddress.IPv4Address(name)) == name
    except ValueError:
        canonical = False
    if canonical:
        return
    if all(_NUMERIC_LABEL.fullmatch(label) for label in labels):
        raise InvalidDeliveryRef(
            f"host {host!r} is not a dotted-quad IPv4 address: write four decimal numbers "
            "0-255 without leading zeros (decimal, octal, hex and shortened forms are not fetched)"
        )
    raise InvalidDeliveryRef(
        f"host {host!r} ends with a numeric label, which makes it an IPv4 address, "
        "and it is not one (four decimal numbers 0-255)"
    )


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
    written = str(url)  # the hop's URL as written (yarl drops what check_bracketed_host reads)
    for _ in range(max_redirects + 1):
        check_url_scheme(current, allow_private=allow_private)
        try:
            # A redirect may name a host no fetch can reach as written (checked for the
            # reference when it was read): refused, a deterministic answer, not a failed
            # handshake that would look transient.
            check_bracketed_host(written)
            check_host_form(current)
        except InvalidDeliveryRef as exc:
            raise HostRefused(str(exc)) from None
        literal = ip_literal(current.raw_host or "")
        if literal is not None:
            check_address(str(literal), allow_private=allow_private)
        response = await session.get(current, allow_redirects=False)
        trace.hops.append((str(current), response.status))
        location = response.headers.get("Location")
        if response.status in (301, 302, 303, 307, 308) and location:
            response.release()
            written = location
            current = current.join(URL(location))
            continue
        try:
            yield response
        finally:
            response.release()
        return
    raise TooManyRedirects(f"more than {max_redirects} redirects from {url}")
