"""Helpers of the identity API tests: wallets, keys and a guarded probe route the suite's apps
serve."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest
from eth_account import Account
from eth_account.messages import encode_defunct
from pydantic import Field

from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.types import RequestModel, ResponseModel
from tests.conftest import Servers, User

guarded_probe = RouteTable(tag="identity-probe")
GUARDED_PATH = "/v1/_identity_probe/guarded"
GUARDED_ROUTE = f"POST {GUARDED_PATH}"


class ProbeBody(RequestModel):
    value: int = Field(ge=0)


class ProbeResult(ResponseModel):
    """What the guarded probe saw."""

    userId: str
    value: int


@guarded_probe.post(
    GUARDED_PATH,
    name="identityProbeGuarded",
    summary="a guarded mutation for tests",
    auth=AuthMode.EITHER,
    response=ProbeResult,
    body=ProbeBody,
    guarded=True,
)
async def probe_guarded(call: Call[ProbeBody, None, None]) -> ProbeResult:
    return ProbeResult(userId=str(call.require_principal().user_id), value=call.body.value)


@pytest.fixture
def app_routes() -> list[RouteTable]:
    """The suite's apps (``client``, ``make_client``) serve the guarded probe route too."""
    return [guarded_probe]


@pytest.fixture
async def db(servers: Servers) -> Any:
    conn = await asyncpg.connect(servers.database_url)
    try:
        yield conn
    finally:
        await conn.close()


class Wallet:
    def __init__(self) -> None:
        self.account = Account.create()

    @property
    def address(self) -> str:
        return str(self.account.address)

    def sign(self, message: str) -> str:
        signed = self.account.sign_message(encode_defunct(text=message))
        return signed.signature.to_0x_hex()


def agent(secret: str) -> dict[str, str]:
    return {"x-agent-api-key": secret}


async def create_key(client: Any, user: User, name: str = "agent") -> dict[str, Any]:
    resp = await client.post(
        "/v1/api-keys", json={"name": name, "userId": str(user.user_id)}, headers=user.headers
    )
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def challenge(
    client: Any, user_headers: dict[str, str], wallet: str, chain_id: int = 31337
) -> dict[str, Any]:
    resp = await client.post(
        "/v1/wallet-links/challenge",
        json={"walletAddress": wallet, "chainId": chain_id},
        headers=user_headers,
    )
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def link_wallet(client: Any, user_headers: dict[str, str], wallet: Wallet) -> dict[str, Any]:
    issued = await challenge(client, user_headers, wallet.address)
    resp = await client.post(
        "/v1/wallet-links/verify",
        json={
            "challengeId": issued["challengeId"],
            "walletAddress": wallet.address,
            "signature": wallet.sign(issued["message"]),
        },
        headers=user_headers,
    )
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def error_of(resp: Any, status: int) -> str:
    body = await resp.json()
    assert resp.status == status, body
    assert body["message"]
    return str(body["error"])


def other_id() -> str:
    return str(uuid.uuid4())
