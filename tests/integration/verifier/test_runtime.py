"""The verifier runtime (`marketplace verifier serve`): `POST /v1/verify` runs one policy as a
Ray task on the cluster and answers `{passes, evidenceHash, evidence}`; the scheduler secret is
required, and an address that spends its failed-secret budget (the API's, in the suite's Redis)
gets 429; bad input, unknown paths and wrong methods are refused with the API's error shape.

Real components: the session's Ray runtime, an anvil devnet with the reference contracts (the
registry has code; a random address has none)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient
from eth_utils import keccak
from pydantic import SecretStr

from marketplace.config import Settings
from marketplace.http.ratelimit import AUTH_FAILED
from marketplace.http.server import JsonErrorsTestServer
from marketplace.http.verifier_runtime import cmd_serve, create_runtime_app
from marketplace_devstack.devnet.deploy import Deployment
from tests.conftest import SCHEDULER_SECRET, Servers, make_settings
from tests.support.chain import start_devnet

pytestmark = pytest.mark.usefixtures("ray_cluster")


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Deployment]]:
    with start_devnet(tmp_path_factory.mktemp("runtime-devnet"), silent=True) as (anvil, chain):
        yield anvil.rpc_url, chain


@pytest.fixture
def runtime_settings(servers: Servers, devnet: tuple[str, Deployment]) -> Settings:
    rpc_url, chain = devnet
    return make_settings(
        servers,
        chain_rpc_url=rpc_url,
        registry_address=chain.registry,
        scheduler_secret=SecretStr(SCHEDULER_SECRET),
    )


@pytest.fixture
async def runtime(runtime_settings: Settings) -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(JsonErrorsTestServer(create_runtime_app(runtime_settings))) as client:
        yield client


def auth(secret: str = SCHEDULER_SECRET) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def test_a_contract_address_passes_and_its_evidence_hash_is_recomputable(
    runtime: TestClient[Any, Any], devnet: tuple[str, Deployment]
) -> None:
    _, chain = devnet
    resp = await runtime.post(
        "/v1/verify",
        json={"checkPolicyId": "address-smoke", "deliveryRef": chain.registry},
        headers=auth(),
    )
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["passes"] is True
    canonical = json.dumps(
        body["evidence"], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()
    assert body["evidenceHash"] == "0x" + keccak(canonical).hex()


async def test_an_address_without_code_fails(runtime: TestClient[Any, Any]) -> None:
    resp = await runtime.post(
        "/v1/verify",
        json={"checkPolicyId": "address-smoke", "deliveryRef": "0x" + os.urandom(20).hex()},
        headers=auth(),
    )
    assert resp.status == 200
    assert (await resp.json())["passes"] is False


@pytest.mark.parametrize(
    "headers", [{}, auth("wrong-" + SCHEDULER_SECRET), {"Authorization": "Basic eDp5"}]
)
async def test_the_scheduler_secret_is_required(
    runtime: TestClient[Any, Any], headers: dict[str, str]
) -> None:
    resp = await runtime.post(
        "/v1/verify",
        json={"checkPolicyId": "address-smoke", "deliveryRef": "0x" + "11" * 20},
        headers=headers,
    )
    assert resp.status == 401
    assert (await resp.json())["error"] == "unauthorized"


SMOKE = "address-smoke"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"checkPolicyId": SMOKE}, 400, "invalid_request"),
        ({"checkPolicyId": "llm-vibes", "deliveryRef": "x"}, 400, "invalid_request"),
        ({"checkPolicyId": SMOKE, "deliveryRef": "not-an-address"}, 400, "invalid_request"),
        ({"checkPolicyId": SMOKE, "deliveryRef": "0x" + "11" * 20, "x": 1}, 400, "invalid_request"),
        ({"checkPolicyId": SMOKE, "deliveryRef": "a" * 20_000}, 413, "payload_too_large"),
    ],
)
async def test_bad_bodies_are_refused(
    runtime: TestClient[Any, Any], body: dict[str, Any], status: int, code: str
) -> None:
    resp = await runtime.post("/v1/verify", json=body, headers=auth())
    assert resp.status == status
    answer = await resp.json()
    assert answer["error"] == code and answer["message"]


async def test_malformed_json_is_a_400(runtime: TestClient[Any, Any]) -> None:
    resp = await runtime.post("/v1/verify", data=b"{not json", headers=auth())
    assert resp.status == 400
    assert (await resp.json())["error"] == "invalid_request"


async def test_a_policy_without_tooling_is_refused(
    runtime: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """This process's tool probe runs with a PATH holding no tool (really absent, not faked):
    the git and test policies are not offered, and a request for one is refused."""
    from marketplace.verifier.policies.tooling import FORGE_BIN_ENV, probe

    monkeypatch.delenv(FORGE_BIN_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    probe.cache_clear()
    try:
        resp = await runtime.post(
            "/v1/verify",
            json={"checkPolicyId": "npm-test", "deliveryRef": "owner/repo@main"},
            headers=auth(),
        )
    finally:
        monkeypatch.undo()
        probe.cache_clear()
    assert resp.status == 409
    assert (await resp.json())["error"] == "policy_unavailable"


async def test_an_unreachable_chain_is_a_503_with_retry_after(
    servers: Servers, devnet: tuple[str, Deployment], tmp_path: Path
) -> None:
    from marketplace_devstack.embedded.procs import free_port

    settings = make_settings(
        servers,
        chain_rpc_url=f"http://127.0.0.1:{free_port()}",
        registry_address=devnet[1].registry,
        scheduler_secret=SecretStr(SCHEDULER_SECRET),
    )
    async with TestClient(JsonErrorsTestServer(create_runtime_app(settings))) as client:
        resp = await client.post(
            "/v1/verify",
            json={"checkPolicyId": "address-smoke", "deliveryRef": devnet[1].registry},
            headers=auth(),
        )
        assert resp.status == 503
        assert resp.headers["Retry-After"]
        assert (await resp.json())["error"] == "service_unavailable"


async def json_error(resp: Any, status: int) -> dict[str, Any]:
    """The API's error shape: JSON ``{error, message}`` with the given status."""
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    body: dict[str, Any] = await resp.json()
    assert isinstance(body["error"], str) and isinstance(body["message"], str) and body["message"]
    return body


