"""The ``devnet-deploy`` one-shot of compose's ``devnet`` profile (deploy/compose.yaml).

Deploys the reference contracts to the profile's anvil with the dev stack's own code, the same
as ``marketplace up`` does (:func:`marketplace_devstack.devnet.node.ensure_deployment`: a
manifest whose registry is on the chain is kept, so a restart deploys nothing; otherwise the
contracts are deployed with anvil's dev accounts and test USDC minted to them). Writes into
``$DEVNET_DIR``:

- ``deployment.json``, the manifest: the frontends' entrypoint
  (deploy/docker/marketplace-frontend.sh) reads the registry address, the chain id and the
  start block from it when ``MARKETPLACE_REGISTRY_ADDRESS=devnet``;
- ``dev-verifier-key``, the dev verifier's key (anvil account 9, public knowledge), which the
  devnet's registry trusts to sign attestations; a frontend uses it when no
  ``MARKETPLACE_VERIFIER_PRIVATE_KEY`` is set, as ``up`` does.

Runs in the service image with ``devstack/`` mounted on ``PYTHONPATH``: the image itself never
contains the dev stack. Exit status 0 when the manifest is written, 1 otherwise.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from web3 import Web3

from marketplace_devstack.devnet.deploy import DEV_VERIFIER_PRIVATE_KEY
from marketplace_devstack.devnet.node import MANIFEST_FILE, ensure_deployment

VERIFIER_KEY_FILE = "dev-verifier-key"
# anvil answers within a second of its health check passing; this covers a slow first start.
CONNECT_TIMEOUT_SECONDS = 60.0


def wait_for_chain(w3: Web3, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not w3.is_connected():
        if time.monotonic() > deadline:
            raise SystemExit(f"devnet-deploy: no chain answers at {w3.provider} after {timeout}s")
        time.sleep(1.0)


def write_private(path: Path, text: str) -> None:
    """Owner-only, written whole: the frontends (same uid) read it, nobody else."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def main() -> int:
    rpc_url = os.environ["DEVNET_RPC_URL"]
    directory = Path(os.environ["DEVNET_DIR"])
    w3 = Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": 60}))
    wait_for_chain(w3, CONNECT_TIMEOUT_SECONDS)
    deployment = ensure_deployment(w3, directory / MANIFEST_FILE)
    write_private(directory / VERIFIER_KEY_FILE, DEV_VERIFIER_PRIVATE_KEY + "\n")
    print(
        f"devnet-deploy: registry {deployment.registry} on chain {deployment.chain_id} "
        f"from block {deployment.start_block} ({rpc_url})",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
