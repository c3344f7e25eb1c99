"""The SSRF guard: which addresses are refused, and that a fetch never reaches them."""

from __future__ import annotations

import ipaddress

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from marketplace.verifier.net import (
    FetchTrace,
    HostRefused,
    address_forbidden,
    check_address,
    check_bracketed_host,
    check_host_form,
    guarded_get,
    guarded_session,
    resolve_checked,
)
from marketplace.verifier.policy import InvalidDeliveryRef

FORBIDDEN = [
    "127.0.0.1",
    "127.255.0.9",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",  # cloud metadata
    "100.64.0.1",
    "0.0.0.0",
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd12:3456::1",
    "fec0::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2001:db8::1",  # documentation
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "140.82.112.3", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("text", FORBIDDEN)
def test_forbidden_addresses(text: str) -> None:
    assert address_forbidden(ipaddress.ip_address(text))
    with pytest.raises(HostRefused):
        check_address(text, allow_private=False)
    assert str(check_address(text, allow_private=True)) == str(ipaddress.ip_address(text))


@pytest.mark.parametrize("text", PUBLIC)
def test_public_addresses(text: str) -> None:
    assert not address_forbidden(ipaddress.ip_address(text))


async def test_hostname_resolving_to_loopback_is_refused() -> None:
    with pytest.raises(HostRefused):
        await resolve_checked("localhost", 80, allow_private=False)
    assert "127.0.0.1" in await resolve_checked("localhost", 80, allow_private=True)


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/x.png",
        "https://10.0.0.5/x.png",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/x.png",
        "https://[fe80::1]/x.png",
        "https://[::ffff:127.0.0.1]/x.png",
        "https://localhost/x.png",
        "http://8.8.8.8/x.png",  # plain http only with private hosts allowed
        "ftp://8.8.8.8/x.png",
    ],
)
async def test_fetch_refuses_before_connecting(url: str) -> None:
    trace = FetchTrace()
    async with guarded_session(allow_private=False, timeout_s=5) as session:
        with pytest.raises(HostRefused):
            async with guarded_get(session, url, allow_private=False, trace=trace):
                pass
    assert trace.hops == []


# (URL, a word the refusal's message must carry, so the right rule is seen to fire)
UNFETCHABLE_HOSTS = [
    ("https://2130706433/x.png", "dotted-quad"),  # decimal 127.0.0.1
    ("https://0177.0.0.1/", "dotted-quad"),  # octal
    ("https://0x7f.0.0.1/", "dotted-quad"),  # hex
    ("https://0X7F.0.0.1/", "dotted-quad"),
    ("https://0x7f000001/", "dotted-quad"),
    ("https://127.1/", "dotted-quad"),  # shortened
    ("https://10.1/", "dotted-quad"),
    ("https://127.0.1/", "dotted-quad"),
    ("https://127.0.0.01/", "dotted-quad"),  # leading zero
    ("https://256.0.0.1/", "dotted-quad"),  # octet out of range
    ("https://1.2.3.4.5/", "dotted-quad"),
    ("https://\uff11\uff12\uff17.1/", "dotted-quad"),  # fullwidth digits, read as 127.1
    ("https://a.123/", "numeric label"),
    ("https://example.0x1f/", "numeric label"),
    ("https://127.0.0.1./", "final dot"),
    ("https://8.8.8.8./", "final dot"),
    ("https://a..example/", "empty label"),
    ("https://.example/", "empty label"),
    ("https://example.com../", "empty label"),
    ("https://" + "a" * 64 + ".example/", "longer than 63"),
    ("https://" + "a." * 127 + "example/", "longer than 253"),
    ("https://ex%61mple.com/", "not a host name"),
    ("https://exa$mple.com/", "not a host name"),
    ("https://example.com:0/", "port 0"),
    ("https://[fe80::1%25eth0]/", "zone"),
]
FETCHABLE_HOSTS = [
    "https://8.8.8.8/x.png",
    "https://127.0.0.1/x.png",  # well formed: the guard refuses it when fetching
    "https://0.0.0.0/",
    "https://255.255.255.255:8443/",
    "https://[::1]/",
    "https://[2606:4700:4700::1111]:443/x.png",
    "https://[::ffff:127.0.0.1]/",
    "https://cdn.example/x.png",
    "https://CDN.Example:8443/x.png",
    "https://example.com./x.png",  # fully qualified: resolves
    "https://123.example.com/",  # numeric labels before the last are names
    "https://1e1/",  # not numeric: a (nonexistent) name
    "https://my_host.example/",
    "https://b\u00fccher.example/x.png",  # IDNA
    "https://xn--bcher-kva.example/x.png",
    "https://" + "a" * 63 + ".example/",
]