async def test_unknown_paths_wrong_methods_and_bad_requests_answer_json(
    runtime: TestClient[Any, Any],
) -> None:
    for path in ("/", "/v1/verify/x", "/v1/verifier/jobs"):
        body = await json_error(await runtime.post(path, headers=auth()), 404)
        assert body["error"] == "not_found"
    for method in ("GET", "PUT", "DELETE"):
        resp = await runtime.request(method, "/v1/verify", headers=auth())
        assert (await json_error(resp, 405))["error"] == "method_not_allowed"
        assert resp.headers["Allow"] == "POST"
    # Refused by aiohttp's HTTP parser, before any middleware: JSON too (the API's server).
    resp = await runtime.post("/v1/verify", headers={**auth(), "X-Big": "x" * 10_000})
    assert (await json_error(resp, 431))["error"] == "request_header_fields_too_large"


AUTH_FAILURE_KEY = f"rl:{AUTH_FAILED}:ip:127.0.0.1"


@pytest.fixture
async def redis_client(servers: Servers) -> AsyncIterator[aioredis.Redis]:
    """The suite's Redis, with this address's failed-authentication record cleared before and
    after (the budget is shared with every other test's app on 127.0.0.1)."""
    client = aioredis.Redis.from_url(servers.redis_url)
    await client.delete(AUTH_FAILURE_KEY)
    yield client
    await client.delete(AUTH_FAILURE_KEY)
    await client.aclose()


BUDGET = 3
BAD_CREDENTIALS: list[dict[str, str]] = [
    {},
    auth("wrong-" + SCHEDULER_SECRET),
    {"Authorization": "Basic eDp5"},
]
# A correct secret with a body refused before any Ray work: 400 proves authentication passed.
CHEAP_BODY = {"checkPolicyId": SMOKE, "deliveryRef": "not-an-address"}


