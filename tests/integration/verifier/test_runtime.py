"""The verifier runtime (`marketplace verifier serve`): `POST /v1/verify` runs one policy as a
Ray task on the cluster and answers `{passes, evidenceHash, evidence}`; the scheduler secret is
required; bad input is refused with the API's error shape.

Real components: the session's Ray runtime, an anvil devnet with the reference contracts (the
registry has code; a random address has none)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from eth_utils import keccak
from pydantic import SecretStr

from marketplace.config import Settings
from marketplace.devnet.deploy import Deployment
from marketplace.http.verifier_runtime import create_runtime_app
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
    async with TestClient(TestServer(create_runtime_app(runtime_settings))) as client:
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
    from marketplace.embedded.procs import free_port

    settings = make_settings(
        servers,
        chain_rpc_url=f"http://127.0.0.1:{free_port()}",
        registry_address=devnet[1].registry,
        scheduler_secret=SecretStr(SCHEDULER_SECRET),
    )
    async with TestClient(TestServer(create_runtime_app(settings))) as client:
        resp = await client.post(
            "/v1/verify",
            json={"checkPolicyId": "address-smoke", "deliveryRef": devnet[1].registry},
            headers=auth(),
        )
        assert resp.status == 503
        assert resp.headers["Retry-After"]
        assert (await resp.json())["error"] == "service_unavailable"
