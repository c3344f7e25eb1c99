"""Off-chain records against a real chain: one anvil devnet with the reference contracts for the
package, reverted around every test; the app is configured with it and the IndexerEngine (driven
by the tests, `indexer_enabled=False`) fills the read model the records' rules read.

Shard actors are named, detached and keep the settings they were created with, so this package
runs its apps in a Ray namespace of its own (their shards know this anvil) and kills exactly
those shards at the end.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import ray
from eth_account import Account
from web3 import Web3

from marketplace.chain.anvil import AnvilProcess
from marketplace.chain.deploy import Deployment, deploy_dev_defaults
from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.indexer.engine import IndexerConfig, IndexerEngine
from marketplace.storage.pool import create_pool
from tests.api.identity.conftest import Wallet, link_wallet
from tests.conftest import Servers, User, make_settings, new_user
from tests.contracts.helpers import KEYS, Chain

SHARDS = 2


@dataclass(frozen=True)
class Devnet:
    process: AnvilProcess
    deployment: Deployment
    namespace: str


@pytest.fixture(scope="package")
def devnet(tmp_path_factory: pytest.TempPathFactory, ray_cluster: None) -> Iterator[Devnet]:
    data_dir: Path = tmp_path_factory.mktemp("records-anvil")
    namespace = f"records-test-{uuid.uuid4().hex[:8]}"
    with AnvilProcess(data_dir, silent=True) as process:
        w3 = Web3(Web3.HTTPProvider(process.rpc_url, request_kwargs={"timeout": 30}))
        yield Devnet(process, deploy_dev_defaults(w3, fee_rate_bps=250), namespace)
    # Only the shard actors this package's apps created, found by name in its own namespace.
    for index in range(SHARDS):
        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(f"project-shard-{index}", namespace=namespace), no_restart=True)


@pytest.fixture
def chain(devnet: Devnet) -> Iterator[Chain]:
    w3 = Web3(Web3.HTTPProvider(devnet.process.rpc_url, request_kwargs={"timeout": 30}))
    driver = Chain(w3, devnet.deployment)
    snapshot = driver.rpc("evm_snapshot")
    try:
        yield driver
    finally:
        driver.rpc("evm_revert", snapshot)


@pytest.fixture
def chain_settings(servers: Servers, devnet: Devnet) -> Settings:
    deployment = devnet.deployment
    return make_settings(
        servers,
        ray_namespace=devnet.namespace,
        project_shards=SHARDS,
        chain_rpc_url=devnet.process.rpc_url,
        chain_id=deployment.chain_id,
        registry_address=deployment.registry,
        chain_start_block=deployment.start_block,
        indexer_enabled=False,
    )


@pytest.fixture
async def client(
    aiohttp_client: Any, chain_settings: Settings, clean_state: None, chain: Chain
) -> Any:
    from marketplace.http.app import create_app

    return await aiohttp_client(create_app(chain_settings))


@pytest.fixture
async def pool(servers: Servers, client: Any) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(servers.database_url, min_size=1, max_size=4)
    yield pool
    await pool.close()


@pytest.fixture
async def engine(devnet: Devnet, pool: asyncpg.Pool) -> AsyncIterator[IndexerEngine]:
    deployment = devnet.deployment
    config = IndexerConfig(
        chain_id=deployment.chain_id,
        rpc_url=devnet.process.rpc_url,
        registry_address=deployment.registry,
        start_block=deployment.start_block,
        poll_interval_ms=100,
    )
    rpc = JsonRpcClient(devnet.process.rpc_url)
    yield IndexerEngine(config, pool, rpc)
    await rpc.close()


async def sync(engine: IndexerEngine) -> None:
    """Index until the read model has caught up with the chain head."""
    for _ in range(100):
        result = await engine.sync_once()
        if not result.behind and not result.reorg:
            return
    raise AssertionError("indexer did not catch up")


class KeyWallet(Wallet):
    """One of anvil's dev accounts, so the same key signs the link and the transactions."""

    def __init__(self, address: str) -> None:
        self.account = Account.from_key(KEYS[address])


@dataclass
class ChainParty:
    user: User
    wallet: Wallet

    @property
    def headers(self) -> dict[str, str]:
        return self.user.headers

    @property
    def address(self) -> str:
        return self.wallet.address


async def link_dev_account(client: Any, address: str) -> ChainParty:
    """A new user who proved control of dev account ``address`` (EIP-191, through the API)."""
    party = ChainParty(new_user(), KeyWallet(address))
    await link_wallet(client, party.headers, party.wallet)
    return party


async def error_code(resp: Any, status: int) -> str:
    body = await resp.json()
    assert resp.status == status, body
    return str(body["error"])
