"""The client address behind trusted proxies (MARKETPLACE_TRUSTED_PROXIES): taken from
X-Forwarded-For / Forwarded only when the TCP peer is a trusted proxy, and then used by the
failed-authentication budget, the rate limits and the access log. The tests' peer is
127.0.0.1: one app trusts it, another does not."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import redis.asyncio
from multidict import CIMultiDict, CIMultiDictProxy

from marketplace.config.settings import parse_networks
from marketplace.http.keys import ACCESS_LOG
from marketplace.http.ratelimit import forwarded_client
from tests.api.probe import probe
from tests.conftest import Servers, bearer, make_settings, new_user

EITHER = "/v1/_probe/auth/either"
BAD = bearer("not-a-jwt")


def _headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


# --- the rule itself ---------------------------------------------------------------------------

PROXIES = parse_networks("10.0.0.0/8, 127.0.0.1, 2001:db8:1::/48")


@pytest.mark.parametrize(
    ("peer", "headers", "client"),
    [
        # An untrusted peer's forwarding headers are ignored.
        ("198.51.100.7", [("X-Forwarded-For", "203.0.113.1")], "198.51.100.7"),
        ("198.51.100.7", [("Forwarded", "for=203.0.113.1")], "198.51.100.7"),
        # A trusted peer without forwarding headers is itself the client.
        ("10.1.2.3", [], "10.1.2.3"),
        # The right-most hop that is not a trusted proxy; what the client prepended is ignored.
        ("10.1.2.3", [("X-Forwarded-For", "203.0.113.1")], "203.0.113.1"),
        ("10.1.2.3", [("X-Forwarded-For", "1.2.3.4, 203.0.113.1, 10.9.9.9")], "203.0.113.1"),
        ("127.0.0.1", [("X-Forwarded-For", "1.2.3.4"), ("X-Forwarded-For", "203.0.113.2")],
         "203.0.113.2"),
        # Ports and IPv6 forms.
        ("10.1.2.3", [("X-Forwarded-For", "203.0.113.1:5555")], "203.0.113.1"),
        ("10.1.2.3", [("X-Forwarded-For", "[2001:db8:2::5]:443")], "2001:db8:2::5"),
        ("2001:db8:1::9", [("X-Forwarded-For", "2001:db8:2::5")], "2001:db8:2::5"),
        ("::ffff:10.1.2.3", [("X-Forwarded-For", "203.0.113.1")], "203.0.113.1"),
        # Forwarded (RFC 7239) when there is no X-Forwarded-For.
        ("10.1.2.3", [("Forwarded", 'for=1.2.3.4, for="[2001:db8:2::5]:80";proto=https')],
         "2001:db8:2::5"),
        ("10.1.2.3", [("Forwarded", "for=203.0.113.4;by=10.0.0.1, for=10.0.0.2")],
         "203.0.113.4"),
        ("10.1.2.3", [("Forwarded", "for=9.9.9.9"), ("X-Forwarded-For", "203.0.113.1")],
         "203.0.113.1"),
        # Every hop a trusted proxy: the left-most one.
        ("10.1.2.3", [("X-Forwarded-For", "10.0.0.5, 10.0.0.6")], "10.0.0.5"),
        # A hop that is no address ends the walk at the last trusted address.
        ("10.1.2.3", [("X-Forwarded-For", "nonsense")], "10.1.2.3"),
        ("10.1.2.3", [("X-Forwarded-For", "203.0.113.1, unknown, 10.0.0.5")], "10.0.0.5"),
        ("10.1.2.3", [("Forwarded", "for=_hidden")], "10.1.2.3"),
    ],
)  # fmt: skip
def test_the_client_is_the_rightmost_untrusted_hop_of_a_trusted_peer(
    peer: str, headers: list[tuple[str, str]], client: str
) -> None:
    assert forwarded_client(peer, _headers(*headers), PROXIES) == client


def test_no_trusted_proxies_means_the_peer() -> None:
    headers = _headers(("X-Forwarded-For", "203.0.113.1"))
    assert forwarded_client("10.1.2.3", headers, []) == "10.1.2.3"
    assert forwarded_client(None, headers, PROXIES) is None


# --- through the app -------------------------------------------------------------------------


async def _app(aiohttp_client: Any, servers: Servers, **overrides: Any) -> Any:
    from marketplace.http.app import create_app

    settings = make_settings(
        servers,
        rate_limit_auth_failures="3/60",
        rate_limits={"probeLimited": "3/60"},
        **overrides,
    )
    return await aiohttp_client(create_app(settings, extra_routes=[probe]))


def xff(address: str, **headers: str) -> dict[str, str]:
    return {"X-Forwarded-For": address, **headers}


async def test_an_untrusted_peer_cannot_pick_its_address(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None
) -> None:
    client = await _app(aiohttp_client, servers)  # trusts no proxy
    for index in range(3):
        resp = await client.get(EITHER, headers=xff(f"203.0.113.{index + 1}", **BAD))
        assert resp.status == 401
    # The three "clients" were one address: its budget is spent, whatever it claims to be.
    resp = await client.get(EITHER, headers=xff("203.0.113.99", **new_user().headers))
    assert resp.status == 429
    assert "failed authentication" in (await resp.json())["message"]
    # Route limits count the peer too.
    assert (await client.get("/v1/_probe/limited", headers=xff("203.0.113.5"))).status == 200
    check = redis.asyncio.Redis.from_url(servers.redis_url)
    try:
        assert await check.exists("rl:probeLimited:ip:127.0.0.1") == 1
        assert await check.exists("rl:probeLimited:ip:203.0.113.5") == 0
    finally:
        await check.aclose()


async def test_clients_behind_a_trusted_proxy_have_their_own_budgets(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None
) -> None:
    client = await _app(aiohttp_client, servers, trusted_proxies="127.0.0.1/32")
    access_log = client.app[ACCESS_LOG]
    access_log.stream, access_log.enabled, access_log.json_lines = io.StringIO(), True, True
    user = new_user()

    # The attacker behind the proxy spends its own budget...
    for _ in range(3):
        assert (await client.get(EITHER, headers=xff("203.0.113.1", **BAD))).status == 401
    assert (await client.get(EITHER, headers=xff("203.0.113.1", **user.headers))).status == 429
    # ... and cannot get a fresh one by prepending another address (the proxy appended its own
    # peer, the attacker, last).
    spoofed = xff("198.51.100.1, 203.0.113.1", **user.headers)
    assert (await client.get(EITHER, headers=spoofed)).status == 429
    # Everyone else behind the same proxy is not locked out.
    assert (await client.get(EITHER, headers=xff("203.0.113.2", **user.headers))).status == 200
    assert (await client.get(EITHER, headers=xff("203.0.113.2", **BAD))).status == 401
    forwarded = {"Forwarded": 'for="203.0.113.3:4711"', **user.headers}
    assert (await client.get(EITHER, headers=forwarded)).status == 200
    # The proxy itself (no forwarding header) is one more client with its own budget.
    assert (await client.get(EITHER, headers=user.headers)).status == 200

    # Route limits count each client behind the proxy.
    assert (await client.get("/v1/_probe/limited", headers=xff("203.0.113.5"))).status == 200
    check = redis.asyncio.Redis.from_url(servers.redis_url)
    try:
        assert await check.exists("rl:probeLimited:ip:203.0.113.5") == 1
        assert await check.exists("rl:probeLimited:ip:127.0.0.1") == 0
        assert await check.exists("rl:auth-failed:ip:203.0.113.1") == 1
        assert await check.exists("rl:auth-failed:ip:127.0.0.1") == 0
    finally:
        await check.aclose()

    # The access log names the client.
    access_log.flush()
    lines = [json.loads(line) for line in access_log.stream.getvalue().splitlines()]
    clients = [line["client"] for line in lines]
    assert clients[:5] == ["203.0.113.1"] * 5
    assert clients[5:9] == ["203.0.113.2", "203.0.113.2", "203.0.113.3", "127.0.0.1"]


async def test_the_agent_key_audit_records_the_forwarded_client(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None
) -> None:
    client = await _app(aiohttp_client, servers, trusted_proxies="127.0.0.1")
    user = new_user()
    resp = await client.post(
        "/v1/api-keys", json={"name": "bot", "userId": str(user.user_id)}, headers=user.headers
    )
    assert resp.status == 201
    key = await resp.json()
    agent = {"x-agent-api-key": key["secret"]}
    assert (await client.get("/v1/auth/permissions", headers=xff("203.0.113.8", **agent))).ok
    assert (await client.get("/v1/auth/permissions", headers=agent)).ok
    audit = await client.get(f"/v1/api-keys/{key['id']}/audit", headers=user.headers)
    assert audit.status == 200
    items = (await audit.json())["items"]
    assert [i["clientAddress"] for i in items] == ["127.0.0.1", "203.0.113.8"]
