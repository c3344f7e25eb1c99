"""An anvil devnet with the reference contracts, for indexer tests; reset around every test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from marketplace.chain.rpc import JsonRpcClient
from marketplace.indexer.engine import IndexerConfig, IndexerEngine
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment
from tests.conftest import Servers
from tests.contracts.helpers import Chain
from tests.support.chain import indexer_config, reverting_chain, start_devnet
from tests.support.db import open_pool


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AnvilProcess, Deployment]]:
    with start_devnet(tmp_path_factory.mktemp("indexer-anvil"), fee_rate_bps=250) as started:
        yield started


@pytest.fixture
def chain(devnet: tuple[AnvilProcess, Deployment]) -> Iterator[Chain]:
    with reverting_chain(devnet[0].rpc_url, devnet[1]) as driver:
        yield driver


def engine_config(devnet: tuple[AnvilProcess, Deployment], **overrides: Any) -> IndexerConfig:
    process, deployment = devnet
    return indexer_config(process, deployment, **overrides)


@pytest.fixture
async def pool(servers: Servers) -> AsyncIterator[asyncpg.Pool]:
    async with open_pool(servers, max_size=4) as pool:
        yield pool


@pytest.fixture
async def engine(
    devnet: tuple[AnvilProcess, Deployment], pool: asyncpg.Pool, chain: Chain
) -> AsyncIterator[IndexerEngine]:
    rpc = JsonRpcClient(devnet[0].rpc_url)
    yield IndexerEngine(engine_config(devnet), pool, rpc)
    await rpc.close()
