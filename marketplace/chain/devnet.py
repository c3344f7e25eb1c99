"""The embedded devnet of ``marketplace up``: anvil plus the reference contracts.

The chain's state is kept in ``<data-dir>/devnet/state.json`` (anvil's ``--state``, also dumped
every few seconds), so a restarted ``up`` finds the same chain, deployment and indexed read
models. If the recorded deployment is gone from the chain (state lost), the contracts are
deployed again and the manifest rewritten; the indexer then starts over for the new registry.
"""

from __future__ import annotations

import logging
from pathlib import Path

from web3 import Web3

from marketplace.chain.anvil import AnvilProcess
from marketplace.chain.deploy import (
    USDC_DECIMALS,
    Deployment,
    deploy_dev_defaults,
    fund_accounts,
    read_manifest,
    write_manifest,
)
from marketplace.config import Settings

log = logging.getLogger(__name__)
STATE_DUMP_INTERVAL_SECONDS = 5
# Test USDC minted to each of anvil's ten dev accounts on a fresh deployment.
DEV_ACCOUNT_USDC = 1_000_000


class PersistentAnvil(AnvilProcess):
    def __init__(self, data_dir: Path, **kwargs: object) -> None:
        super().__init__(data_dir, **kwargs)  # type: ignore[arg-type]
        self.state_file = self.data_dir / "state.json"

    def command(self) -> list[str]:
        return [
            *super().command(),
            "--state", str(self.state_file),
            "--state-interval", str(STATE_DUMP_INTERVAL_SECONDS),
        ]  # fmt: skip


def devnet_dir(settings: Settings) -> Path:
    return settings.data_dir / "devnet"


def manifest_path(settings: Settings) -> Path:
    return devnet_dir(settings) / "deployment.json"


def ensure_deployment(w3: Web3, path: Path) -> Deployment:
    if path.exists():
        deployment = read_manifest(path)
        if w3.eth.get_code(Web3.to_checksum_address(deployment.registry)):
            return deployment
        log.warning("devnet state lost; deploying the contracts again")
    deployment = deploy_dev_defaults(w3)
    fund_accounts(w3, deployment, w3.eth.accounts[:10], DEV_ACCOUNT_USDC * 10**USDC_DECIMALS)
    write_manifest(path, deployment)
    return deployment


def start_devnet(settings: Settings, started: list) -> Settings:  # type: ignore[type-arg]
    """Embedded-stack starter: without a configured chain, run anvil with the contracts."""
    if settings.chain_rpc_url:
        return settings
    anvil = PersistentAnvil(devnet_dir(settings), chain_id=settings.chain_id)
    url = anvil.start()
    started.append(anvil)
    w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 60}))
    deployment = ensure_deployment(w3, manifest_path(settings))
    log.info(
        "devnet ready",
        extra={"rpc_url": url, "registry": deployment.registry, "chain_id": deployment.chain_id},
    )
    return settings.model_copy(
        update={
            "chain_rpc_url": url,
            "chain_id": deployment.chain_id,
            "registry_address": deployment.registry,
            "chain_start_block": deployment.start_block,
        }
    )
