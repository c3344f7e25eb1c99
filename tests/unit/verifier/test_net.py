"""The SSRF guard: which addresses are refused, and that a fetch never reaches them."""

from __future__ import annotations

import ipaddress

import pytest

from marketplace.verifier.net import (
    FetchTrace,
    HostRefused,
    address_forbidden,
    check_address,
    guarded_get,
    guarded_session,
    resolve_checked,
)

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
