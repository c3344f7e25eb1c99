"""An app wired to a real anvil devnet, plus helpers to link dev wallets and index the chain."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from eth_account import Account
from eth_account.messages import encode_defunct

from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.indexer.engine import IndexerEngine
from marketplace.storage.pool import create_pool
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment
from tests.conftest import Servers, reset_state
from tests.contracts.helpers import Chain
from tests.support import apps
from tests.support.chain import (
    KEY_OF,
    indexer_config,
    reverting_chain,
    start_devnet,
    sync,
)
from tests.support.chain import chain_settings as support_chain_settings


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AnvilProcess, Deployment]]:
    with start_devnet(tmp_path_factory.mktemp("claims-anvil")) as started:
        yield started


@pytest.fixture
def chain(devnet: tuple[AnvilProcess, Deployment]) -> Iterator[Chain]:
    # The claim's intent checks compare block times with the server's clock.
    with reverting_chain(devnet[0].rpc_url, devnet[1], align_clock=True) as driver:
        yield driver


def chain_settings(
    servers: Servers, devnet: tuple[AnvilProcess, Deployment], namespace: str, **extra: Any
) -> Settings:
    return support_chain_settings(servers, *devnet, namespace, **extra)


@pytest.fixture
async def app_client(
    aiohttp_client: Any,
    servers: Servers,
    devnet: tuple[AnvilProcess, Deployment],
    module_namespace: str,
    chain: Chain,
) -> Any:
    await reset_state(servers)
    return await apps.app_client(aiohttp_client, chain_settings(servers, devnet, module_namespace))


@pytest.fixture
async def indexer(
    servers: Servers, devnet: tuple[AnvilProcess, Deployment], app_client: Any
) -> AsyncIterator[Any]:
    process, deployment = devnet
    pool = await create_pool(servers.database_url, min_size=1, max_size=2)
    rpc = JsonRpcClient(process.rpc_url)
    engine = IndexerEngine(indexer_config(process, deployment), pool, rpc)

    async def sync_engine() -> None:
        await sync(engine)

    yield sync_engine
    await rpc.close()
    await pool.close()


async def link_dev_wallet(client: Any, headers: dict[str, str], address: str) -> None:
    resp = await client.post(
        "/v1/wallet-links/challenge",
        json={"walletAddress": address, "chainId": 31337},
        headers=headers,
    )
    assert resp.status == 200, await resp.text()
    issued = await resp.json()
    signature = Account.from_key(KEY_OF[address]).sign_message(
        encode_defunct(text=issued["message"])
    )
    resp = await client.post(
        "/v1/wallet-links/verify",
        json={
            "challengeId": issued["challengeId"],
            "walletAddress": address,
            "signature": signature.signature.to_0x_hex(),
        },
        headers=headers,
    )
    assert resp.status == 200, await resp.text()


async def accept_all_legal(client: Any, headers: dict[str, str]) -> None:
    listing = await (await client.get("/v1/legal/documents", headers=headers)).json()
    for doc in listing["requiredVersions"]:
        resp = await client.post("/v1/legal/acceptances", json=doc, headers=headers)
        assert resp.status in (200, 201), await resp.text()
    listing = await (await client.get("/v1/legal/documents", headers=headers)).json()
    assert listing["missing"] == []


async def db_row(servers: Servers, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(servers.database_url)
    try:
        return await conn.fetchrow(sql, *args)
    finally:
        await conn.close()
