"""Chain builders every suite shares: an anvil devnet with the reference contracts, a driver that
reverts around each test, settings and indexer configuration pointing at it, and catching up."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eth_account import Account
from web3 import Web3

from marketplace.config import Settings
from marketplace.indexer.engine import IndexerConfig, IndexerEngine
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import ANVIL_PRIVATE_KEYS, Deployment, deploy_dev_defaults
from tests.conftest import Servers, make_settings
from tests.contracts.helpers import Chain

# Private key of each anvil dev account, by checksummed address.
KEY_OF = {Account.from_key(k).address: k for k in ANVIL_PRIVATE_KEYS}


def web3_for(rpc_url: str) -> Web3:
    return Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": 30}))


@contextlib.contextmanager
def start_devnet(
    data_dir: Path, *, silent: bool = False, **deploy: Any
) -> Iterator[tuple[AnvilProcess, Deployment]]:
    """A fresh anvil with the reference contracts deployed by the dev accounts."""
    with AnvilProcess(data_dir, silent=silent) as process:
        yield process, deploy_dev_defaults(web3_for(process.rpc_url), **deploy)


@contextlib.contextmanager
def reverting_chain(
    rpc_url: str, deployment: Deployment, *, align_clock: bool = False
) -> Iterator[Chain]:
    """A :class:`Chain` driver whose changes are reverted when the block ends.

    ``align_clock``: a revert also rewinds anvil's clock; mine one block at the wall clock so
    checks that compare block times with the server's clock (claim intents) see sane times.
    """
    driver = Chain(web3_for(rpc_url), deployment)
    snapshot = driver.rpc("evm_snapshot")
    if align_clock:
        driver.rpc("evm_setNextBlockTimestamp", max(driver.now() + 1, int(time.time())))
        driver.rpc("evm_mine")
    try:
        yield driver
    finally:
        driver.rpc("evm_revert", snapshot)


def chain_settings(
    servers: Servers,
    process: AnvilProcess,
    deployment: Deployment,
    namespace: str | None = None,
    **extra: Any,
) -> Settings:
    """App settings for this devnet (in the Ray ``namespace`` if given, else the suite's); the
    tests drive the indexer themselves unless told."""
    values: dict[str, Any] = {
        "chain_rpc_url": process.rpc_url,
        "chain_id": deployment.chain_id,
        "registry_address": deployment.registry,
        "chain_start_block": deployment.start_block,
        "indexer_enabled": False,
    }
    if namespace is not None:
        values["ray_namespace"] = namespace
    values.update(extra)
    return make_settings(servers, **values)


def indexer_config(
    process: AnvilProcess, deployment: Deployment, **overrides: Any
) -> IndexerConfig:
    values: dict[str, Any] = {
        "chain_id": deployment.chain_id,
        "rpc_url": process.rpc_url,
        "registry_address": deployment.registry,
        "start_block": deployment.start_block,
        "poll_interval_ms": 100,
    }
    values.update(overrides)
    return IndexerConfig(**values)


async def sync(engine: IndexerEngine, max_rounds: int = 100) -> None:
    """Index until the read model has caught up with the chain head."""
    for _ in range(max_rounds):
        result = await engine.sync_once()
        if not result.behind and not result.reorg:
            return
    raise AssertionError("indexer did not catch up")
