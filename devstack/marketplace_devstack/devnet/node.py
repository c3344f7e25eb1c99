"""The embedded devnet of ``marketplace up``: anvil plus the reference contracts.

The chain's state is kept in ``<data-dir>/devnet/state.json`` (anvil's ``--state``, also dumped
every few seconds), so a restarted ``up`` finds the same chain, deployment and indexed read
models. If the recorded deployment is gone from the chain (state lost), the contracts are
deployed again and the manifest rewritten; the indexer then starts over for the new registry.
While anvil runs, its JSON-RPC URL is in ``<data-dir>/devnet/rpc_url``, which the ``marketplace
devnet ...`` commands (``devstack/marketplace_devstack/devnet/cli.py``) read.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

from pydantic import SecretStr
from web3 import Web3

from marketplace.config import Settings
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import (
    DEV_VERIFIER_PRIVATE_KEY,
    USDC_DECIMALS,
    Deployment,
    deploy_dev_defaults,
    fund_accounts,
    read_manifest,
    write_manifest,
)


class Stoppable(Protocol):
    """Something ``marketplace up`` stops at shutdown (the embedded stack keeps a list of them).
    Declared here, where the devnet adds its anvil to that list, so that the dependency runs one
    way: the embedded stack uses the devnet, never the other way round."""

    def stop(self) -> None: ...


log = logging.getLogger(__name__)
STATE_DUMP_INTERVAL_SECONDS = 5
# Test USDC minted to each of anvil's ten dev accounts on a fresh deployment.
DEV_ACCOUNT_USDC = 1_000_000
MANIFEST_FILE = "deployment.json"
# The running devnet's JSON-RPC URL, next to the manifest (read by `marketplace devnet ...`).
RPC_URL_FILE = "rpc_url"


class PersistentAnvil(AnvilProcess):
    def __init__(self, data_dir: Path, **kwargs: object) -> None:
        super().__init__(data_dir, **kwargs)  # type: ignore[arg-type]
        self.state_file = self.data_dir / "state.json"
        self.rpc_url_file = self.data_dir / RPC_URL_FILE

    def start(self) -> str:
        """Start anvil and record its URL in ``<devnet dir>/rpc_url`` (how ``marketplace devnet``
        commands find the running devnet); :meth:`stop` removes the file."""
        url = super().start()
        tmp = self.rpc_url_file.with_name(f".{RPC_URL_FILE}.tmp")
        tmp.write_text(url + "\n", encoding="utf-8")
        os.replace(tmp, self.rpc_url_file)
        return url

    def stop(self, timeout: float = 10.0) -> None:
        self.rpc_url_file.unlink(missing_ok=True)
        super().stop(timeout)

    def command(self) -> list[str]:
        return [
            *super().command(),
            "--state", str(self.state_file),
            "--state-interval", str(STATE_DUMP_INTERVAL_SECONDS),
        ]  # fmt: skip


def devnet_dir(settings: Settings) -> Path:
    return settings.data_dir / "devnet"


def manifest_path(settings: Settings) -> Path:
    return devnet_dir(settings) / MANIFEST_FILE


def rpc_url_path(settings: Settings) -> Path:
    return devnet_dir(settings) / RPC_URL_FILE


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


def start_devnet(settings: Settings, started: list[Stoppable]) -> Settings:
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
            # The devnet's contracts trust the dev verifier key; an operator's own key wins.
            "verifier_private_key": settings.verifier_private_key
            or SecretStr(DEV_VERIFIER_PRIVATE_KEY),
        }
    )
