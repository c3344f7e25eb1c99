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
from typing import Any

import asyncpg
import pytest
import ray
from eth_account import Account

from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.indexer.engine import IndexerEngine
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment
from tests.api.identity.conftest import Wallet, link_wallet
from tests.conftest import Servers, User, new_user
from tests.contracts.helpers import KEYS, Chain
from tests.support.apps import app_client
from tests.support.chain import chain_settings as support_chain_settings
from tests.support.chain import indexer_config, reverting_chain, start_devnet
from tests.support.db import open_pool

SHARDS = 2


@dataclass(frozen=True)
class Devnet:
    process: AnvilProcess
    deployment: Deployment
    namespace: str


@pytest.fixture(scope="package")
def devnet(tmp_path_factory: pytest.TempPathFactory, ray_cluster: None) -> Iterator[Devnet]:
    namespace = f"records-test-{uuid.uuid4().hex[:8]}"
    data_dir = tmp_path_factory.mktemp("records-anvil")
    with start_devnet(data_dir, silent=True, fee_rate_bps=250) as (process, deployment):
        yield Devnet(process, deployment, namespace)
    # Only the shard actors this package's apps created, found by name in its own namespace.
    for index in range(SHARDS):
        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(f"project-shard-{index}", namespace=namespace), no_restart=True)


@pytest.fixture
def chain(devnet: Devnet) -> Iterator[Chain]:
    with reverting_chain(devnet.process.rpc_url, devnet.deployment) as driver:
        yield driver


@pytest.fixture
def chain_settings(servers: Servers, devnet: Devnet) -> Settings:
    return support_chain_settings(
        servers, devnet.process, devnet.deployment, devnet.namespace, project_shards=SHARDS
    )


@pytest.fixture
async def client(
    aiohttp_client: Any, chain_settings: Settings, clean_state: None, chain: Chain
) -> Any:
    # Built after the chain's snapshot, so the app stops before the chain reverts.
    return await app_client(aiohttp_client, chain_settings)


@pytest.fixture
async def pool(servers: Servers, client: Any) -> AsyncIterator[asyncpg.Pool]:
    # After the client, whose reset empties the database.
    async with open_pool(servers, max_size=4, reset=False) as pool:
        yield pool


@pytest.fixture
async def engine(devnet: Devnet, pool: asyncpg.Pool) -> AsyncIterator[IndexerEngine]:
    rpc = JsonRpcClient(devnet.process.rpc_url)
    yield IndexerEngine(indexer_config(devnet.process, devnet.deployment), pool, rpc)
    await rpc.close()


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
