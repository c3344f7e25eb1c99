"""An anvil devnet with the reference contracts, for indexer tests; reset around every test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from web3 import Web3

from marketplace.chain.anvil import AnvilProcess
from marketplace.chain.deploy import Deployment, deploy_dev_defaults
from marketplace.chain.rpc import JsonRpcClient
from marketplace.indexer.engine import IndexerConfig, IndexerEngine
from marketplace.storage.pool import create_pool
from tests.conftest import Servers, reset_state
from tests.contracts.helpers import Chain


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AnvilProcess, Deployment]]:
    data_dir: Path = tmp_path_factory.mktemp("indexer-anvil")
    with AnvilProcess(data_dir) as process:
        w3 = Web3(Web3.HTTPProvider(process.rpc_url, request_kwargs={"timeout": 30}))
        yield process, deploy_dev_defaults(w3, fee_rate_bps=250)


@pytest.fixture
def chain(devnet: tuple[AnvilProcess, Deployment]) -> Iterator[Chain]:
    process, deployment = devnet
    w3 = Web3(Web3.HTTPProvider(process.rpc_url, request_kwargs={"timeout": 30}))
    driver = Chain(w3, deployment)
    snapshot = driver.rpc("evm_snapshot")
    try:
        yield driver
    finally:
        driver.rpc("evm_revert", snapshot)


def engine_config(devnet: tuple[AnvilProcess, Deployment], **overrides: object) -> IndexerConfig:
    process, deployment = devnet
    values: dict[str, object] = {
        "chain_id": deployment.chain_id,
        "rpc_url": process.rpc_url,
        "registry_address": deployment.registry,
        "start_block": deployment.start_block,
        "poll_interval_ms": 100,
    }
    values.update(overrides)
    return IndexerConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
async def pool(servers: Servers) -> AsyncIterator[asyncpg.Pool]:
    await reset_state(servers)
    pool = await create_pool(servers.database_url, min_size=1, max_size=4)
    yield pool
    await pool.close()


@pytest.fixture
async def engine(
    devnet: tuple[AnvilProcess, Deployment], pool: asyncpg.Pool, chain: Chain
) -> AsyncIterator[IndexerEngine]:
    rpc = JsonRpcClient(devnet[0].rpc_url)
    yield IndexerEngine(engine_config(devnet), pool, rpc)
    await rpc.close()
