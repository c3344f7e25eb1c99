"""Browsers on other origins (marketplace/http/cors.py, docs/security.md "Browsers (CORS)"):
preflights and grants for the origins of MARKETPLACE_CORS_ORIGINS, nothing for any other origin,
and no CORS header at all when none is listed. A real Chromium is in tests/browser/."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from marketplace.http.cors import (
    ALLOWED_REQUEST_HEADERS,
    EXPOSED_RESPONSE_HEADERS,
    PREFLIGHT_MAX_AGE_SECONDS,
)
from marketplace.http.keys import SETTINGS
from marketplace.http.routes.system import DOCS_STATIC_PREFIX
from marketplace.http.routing import ROUTES, RouteTable
from tests.api.probe import probe
from tests.conftest import make_token, new_user
from tests.support.apps import AppFactory

APP = "https://app.example.com"
LOCAL = "http://localhost:5173"
ORIGINS = f"{APP}, {LOCAL}"
STRANGER = "https://evil.example.net"
CLIENT_HEADERS = (
    "authorization",
    "x-agent-api-key",
    "x-user-wallet-address",
    "idempotency-key",
    "last-event-id",
    "content-type",
)
ADDRESS = "0x" + "ab" * 20
# (path, method) of routes of every family and method, most of them needing credentials.
PREFLIGHTS = (
    ("/v1/projects", "GET"),
    ("/v1/auth/permissions", "GET"),
    ("/v1/projects/create-intents", "POST"),
    (f"/v1/projects/{ADDRESS}/chat/messages", "POST"),
    ("/v1/username", "PUT"),
    ("/v1/notifications/preferences", "PUT"),
    (f"/v1/messages/block/{uuid.uuid4()}", "DELETE"),
    (f"/v1/wallet-links/{ADDRESS}", "DELETE"),
    (f"/v1/projects/{ADDRESS}/metadata", "PATCH"),
    ("/v1/stream", "GET"),
    ("/v1/stream/tickets", "POST"),
)
ACA = "access-control-allow-"


@pytest.fixture
def app_routes() -> Sequence[RouteTable]:
    return [probe]


def listed(value: str) -> list[str]:
    return [part.strip().lower() for part in value.split(",") if part.strip()]


def cors_headers(resp: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in resp.headers.items() if k.lower().startswith("access-control")}


async def preflight(
    client: Any, path: str, method: str, origin: str = APP, headers: Sequence[str] = CLIENT_HEADERS
) -> Any:
    sent = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        sent["Access-Control-Request-Headers"] = ",".join(headers)
    return await client.options(path, headers=sent)


def assert_granted(resp: Any, origin: str = APP) -> None:
    assert resp.headers.get("Access-Control-Allow-Origin") == origin, dict(resp.headers)
    assert "origin" in listed(resp.headers.get("Vary", ""))
    assert "Access-Control-Allow-Credentials" not in resp.headers
    exposed = listed(resp.headers.get("Access-Control-Expose-Headers", ""))
    assert sorted(exposed) == sorted(h.lower() for h in EXPOSED_RESPONSE_HEADERS)
    for header in (
        "x-request-id",
        "retry-after",
        "location",
        "idempotent-replayed",
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "ratelimit-policy",
    ):
        assert header in exposed, header


def assert_not_granted(resp: Any) -> None:
    assert cors_headers(resp) == {}, dict(resp.headers)
    # Still marked as depending on Origin, so a shared cache keeps answers per origin.
    assert "origin" in listed(resp.headers.get("Vary", ""))


async def test_no_origins_listed_means_no_cors_headers_at_all(client: Any) -> None:
    """The default: no grant, no Vary, and OPTIONS answered as any unserved method (405)."""
    assert client.app[SETTINGS].cors_origin_list == []
    assert not [r for r in client.app.router.routes() if r.method == "OPTIONS"]
    user = new_user()
    for method, path, headers in (
        ("GET", "/v1/projects", {}),
        ("GET", "/v1/auth/permissions", {}),
        ("GET", "/v1/auth/permissions", user.headers),
        ("GET", "/v1/no-such-route", {}),
        ("DELETE", "/v1/projects", {}),
    ):
        resp = await client.request(method, path, headers={"Origin": APP, **headers})
        await resp.read()
        assert cors_headers(resp) == {}, (method, path)
        assert "origin" not in listed(resp.headers.get("Vary", "")), (method, path)
    resp = await preflight(client, "/v1/projects", "GET")
    assert resp.status == 405
    assert (await resp.json())["error"] == "method_not_allowed"
    assert resp.headers["Allow"] == "GET"
    assert cors_headers(resp) == {}
    resp = await preflight(client, "/v1/no-such-route", "GET")
    assert resp.status == 404
    assert cors_headers(resp) == {}


async def test_preflight_of_a_listed_origin_is_granted_on_every_route_without_credentials(
    make_client: AppFactory,
) -> None:
    client = await make_client(cors_origins=ORIGINS)
    for path, method in PREFLIGHTS:
        for origin in (APP, LOCAL):
            resp = await preflight(client, path, method, origin)
            assert resp.status == 204, (path, method, resp.status, await resp.text())
            assert await resp.read() == b""
            assert resp.headers["Access-Control-Allow-Origin"] == origin
            methods = listed(resp.headers["Access-Control-Allow-Methods"])
            assert method.lower() in methods, (path, method, methods)
            allowed = listed(resp.headers["Access-Control-Allow-Headers"])
            assert set(CLIENT_HEADERS) <= set(allowed), (path, allowed)
            assert resp.headers["Access-Control-Max-Age"] == str(PREFLIGHT_MAX_AGE_SECONDS)
            assert "origin" in listed(resp.headers["Vary"])
            assert "Access-Control-Allow-Credentials" not in resp.headers
            assert "*" not in resp.headers.values()
            assert resp.headers["x-request-id"]
    # The methods offered are the path's own: a path with GET and PUT offers both, and no other.
    resp = await preflight(client, "/v1/username", "PUT")
    assert listed(resp.headers["Access-Control-Allow-Methods"]) == ["get", "put"]
    resp = await preflight(client, f"/v1/projects/{ADDRESS}/metadata", "DELETE")
    assert resp.status == 204  # answered; the browser then refuses DELETE, which is not offered
    assert listed(resp.headers["Access-Control-Allow-Methods"]) == ["patch"]
    # Every header the routes read, and nothing else, whatever the browser asks for.
    resp = await preflight(client, "/v1/projects", "GET", headers=["x-forbidden-thing"])
    assert sorted(listed(resp.headers["Access-Control-Allow-Headers"])) == sorted(
        h.lower() for h in ALLOWED_REQUEST_HEADERS
    )


async def test_every_declared_route_and_method_has_its_preflight(make_client: AppFactory) -> None:
    client = await make_client(cors_origins=APP)
    routes = client.app[ROUTES]
    assert len(routes) > 50
    for route in routes:
        path = re.sub(r"\{[^}]+\}", "x1", route.path)
        resp = await preflight(client, path, route.method)
        assert resp.status == 204, (route.method, route.path, resp.status)
        offered = listed(resp.headers["Access-Control-Allow-Methods"])
        assert route.method.lower() in offered
        # Exactly what the router serves at that URL, as a 405 lists it (several routes, some
        # with variables, may match one URL).
        refused = await client.request("TRACE", path)
        assert refused.status == 405
        assert set(listed(refused.headers["Allow"])) - {"options"} == set(offered), path
    # One preflight route per path, however many methods the path has.
    options = [r for r in client.app.router.routes() if r.method == "OPTIONS"]
    assert len(options) == len({r.path for r in routes} | {DOCS_STATIC_PREFIX + "/{bundle}/{name}"})


async def test_preflight_from_another_origin_or_without_a_method_is_not_granted(
    make_client: AppFactory,
) -> None:
    client = await make_client(cors_origins=ORIGINS)
    for path, method in PREFLIGHTS[:4]:
        resp = await preflight(client, path, method, STRANGER)
        # As without CORS: OPTIONS is not a method of the route.
        assert resp.status == 405, path
        assert (await resp.json())["error"] == "method_not_allowed"
        assert "OPTIONS" not in resp.headers["Allow"]
        assert_not_granted(resp)
    # The origin compared exactly: another scheme, port or case is another origin.
    for origin in ("http://app.example.com", "https://app.example.com:8443", "null"):
        resp = await preflight(client, "/v1/projects", "GET", origin)
        assert resp.status == 405, origin
        assert_not_granted(resp)
    # OPTIONS without Access-Control-Request-Method is no preflight: the usual 405, which a
    # listed origin may read like any other error.
    resp = await client.options("/v1/projects", headers={"Origin": APP})
    assert resp.status == 405
    assert resp.headers["Allow"] == "GET"
    assert_granted(resp)
    resp = await client.options("/v1/projects")
    assert resp.status == 405
    assert "Access-Control-Allow-Origin" not in resp.headers


async def test_preflight_of_an_unknown_path_is_a_404(make_client: AppFactory) -> None:
    client = await make_client(cors_origins=ORIGINS)
    resp = await preflight(client, "/v1/no-such-route", "GET")
    assert resp.status == 404
    assert (await resp.json())["error"] == "not_found"
    assert "Access-Control-Allow-Methods" not in resp.headers  # the browser's check fails


async def test_responses_to_a_listed_origin_carry_the_grant_errors_included(
    make_client: AppFactory,
) -> None:
    client = await make_client(cors_origins=ORIGINS)
    user = new_user()
    as_json = {**user.headers, "Content-Type": "application/json"}
    metadata = f"/v1/projects/{ADDRESS}/metadata"
    cases: list[tuple[str, str, dict[str, str], bytes | None, int]] = [
        ("GET", "/v1/projects", {}, None, 200),
        ("GET", "/v1/auth/permissions", user.headers, None, 200),
        ("POST", "/v1/projects/create-intents", user.headers, None, 201),
        ("GET", "/v1/auth/permissions", {}, None, 401),
        ("GET", "/v1/auth/permissions", {"Authorization": "Bearer nonsense"}, None, 401),
        ("POST", "/v1/projects/create-intents", as_json, b"[", 400),
        ("POST", "/v1/projects/create-intents", {**user.headers, "Content-Type": "a/b"}, b"x", 415),
        ("PATCH", metadata, as_json, b'{"title": "t"}', 404),
        ("GET", "/v1/no-such-route", {}, None, 404),
        ("DELETE", "/v1/projects", {}, None, 405),
        ("GET", "/v1/_probe/crash", {}, None, 500),
        ("GET", "/v1/_probe/domain-error", {}, None, 409),
    ]
    for method, path, headers, body, status in cases:
        for origin in (APP, LOCAL):
            resp = await client.request(
                method, path, data=body, headers={"Origin": origin, **headers}
            )
            assert resp.status == status, (method, path, await resp.text())
            assert_granted(resp, origin)
            if status >= 400:
                assert (await resp.json())["error"]
        resp = await client.request(
            method, path, data=body, headers={"Origin": STRANGER, **headers}
        )
        assert resp.status == status, (method, path)
        assert_not_granted(resp)
        # Not a browser: no Origin, no grant (but the answer still varies by Origin).
        resp = await client.request(method, path, data=body, headers=headers)
        assert resp.status == status, (method, path)
        assert_not_granted(resp)


async def test_streams_carry_the_grant(make_client: AppFactory) -> None:
    client = await make_client(cors_origins=ORIGINS)
    resp = await client.get("/v1/_probe/stream?limit=2", headers={"Origin": APP})
    assert resp.status == 200
    assert_granted(resp)
    assert (await resp.read()).count(b"data:") == 2
    user = new_user()
    resp = await client.get("/v1/stream", headers={"Origin": APP, **user.headers})
    try:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert_granted(resp)
    finally:
        resp.close()
    resp = await client.get("/v1/stream", headers={"Origin": STRANGER, **user.headers})
    try:
        assert resp.status == 200
        assert_not_granted(resp)
    finally:
        resp.close()


async def test_preflights_spend_neither_rate_limits_nor_the_failed_authentication_budget(
    make_client: AppFactory,
) -> None:
    client = await make_client(
        cors_origins=ORIGINS,
        rate_limits={"getPermissions": "3/60"},
        rate_limit_auth_failures="2/60",
    )
    user = new_user()
    path = "/v1/auth/permissions"
    for _ in range(10):
        assert (await preflight(client, path, "GET")).status == 204
    # All three requests of the budget are left after ten preflights.
    for _ in range(3):
        resp = await client.get(path, headers={"Origin": APP, **user.headers})
        assert resp.status == 200, await resp.text()
    resp = await client.get(path, headers={"Origin": APP, **user.headers})
    assert resp.status == 429
    assert (await resp.json())["error"] == "rate_limited"
    assert int(resp.headers["Retry-After"]) >= 1
    assert_granted(resp)  # the page can read the 429 and its Retry-After
    # The failed-authentication budget spent: requests with credentials get 429, preflights of
    # the same client address are still answered.
    bad = {"Authorization": f"Bearer {make_token(secret='not-the-secret-of-this-app-0123456789')}"}
    statuses = [(await client.get(path, headers={"Origin": APP, **bad})).status for _ in range(3)]
    assert statuses == [401, 401, 429]
    assert (await preflight(client, path, "GET")).status == 204
    assert (await preflight(client, "/v1/projects/create-intents", "POST")).status == 204
