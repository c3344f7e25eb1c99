"""An app wired to a real anvil devnet, plus helpers to link dev wallets and index the chain."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from eth_account import Account
from eth_account.messages import encode_defunct
from web3 import Web3

from marketplace.chain.anvil import AnvilProcess
from marketplace.chain.deploy import ANVIL_PRIVATE_KEYS, Deployment, deploy_dev_defaults
from marketplace.chain.rpc import JsonRpcClient
from marketplace.http.app import create_app
from marketplace.indexer.engine import IndexerConfig, IndexerEngine
from marketplace.storage.pool import create_pool
from tests.conftest import Servers, make_settings, reset_state
from tests.contracts.helpers import Chain

KEY_OF = {Account.from_key(k).address: k for k in ANVIL_PRIVATE_KEYS}


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AnvilProcess, Deployment]]:
    with AnvilProcess(tmp_path_factory.mktemp("claims-anvil")) as process:
        w3 = Web3(Web3.HTTPProvider(process.rpc_url, request_kwargs={"timeout": 30}))
        yield process, deploy_dev_defaults(w3)


@pytest.fixture
def chain(devnet: tuple[AnvilProcess, Deployment]) -> Iterator[Chain]:
    process, deployment = devnet
    driver = Chain(Web3(Web3.HTTPProvider(process.rpc_url)), deployment)
    snapshot = driver.rpc("evm_snapshot")
    # A revert also rewinds anvil's clock; keep block times close to the server's clock, which
    # the claim's intent checks compare them with.
    driver.rpc("evm_setNextBlockTimestamp", max(driver.now() + 1, int(time.time())))
    driver.rpc("evm_mine")
    try:
        yield driver
    finally:
        driver.rpc("evm_revert", snapshot)


def chain_settings(
    servers: Servers, devnet: tuple[AnvilProcess, Deployment], namespace: str, **extra: Any
) -> Any:
    process, deployment = devnet
    return make_settings(
        servers,
        ray_namespace=namespace,
        chain_rpc_url=process.rpc_url,
        chain_id=deployment.chain_id,
        registry_address=deployment.registry,
        chain_start_block=deployment.start_block,
        indexer_enabled=False,
        **extra,
    )


@pytest.fixture
async def app_client(
    aiohttp_client: Any,
    servers: Servers,
    devnet: tuple[AnvilProcess, Deployment],
    module_namespace: str,
    chain: Chain,
) -> Any:
    await reset_state(servers)
    return await aiohttp_client(create_app(chain_settings(servers, devnet, module_namespace)))


@pytest.fixture
async def indexer(
    servers: Servers, devnet: tuple[AnvilProcess, Deployment], app_client: Any
) -> AsyncIterator[Any]:
    process, deployment = devnet
    pool = await create_pool(servers.database_url, min_size=1, max_size=2)
    rpc = JsonRpcClient(process.rpc_url)
    engine = IndexerEngine(
        IndexerConfig(
            chain_id=deployment.chain_id,
            rpc_url=process.rpc_url,
            registry_address=deployment.registry,
            start_block=deployment.start_block,
        ),
        pool,
        rpc,
    )

    async def sync() -> None:
        for _ in range(50):
            result = await engine.sync_once()
            if not result.behind and not result.reorg:
                return
        raise AssertionError("indexer did not catch up")

    yield sync
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
