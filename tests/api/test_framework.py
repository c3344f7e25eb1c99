"""The generic request path: authentication, validation, errors, guards and rate limits."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import jwt

from marketplace.http import keys
from marketplace.http.routing import GUARD_HOOKS, ROUTES
from tests.conftest import JWT_SECRET, SCHEDULER_SECRET, bearer, make_token, new_user

# --- authentication -------------------------------------------------------------------------


async def test_session_token_is_accepted(probe_client: Any) -> None:
    user = new_user()
    resp = await probe_client.get("/v1/_probe/auth/either", headers=user.headers)
    assert resp.status == 200
    body = await resp.json()
    assert body["userId"] == str(user.user_id)
    assert body["kind"] == "session"


async def test_anonymous_is_refused_on_principal_routes(probe_client: Any) -> None:
    for mode in ("either", "session", "scheduler", "either_or_scheduler"):
        resp = await probe_client.get(f"/v1/_probe/auth/{mode}")
        assert resp.status == 401, mode
        body = await resp.json()
        assert body["error"] == "unauthorized"
        assert body["message"]


async def test_optional_and_public_routes_admit_anonymous(probe_client: Any) -> None:
    for mode in ("none", "optional"):
        resp = await probe_client.get(f"/v1/_probe/auth/{mode}")
        assert resp.status == 200
        assert (await resp.json())["userId"] is None


async def test_expired_token_is_refused(probe_client: Any) -> None:
    token = make_token(ttl=-120)
    resp = await probe_client.get("/v1/_probe/auth/either", headers=bearer(token))
    assert resp.status == 401
    assert "expired" in (await resp.json())["message"]


async def test_token_signed_with_another_key_is_refused(probe_client: Any) -> None:
    token = make_token(secret="some-other-secret-of-sufficient-length-123")
    resp = await probe_client.get("/v1/_probe/auth/either", headers=bearer(token))
    assert resp.status == 401
    assert (await resp.json())["error"] == "unauthorized"


async def test_bad_credentials_are_refused_even_where_auth_is_optional(probe_client: Any) -> None:
    resp = await probe_client.get("/v1/_probe/auth/optional", headers=bearer("not-a-jwt"))
    assert resp.status == 401
    resp = await probe_client.get("/v1/_probe/auth/optional", headers={"Authorization": "Basic x"})
    assert resp.status == 401


async def test_token_without_exp_or_with_non_uuid_subject_is_refused(probe_client: Any) -> None:
    no_exp = jwt.encode({"sub": str(uuid.uuid4())}, JWT_SECRET, algorithm="HS256")
    resp = await probe_client.get("/v1/_probe/auth/either", headers=bearer(no_exp))
    assert resp.status == 401
    now = int(time.time())
    bad_sub = jwt.encode({"sub": "alice", "iat": now, "exp": now + 60}, JWT_SECRET, "HS256")
    resp = await probe_client.get("/v1/_probe/auth/either", headers=bearer(bad_sub))
    assert resp.status == 401
    assert "uuid" in (await resp.json())["message"]


async def test_alg_none_token_is_refused(probe_client: Any) -> None:
    token = jwt.encode(
        {"sub": str(uuid.uuid4()), "exp": int(time.time()) + 60}, "", algorithm="none"
    )
    resp = await probe_client.get("/v1/_probe/auth/either", headers=bearer(token))
    assert resp.status == 401


async def test_unknown_agent_key_is_refused(probe_client: Any) -> None:
    resp = await probe_client.get(
        "/v1/_probe/auth/optional", headers={"x-agent-api-key": "mkt_live_nope"}
    )
    assert resp.status == 401


async def test_scheduler_token(probe_client: Any) -> None:
    resp = await probe_client.get("/v1/_probe/auth/scheduler", headers=bearer(SCHEDULER_SECRET))
    assert resp.status == 200
    assert (await resp.json())["scheduler"] is True
    resp = await probe_client.get(
        "/v1/_probe/auth/either_or_scheduler", headers=bearer(SCHEDULER_SECRET)
    )
    assert resp.status == 200
    # A session token is not the scheduler, and a near-miss secret is just a bad JWT.
    resp = await probe_client.get("/v1/_probe/auth/scheduler", headers=new_user().headers)
    assert resp.status == 401
    resp = await probe_client.get(
        "/v1/_probe/auth/scheduler", headers=bearer(SCHEDULER_SECRET[:-1] + "z")
    )
    assert resp.status == 401
    # The scheduler is not a user.
    resp = await probe_client.get("/v1/_probe/auth/either", headers=bearer(SCHEDULER_SECRET))
    assert resp.status == 401


class _FixedKeys:
    def __init__(self, mapping: dict[str, Any]) -> None:
        self.mapping = mapping

    async def resolve(self, secret: str) -> Any:
        return self.mapping.get(secret)


async def test_dual_principal_must_agree(
    aiohttp_client: Any, probe_settings: Any, ray_cluster: None, clean_state: None
) -> None:
    from marketplace.auth import ResolvedApiKey
    from marketplace.http.app import create_app
    from tests.api.probe import probe

    alice, bob = new_user(), new_user()
    key = ResolvedApiKey(key_id=uuid.uuid4(), user_id=alice.user_id, email_verified=True)
    app = create_app(probe_settings, extra_routes=[probe])
    app[keys.API_KEY_RESOLVER] = _FixedKeys({"alice-key": key})
    probe_client = await aiohttp_client(app)

    resp = await probe_client.get(
        "/v1/_probe/auth/either", headers={"x-agent-api-key": "alice-key"}
    )
    assert resp.status == 200
    assert (await resp.json())["kind"] == "agent_key"

    resp = await probe_client.get(
        "/v1/_probe/auth/either", headers={**alice.headers, "x-agent-api-key": "alice-key"}
    )
    assert resp.status == 200

    resp = await probe_client.get(
        "/v1/_probe/auth/either", headers={**bob.headers, "x-agent-api-key": "alice-key"}
    )
    assert resp.status == 401
    assert (await resp.json())["error"] == "principal_mismatch"

    # Agent keys cannot use session-only routes: authenticated, but not allowed.
    resp = await probe_client.get(
        "/v1/_probe/auth/session", headers={"x-agent-api-key": "alice-key"}
    )
    assert resp.status == 403
    assert (await resp.json())["error"] == "forbidden"


# --- validation and errors -------------------------------------------------------------------


async def test_valid_body_and_query_are_parsed(probe_client: Any) -> None:
    resp = await probe_client.post(
        "/v1/_probe/echo?limit=5&tags=a,b&tags=c&unknown=1",
        json={"name": "x", "count": 2, "wallet": "0x5fbdb2315678afecb367f032d93f642f64180aa3"},
    )
    assert resp.status == 200
    body = await resp.json()
    assert body["query"] == {"limit": 5, "tags": ["a", "b", "c"]}
    assert body["body"]["wallet"] == "0x5FbDB2315678afecb367f032d93F642f64180aa3"


async def test_validation_error_names_each_bad_field(probe_client: Any) -> None:
    resp = await probe_client.post(
        "/v1/_probe/echo?limit=0", json={"name": "", "count": -1, "extra": True}
    )
    assert resp.status == 400
    body = await resp.json()
    assert body["error"] == "invalid_request"
    assert {(d["location"], d["field"]) for d in body["details"]} == {("query", "limit")}
    resp = await probe_client.post("/v1/_probe/echo", json={"name": "", "count": -1, "extra": 1})
    body = await resp.json()
    assert {d["field"] for d in body["details"]} == {"name", "count", "extra"}
    assert all(d["location"] == "body" and d["message"] for d in body["details"])


async def test_body_that_is_not_json(probe_client: Any) -> None:
    for raw in (b"{not json", b"\xff\xfe", b"[1, 2]", b'"text"', b"null"):
        resp = await probe_client.post(
            "/v1/_probe/echo", data=raw, headers={"Content-Type": "application/json"}
        )
        assert resp.status == 400, raw
        assert (await resp.json())["error"] == "invalid_request"


async def test_missing_required_body(probe_client: Any) -> None:
    resp = await probe_client.post("/v1/_probe/echo")
    assert resp.status == 400
    fields = {d["field"] for d in (await resp.json())["details"]}
    assert fields == {"name", "count"}


async def test_oversize_body_is_json_413(probe_client: Any) -> None:
    resp = await probe_client.post(
        "/v1/_probe/echo",
        data=b'{"name": "' + b"a" * 5000 + b'"}',
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 413
    body = await resp.json()
    assert body["error"] == "payload_too_large"


async def test_unexpected_exception_is_500_without_details(probe_client: Any) -> None:
    resp = await probe_client.get("/v1/_probe/crash")
    assert resp.status == 500
    body = await resp.json()
    assert body["error"] == "internal_error"
    assert "secret internal detail" not in body["message"]
    assert "Traceback" not in body["message"]
    assert resp.headers["x-request-id"] in body["message"]


async def test_domain_error_carries_code_status_and_extra_fields(probe_client: Any) -> None:
    resp = await probe_client.get("/v1/_probe/domain-error")
    assert resp.status == 409
    assert await resp.json() == {"error": "boom", "message": "it went boom", "hint": "extra field"}


# --- guarded mutations -----------------------------------------------------------------------


async def test_guarded_route_needs_verified_email(probe_client: Any) -> None:
    unverified = new_user(email_verified=False)
    resp = await probe_client.post(
        "/v1/_probe/guarded", json={"name": "a", "count": 1}, headers=unverified.headers
    )
    assert resp.status == 403
    assert (await resp.json())["error"] == "email_not_verified"
    resp = await probe_client.post("/v1/_probe/guarded", json={"name": "a", "count": 1})
    assert resp.status == 401
    verified = new_user()
    resp = await probe_client.post(
        "/v1/_probe/guarded", json={"name": "a", "count": 1}, headers=verified.headers
    )
    assert resp.status == 200


async def test_guard_hooks_run_after_email_check_and_before_validation(
    probe_client: Any,
) -> None:
    seen: list[str] = []

    async def hook(call: Any) -> None:
        seen.append(call.route.name)

    probe_client.app[GUARD_HOOKS].append(hook)
    resp = await probe_client.post(
        "/v1/_probe/guarded", json={"bad": 1}, headers=new_user(email_verified=False).headers
    )
    assert resp.status == 403
    assert seen == []
    resp = await probe_client.post(
        "/v1/_probe/guarded", json={"bad": 1}, headers=new_user().headers
    )
    assert resp.status == 400
    assert seen == ["probeGuarded"]


# --- rate limits -------------------------------------------------------------------------------


async def test_rate_limit_is_per_route_and_caller_with_retry_after(probe_client: Any) -> None:
    alice, bob = new_user(), new_user()
    statuses = [
        (await probe_client.get("/v1/_probe/limited", headers=alice.headers)).status
        for _ in range(3)
    ]
    assert statuses == [200, 200, 200]
    resp = await probe_client.get("/v1/_probe/limited", headers=alice.headers)
    assert resp.status == 429
    assert (await resp.json())["error"] == "rate_limited"
    assert 1 <= int(resp.headers["Retry-After"]) <= 20
    # Another caller and another route are unaffected.
    assert (await probe_client.get("/v1/_probe/limited", headers=bob.headers)).status == 200
    assert (await probe_client.get("/v1/_probe/auth/either", headers=alice.headers)).status == 200


async def test_rate_limit_is_shared_across_frontends(
    probe_client: Any, aiohttp_client: Any, probe_settings: Any
) -> None:
    from marketplace.http.app import create_app
    from tests.api.probe import probe

    other_frontend = await aiohttp_client(create_app(probe_settings, extra_routes=[probe]))
    user = new_user()
    results = await asyncio.gather(
        *[
            client.get("/v1/_probe/limited", headers=user.headers)
            for client in (probe_client, other_frontend) * 3
        ]
    )
    assert sorted(r.status for r in results) == [200, 200, 200, 429, 429, 429]


async def test_the_app_serves_exactly_the_declared_capabilities(client: Any) -> None:
    from marketplace.http.capabilities import CAPABILITIES

    declared = [
        (route.method, route.path)
        for cap in CAPABILITIES
        for table in cap.routes
        for route in table.routes
    ]
    served = [(route.method, route.path) for route in client.app[ROUTES]]
    assert served[: len(declared)] == declared
    # The guards are installed from their declarations, in GuardSlot order, not by their modules.
    from marketplace.http.moderation_gate import moderation_suspension_guard
    from marketplace.http.routes.legal import legal_assent_guard

    assert client.app[GUARD_HOOKS] == [legal_assent_guard, moderation_suspension_guard]