@pytest.mark.parametrize(("url", "reason"), UNFETCHABLE_HOSTS)
def test_unfetchable_host_forms_are_refused(url: str, reason: str) -> None:
    with pytest.raises(InvalidDeliveryRef, match=reason):
        check_host_form(URL(url))


@pytest.mark.parametrize("url", FETCHABLE_HOSTS)
def test_fetchable_host_forms_are_accepted(url: str) -> None:
    check_host_form(URL(url))


@pytest.mark.parametrize("url", ["https://127.1/x.png", "https://0x7f.0.0.1/", "https://a..b/"])
async def test_fetch_refuses_unfetchable_host_forms_even_with_private_hosts_allowed(
    url: str,
) -> None:
    """A redirect can name such a host too: refused (deterministic), never connected to."""
    trace = FetchTrace()
    async with guarded_session(allow_private=True, timeout_s=5) as session:
        with pytest.raises(HostRefused, match="host"):
            async with guarded_get(session, url, allow_private=True, trace=trace):
                pass
    assert trace.hops == []


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        # 127.1 is 127.0.0.1 to the resolver: with private hosts allowed, the hop would connect.
        ("http://127.1:{port}/target", "dotted-quad"),
        # yarl reads it as the name v1.x: only the Location as written tells.
        ("https://[v1.x]/target", "not an IPv6 address"),
    ],
)
async def test_a_redirect_to_an_unfetchable_host_form_is_refused(
    location: str, reason: str
) -> None:
    async def redirect(request: web.Request) -> web.Response:
        # As written (HTTPFound would send the Location through yarl, brackets dropped).
        return web.Response(
            status=302, headers={"Location": location.format(port=request.url.port)}
        )

    async def target(request: web.Request) -> web.Response:
        return web.Response(text="reached")

    app = web.Application()
    app.router.add_get("/start", redirect)
    app.router.add_get("/target", target)
    trace = FetchTrace()
    async with TestServer(app, host="127.0.0.1") as server:
        start = str(server.make_url("/start"))
        async with guarded_session(allow_private=True, timeout_s=5) as session:
            with pytest.raises(HostRefused, match=reason):
                async with guarded_get(session, start, allow_private=True, trace=trace):
                    pass
    assert trace.hops == [(start, 302)]


@pytest.mark.parametrize(
    "text", ["https://[v1.x]/", "https://user@[v1.x]:443/a", "//[v1.x]/x", "HTTPS://[vF.a]"]
)
def test_a_bracketed_host_that_is_not_ipv6_is_refused_as_written(text: str) -> None:
    """yarl reads ``[v1.x]`` (an RFC 3986 IPvFuture literal, refused by curl and git) as the name
    ``v1.x``, brackets dropped: only the text as written tells."""
    assert URL(text).raw_host and "[" not in str(URL(text))  # what yarl makes of it
    with pytest.raises(InvalidDeliveryRef, match="not an IPv6 address"):
        check_bracketed_host(text)


@pytest.mark.parametrize(
    "text",
    [
        "https://[::1]/",
        "https://[2606:4700:4700::1111]:443/x.png",
        "https://example.com/[v1.x]",
        "https://example.com/?q=[v1.x]",
        "/a//[v1.x]/b",  # a relative reference: no authority
        "OWNER/REPO",
    ],
)
def test_other_urls_pass_the_bracket_check(text: str) -> None:
    check_bracketed_host(text)