async def test_failed_secrets_lock_the_address_out_of_every_replica(
    runtime_settings: Settings, redis_client: aioredis.Redis
) -> None:
    """Wrong and missing secrets spend the address's budget; then every request from it gets
    429 with Retry-After, the right secret included, on this runtime and on a second replica:
    the budget is the API's, in Redis, not one process's."""
    settings = runtime_settings.model_copy(update={"rate_limit_auth_failures": f"{BUDGET}/60"})
    async with (
        TestClient(JsonErrorsTestServer(create_runtime_app(settings))) as first,
        TestClient(JsonErrorsTestServer(create_runtime_app(settings))) as second,
    ):
        for headers in BAD_CREDENTIALS:
            resp = await first.post("/v1/verify", json=CHEAP_BODY, headers=headers)
            assert (await json_error(resp, 401))["error"] == "unauthorized"
        assert await redis_client.exists(AUTH_FAILURE_KEY)
        for client in (first, second):
            for headers in [*BAD_CREDENTIALS, auth()]:
                resp = await client.post("/v1/verify", json=CHEAP_BODY, headers=headers)
                body = await json_error(resp, 429)
                assert body["error"] == "rate_limited", body
                assert "failed authentication" in body["message"]
                assert 1 <= int(resp.headers["Retry-After"]) <= 60
        # Other paths are not guarded by the secret: they neither spend nor check the budget.
        assert (await json_error(await second.post("/nope"), 404))["error"] == "not_found"


async def test_the_right_secret_spends_nothing(
    runtime_settings: Settings, redis_client: aioredis.Redis
) -> None:
    """Attempts counted in advance while failures are on record are given back when the secret
    is right, so the scheduler's own traffic never locks its address out."""
    settings = runtime_settings.model_copy(update={"rate_limit_auth_failures": f"{BUDGET}/60"})
    async with TestClient(JsonErrorsTestServer(create_runtime_app(settings))) as client:
        for headers in BAD_CREDENTIALS[: BUDGET - 1]:
            resp = await client.post("/v1/verify", json=CHEAP_BODY, headers=headers)
            assert resp.status == 401
        for _ in range(10):
            resp = await client.post("/v1/verify", json=CHEAP_BODY, headers=auth())
            assert (await json_error(resp, 400))["error"] == "invalid_request"
        # The budget's last failure is still there, and then it is spent.
        resp = await client.post("/v1/verify", json=CHEAP_BODY, headers=BAD_CREDENTIALS[0])
        assert resp.status == 401
        resp = await client.post("/v1/verify", json=CHEAP_BODY, headers=auth())
        assert (await json_error(resp, 429))["error"] == "rate_limited"


async def test_the_runtime_needs_redis_unless_rate_limits_are_off(
    runtime_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_redis = runtime_settings.model_copy(update={"redis_url": ""})
    with pytest.raises(ValueError, match="redis_url"):
        create_runtime_app(without_redis)
    # The command says so before it touches Ray (its logging setup would replace pytest's).
    monkeypatch.setattr("marketplace.http.verifier_runtime.configure_logging", lambda *a: None)
    monkeypatch.setenv("MARKETPLACE_SCHEDULER_SECRET", SCHEDULER_SECRET)
    monkeypatch.setenv("MARKETPLACE_REDIS_URL", "")
    assert cmd_serve(argparse.Namespace(host=None, port=None)) == 2
    # With rate limits off there is no budget to keep: no Redis, and no lockout either.
    unlimited = without_redis.model_copy(update={"rate_limit_enabled": False})
    async with TestClient(JsonErrorsTestServer(create_runtime_app(unlimited))) as client:
        for _ in range(5):
            resp = await client.post("/v1/verify", json=CHEAP_BODY, headers=BAD_CREDENTIALS[1])
            assert resp.status == 401
        resp = await client.post("/v1/verify", json=CHEAP_BODY, headers=auth())
        assert resp.status == 400
