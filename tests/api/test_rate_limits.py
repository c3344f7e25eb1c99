"""Failed authentication counts against the client address, the limiter keeps limiting (per
process) while Redis is down, and rate-limited responses carry the limit's state in headers."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio

from marketplace.gcra import REDIS_RETRY_SECONDS
from marketplace_devstack.embedded.redis import EmbeddedRedis
from tests.api.probe import probe
from tests.conftest import SCHEDULER_SECRET, Servers, bearer, make_settings, new_user

EITHER = "/v1/_probe/auth/either"
BAD_CREDENTIALS = [
    bearer("not-a-jwt"),
    {"x-agent-api-key": "mkt_live_" + "x" * 49},
    bearer(SCHEDULER_SECRET[:-1] + "z"),
    {"Authorization": "Basic dXNlcjpwYXNz"},
    bearer(new_user().token[:-2] + "xx"),
]


async def _app_client(aiohttp_client: Any, servers: Servers, **overrides: Any) -> Any:
    from marketplace.http.app import create_app

    return await aiohttp_client(
        create_app(make_settings(servers, **overrides), extra_routes=[probe])
    )


async def _agent_key(client: Any) -> dict[str, str]:
    owner = new_user()
    resp = await client.post(
        "/v1/api-keys", json={"name": "bot", "userId": str(owner.user_id)}, headers=owner.headers
    )
    assert resp.status == 201, await resp.text()
    return {"x-agent-api-key": (await resp.json())["secret"]}


@pytest.fixture
async def other_address() -> AsyncIterator[aiohttp.ClientSession]:
    """A client connecting from 127.0.0.2: another client address on the same machine."""
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0)))
    yield session
    await session.close()


async def test_failed_authentications_block_the_address_even_for_valid_credentials(
    aiohttp_client: Any,
    servers: Servers,
    ray_cluster: None,
    clean_state: None,
    other_address: aiohttp.ClientSession,
) -> None:
    client = await _app_client(aiohttp_client, servers, rate_limit_auth_failures="5/60")
    key = await _agent_key(client)
    user = new_user()

    for headers in BAD_CREDENTIALS:
        resp = await client.get(EITHER, headers=headers)
        assert resp.status == 401, await resp.text()

    # The budget (5 per 60 s) is spent: the next guess is not even checked...
    resp = await client.get(EITHER, headers=BAD_CREDENTIALS[1])
    assert resp.status == 429
    body = await resp.json()
    assert body["error"] == "rate_limited"
    assert "failed authentication" in body["message"]
    assert 1 <= int(resp.headers["Retry-After"]) <= 12
    # ... and neither are valid credentials from the same address, on any route.
    for headers in (key, user.headers, bearer(SCHEDULER_SECRET)):
        resp = await client.get("/v1/_probe/auth/optional", headers=headers)
        assert resp.status == 429, headers
        assert (await resp.json())["error"] == "rate_limited"
    # Anonymous requests present nothing to guess with and are served.
    assert (await client.get("/v1/_probe/auth/none")).status == 200
    assert (await client.get("/v1/_probe/auth/optional")).status == 200

    # Another frontend on the same Redis knows the address is blocked.
    second = await _app_client(aiohttp_client, servers, rate_limit_auth_failures="5/60")
    assert (await second.get(EITHER, headers=key)).status == 429

    # Another address is unaffected: valid credentials work, a bad one is a plain 401.
    url = str(client.make_url(EITHER))
    async with other_address.get(url, headers=key) as resp:
        assert resp.status == 200
        assert (await resp.json())["kind"] == "agent_key"
    async with other_address.get(url, headers=user.headers) as resp:
        assert resp.status == 200
    async with other_address.get(url, headers=BAD_CREDENTIALS[0]) as resp:
        assert resp.status == 401


async def test_concurrent_guesses_get_no_more_checks_than_the_budget(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None
) -> None:
    # 30 requests share the test's event loop with the app, so on a loaded machine a Redis
    # answer can take over the default 1 s to be seen; this test is about the shared count, not
    # about the per-process fallback (tested below), so it gives Redis all the time it needs.
    client = await _app_client(
        aiohttp_client,
        servers,
        rate_limit_auth_failures="5/60",
        rate_limit_redis_timeout_ms=30_000,
    )
    assert (await client.get(EITHER, headers=BAD_CREDENTIALS[0])).status == 401
    # With a failure on record every attempt is counted before it is checked, so a volley of
    # guesses fired at once is cut at the remaining budget (4), not after the fact.
    results = await asyncio.gather(
        *(client.get(EITHER, headers={"x-agent-api-key": f"mkt_live_guess{i}"}) for i in range(30))
    )
    statuses = sorted(r.status for r in results)
    assert statuses == [401] * 4 + [429] * 26


async def test_valid_requests_do_not_spend_the_failure_budget(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None
) -> None:
    client = await _app_client(aiohttp_client, servers, rate_limit_auth_failures="5/60")
    user = new_user()
    for headers in BAD_CREDENTIALS[:2]:
        assert (await client.get(EITHER, headers=headers)).status == 401
    # Counted in advance (failures are on record) and given back once they verify.
    for _ in range(10):
        assert (await client.get(EITHER, headers=user.headers)).status == 200
    for headers in BAD_CREDENTIALS[2:]:
        assert (await client.get(EITHER, headers=headers)).status == 401
    assert (await client.get(EITHER, headers=user.headers)).status == 429


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    assert match is not None, name
    return float(match.group(1))


async def test_limits_hold_per_process_while_redis_is_down(
    aiohttp_client: Any,
    servers: Servers,
    ray_cluster: None,
    clean_state: None,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from marketplace.http.app import create_app

    # A Redis of this test's own: the session's shared one is never stopped.
    own_redis = EmbeddedRedis(tmp_path)
    own_redis.start()
    try:
        settings = make_settings(
            servers,
            redis_url=own_redis.url,
            rate_limits={"probeLimited": "3/60"},
            rate_limit_auth_failures="2/60",
        )
        client = await aiohttp_client(create_app(settings, extra_routes=[probe]))
        user = new_user()
        before = _metric(
            await (await client.get("/metrics")).text(), "marketplace_rate_limiter_fallback_total"
        )
        own_redis.stop()
        caplog.set_level(logging.WARNING, logger="marketplace.gcra")

        # The per-route limit still holds, from this process's memory.
        statuses = [
            (await client.get("/v1/_probe/limited", headers=user.headers)).status for _ in range(5)
        ]
        assert statuses == [200, 200, 200, 429, 429]
        resp = await client.get("/v1/_probe/limited", headers=user.headers)
        assert resp.status == 429
        assert int(resp.headers["Retry-After"]) >= 1
        # So does the failed-authentication limit.
        statuses = [(await client.get(EITHER, headers=BAD_CREDENTIALS[0])).status for _ in range(3)]
        assert statuses == [401, 401, 429]
        assert (await client.get("/v1/_probe/auth/none")).status == 200

        text = await (await client.get("/metrics")).text()
        assert _metric(text, "marketplace_rate_limiter_fallback_active") == 1.0
        assert _metric(text, "marketplace_rate_limiter_fallback_total") >= before + 9
        # One warning for the outage, not one per request.
        warnings = [r for r in caplog.records if "enforcing limits per process" in r.getMessage()]
        assert len(warnings) == 1

        # Redis back: after the retry interval the limiter uses it again (and says so).
        restarted = EmbeddedRedis(tmp_path, port=own_redis.port)
        restarted.start()
        try:
            await asyncio.sleep(REDIS_RETRY_SECONDS + 0.1)
            deadline = asyncio.get_running_loop().time() + 10
            while True:
                resp = await client.get("/v1/_probe/limited", headers=new_user().headers)
                text = await (await client.get("/metrics")).text()
                if _metric(text, "marketplace_rate_limiter_fallback_active") == 0.0:
                    break
                assert asyncio.get_running_loop().time() < deadline, "limiter stayed local"
                await asyncio.sleep(REDIS_RETRY_SECONDS)
            assert resp.status == 200
            assert any("Redis answers again" in r.getMessage() for r in caplog.records)
            # Shared again: a fresh caller's counts land in the restarted Redis.
            fresh = new_user()
            await client.get("/v1/_probe/limited", headers=fresh.headers)
            check = redis.asyncio.Redis.from_url(restarted.url)
            try:
                assert await check.exists(f"rl:probeLimited:u:{fresh.user_id}") == 1
            finally:
                await check.aclose()
        finally:
            restarted.stop()
    finally:
        own_redis.stop()


async def test_an_unreachable_key_set_is_a_503_not_a_failed_login(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None
) -> None:
    import jwt

    from marketplace_devstack.embedded.procs import free_port

    client = await _app_client(
        aiohttp_client,
        servers,
        jwt_secret=None,
        jwks_url=f"http://127.0.0.1:{free_port()}/jwks.json",  # nothing listens there
        rate_limit_auth_failures="2/60",
    )
    token = jwt.encode({"sub": str(new_user().user_id)}, "k" * 32, headers={"kid": "key-1"})
    for _ in range(4):
        resp = await client.get(EITHER, headers=bearer(token))
        assert resp.status == 503
        body = await resp.json()
        assert body["error"] == "service_unavailable"
        assert "127.0.0.1" not in body["message"] and "jwks" not in body["message"]
    # Our outage spent none of the caller's failure budget.
    assert (await client.get(EITHER, headers=BAD_CREDENTIALS[0])).status == 401


async def test_the_fallback_runs_the_same_algorithm_as_the_redis_script(
    servers: Servers, clean_state: None
) -> None:
    from marketplace.gcra import Gcra, LocalGcra, Rate

    client = redis.asyncio.Redis.from_url(servers.redis_url)
    shared, local = Gcra(client), LocalGcra()
    rate = Rate(3, 60)
    script = [
        ("hit", "a"), ("hit", "a"), ("hit", "a"), ("hit", "a"),  # burst of 3, then refused
        ("try", "b"), ("try", "b"),  # nothing on record: allowed, not counted
        ("hit", "b"), ("try", "b"), ("try", "b"), ("try", "b"),  # counted in advance, then spent
        ("refund", "b"), ("try", "b"), ("refund", "b"), ("refund", "b"), ("refund", "b"),
        ("try", "b"),  # all given back: nothing on record again
    ]  # fmt: skip
    try:
        for op, key in script:
            if op == "refund":
                await shared.refund(key, rate)
                local.run(key, rate, "refund")
                continue
            remote = await (shared.hit(key, rate) if op == "hit" else shared.attempt(key, rate))
            here = local.run(key, rate, op)
            assert (remote.allowed, remote.recorded) == (here.allowed, here.recorded), (op, key)
            assert remote.remaining == here.remaining, (op, key)
            assert abs(remote.reset_ms - here.reset_ms) < 500, (op, key)
            if not remote.allowed:
                # Both say "one emission interval" (20 s for 3 per 60 s), give or take clocks.
                assert abs(remote.wait_ms - here.wait_ms) < 500
                assert 19_000 < remote.wait_ms <= 20_000
        assert not shared.in_fallback
        # "b" had every counted request given back: neither side keeps anything for it.
        assert await client.exists("a") == 1 and await client.exists("b") == 0
        assert len(local) == 1
    finally:
        await client.aclose()


# --- rate-limit headers ----------------------------------------------------------------------


def _limit_headers(resp: Any) -> tuple[int, int, int, str]:
    return (
        int(resp.headers["RateLimit-Limit"]),
        int(resp.headers["RateLimit-Remaining"]),
        int(resp.headers["RateLimit-Reset"]),
        resp.headers["RateLimit-Policy"],
    )


async def test_rate_limited_responses_carry_the_limit_state(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None
) -> None:
    client = await _app_client(aiohttp_client, servers, rate_limits={"probeLimited": "3/60"})
    user = new_user()
    seen = []
    for _ in range(3):
        resp = await client.get("/v1/_probe/limited", headers=user.headers)
        assert resp.status == 200
        seen.append(_limit_headers(resp))
    # One request every 20 s restores one: the full burst is back 20 s per request spent.
    assert [(limit, left, policy) for limit, left, _, policy in seen] == [
        (3, 2, "3;w=60"),
        (3, 1, "3;w=60"),
        (3, 0, "3;w=60"),
    ]
    resets = [reset for _, _, reset, _ in seen]
    assert 19 <= resets[0] <= 20 and 39 <= resets[1] <= 40 and 59 <= resets[2] <= 60

    refused = await client.get("/v1/_probe/limited", headers=user.headers)
    assert refused.status == 429
    assert (await refused.json())["error"] == "rate_limited"
    limit, left, reset, policy = _limit_headers(refused)
    assert (limit, left, policy) == (3, 0, "3;w=60")
    assert 59 <= reset <= 60
    assert 19 <= int(refused.headers["Retry-After"]) <= 20

    # Each caller has its own count; an anonymous caller is counted by address.
    other = await client.get("/v1/_probe/limited", headers=new_user().headers)
    assert _limit_headers(other)[1] == 2
    anonymous = await client.get("/v1/_probe/limited")
    assert _limit_headers(anonymous)[:2] == (3, 2)
    # The default limit applies to routes without their own; a route that is not rate-limited,
    # and a scheduler call, carry no such header.
    echo = await client.post("/v1/_probe/echo", json={"name": "a", "count": 1})
    assert echo.status == 200
    assert echo.headers["RateLimit-Policy"] == "10000;w=60"
    stream = await client.get("/v1/_probe/stream?limit=1")
    assert "RateLimit-Limit" not in stream.headers
    scheduler = await client.get("/v1/_probe/limited", headers=bearer(SCHEDULER_SECRET))
    assert scheduler.status == 200 and "RateLimit-Limit" not in scheduler.headers
    # Errors after the limit was counted carry them too (here, body validation).
    invalid = await client.post("/v1/_probe/echo", json={"name": "", "count": 1})
    assert invalid.status == 400 and invalid.headers["RateLimit-Limit"] == "10000"


async def test_disabled_limits_send_no_headers(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None
) -> None:
    client = await _app_client(aiohttp_client, servers, rate_limit_enabled=False)
    resp = await client.get("/v1/_probe/limited", headers=new_user().headers)
    assert resp.status == 200 and "RateLimit-Limit" not in resp.headers


def test_the_fallback_reports_the_same_state_as_the_script() -> None:
    from marketplace.gcra import LocalGcra, Rate

    now = [1000.0]
    local = LocalGcra(clock=lambda: now[0])
    rate = Rate(3, 60)
    verdicts = [local.run("k", rate, "hit") for _ in range(4)]
    assert [(v.allowed, v.remaining, v.reset_ms) for v in verdicts] == [
        (True, 2, 20_000),
        (True, 1, 40_000),
        (True, 0, 60_000),
        (False, 0, 60_000),
    ]
    assert verdicts[3].wait_ms == 20_000
    now[0] += 30  # one and a half emission intervals later: one request back, half-way to two
    verdict = local.run("k", rate, "hit")
    assert (verdict.allowed, verdict.remaining, verdict.reset_ms) == (True, 0, 50_000)


async def test_the_event_stream_sends_the_headers_in_its_head(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None
) -> None:
    from tests.api.stream.conftest import streaming

    client = await _app_client(aiohttp_client, servers, rate_limits={"openEventStream": "5/60"})
    async with streaming(client, new_user().headers) as reader:
        limit, left, reset, policy = _limit_headers(reader.resp)
        assert (limit, left, policy) == (5, 4, "5;w=60")
        assert 11 <= reset <= 12
