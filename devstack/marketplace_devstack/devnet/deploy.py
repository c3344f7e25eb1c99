"""Deploy the marketplace contracts to a devnet (anvil) and read/write the deployment manifest.

Synchronous web3: this runs at startup and in CLI tools, not on request paths.

Dev keys are anvil's well-known default accounts (mnemonic ``test test ... junk``): index 0
deploys (and is the registry admin), 1 is the dispute multisig, 2 the treasury, and 9 the dev
verifier signer (:data:`DEV_VERIFIER_PRIVATE_KEY`). They are public knowledge: devnet only.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, cast

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_account.types import TransactionDictType
from eth_typing import ChecksumAddress
from eth_utils import to_checksum_address
from web3 import Web3
from web3.contract import Contract
from web3.contract.contract import ContractConstructor, ContractFunction
from web3.types import RPCEndpoint, TxReceipt

from marketplace.chain.artifacts import load_artifact

# anvil's default accounts 0..9 (public, devnet only).
ANVIL_PRIVATE_KEYS: tuple[str, ...] = (
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
)
DEV_DEPLOYER_INDEX = 0
DEV_DISPUTE_MULTISIG_INDEX = 1
DEV_TREASURY_INDEX = 2
DEV_VERIFIER_INDEX = 9

DEV_DEPLOYER_PRIVATE_KEY = ANVIL_PRIVATE_KEYS[DEV_DEPLOYER_INDEX]
DEV_DISPUTE_MULTISIG_PRIVATE_KEY = ANVIL_PRIVATE_KEYS[DEV_DISPUTE_MULTISIG_INDEX]
DEV_TREASURY_PRIVATE_KEY = ANVIL_PRIVATE_KEYS[DEV_TREASURY_INDEX]
#: Fixed, publicly known dev verifier key (anvil account 9,
#: 0xa0Ee7A142d267C1f36714E4a8F75612F20a79720). Never use outside a devnet.
DEV_VERIFIER_PRIVATE_KEY = ANVIL_PRIVATE_KEYS[DEV_VERIFIER_INDEX]

DEFAULT_FEE_RATE_BPS = 250
USDC_DECIMALS = 6

#: An unlocked node account (address string) or a local signing account.
Sender = str | LocalAccount


class DeploymentError(RuntimeError):
    """A deployment transaction failed or a manifest is invalid."""


def dev_address(index: int) -> str:
    """Checksummed address of anvil default account ``index`` (0..9)."""
    return Account.from_key(ANVIL_PRIVATE_KEYS[index]).address


@dataclass(frozen=True)
class Deployment:
    """Where the marketplace contracts live on one chain. ``start_block`` is the block of the
    first deployment transaction (where an indexer starts scanning)."""

    chain_id: int
    usdc: ChecksumAddress
    escrow: ChecksumAddress
    registry: ChecksumAddress
    project_implementation: ChecksumAddress
    start_block: int
    verifier_signer: ChecksumAddress
    dispute_multisig: ChecksumAddress
    treasury: ChecksumAddress
    fee_rate_bps: int = DEFAULT_FEE_RATE_BPS

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        """Stable JSON text (sorted keys, 2-space indent, trailing newline)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> Deployment:
        """Parse JSON text or an already-decoded mapping. Unknown keys are rejected."""
        raw = json.loads(data) if isinstance(data, str | bytes) else dict(data)
        if not isinstance(raw, dict):
            raise DeploymentError("deployment manifest must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = set(raw) - known
        if unknown:
            raise DeploymentError(f"unknown deployment manifest keys: {sorted(unknown)}")
        try:
            return cls(
                chain_id=int(raw["chain_id"]),
                usdc=to_checksum_address(raw["usdc"]),
                escrow=to_checksum_address(raw["escrow"]),
                registry=to_checksum_address(raw["registry"]),
                project_implementation=to_checksum_address(raw["project_implementation"]),
                start_block=int(raw["start_block"]),
                verifier_signer=to_checksum_address(raw["verifier_signer"]),
                dispute_multisig=to_checksum_address(raw["dispute_multisig"]),
                treasury=to_checksum_address(raw["treasury"]),
                fee_rate_bps=int(raw.get("fee_rate_bps", DEFAULT_FEE_RATE_BPS)),
            )
        except KeyError as exc:
            raise DeploymentError(f"deployment manifest lacks {exc.args[0]!r}") from exc
        except ValueError as exc:
            raise DeploymentError(f"invalid deployment manifest: {exc}") from exc


def write_manifest(path: Path, deployment: Deployment) -> None:
    """Atomically write ``deployment`` as JSON to ``path`` (parent directories created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(deployment.to_json())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_manifest(path: Path) -> Deployment:
    """Read a manifest written by :func:`write_manifest`."""
    return Deployment.from_json(Path(path).read_text(encoding="utf-8"))


def contract_at(w3: Web3, name: str, address: str) -> Contract:
    """A web3 contract object for artifact ``name`` at ``address``."""
    return w3.eth.contract(address=to_checksum_address(address), abi=load_artifact(name)["abi"])


def contract_factory(w3: Web3, name: str) -> type[Contract]:
    """A deployable web3 contract class for artifact ``name``."""
    artifact = load_artifact(name)
    return w3.eth.contract(abi=artifact["abi"], bytecode=artifact["bytecode"])


def send_transaction(
    w3: Web3,
    sender: Sender,
    call: ContractFunction | ContractConstructor,
    *,
    timeout: float = 60.0,
) -> TxReceipt:
    """Send a contract call or deployment from ``sender`` and wait for a successful receipt.

    ``sender`` is either an address the node unlocks (anvil's dev accounts) or a
    ``LocalAccount`` that signs locally. Raises :class:`DeploymentError` on a reverted receipt.
    """
    if isinstance(sender, LocalAccount):
        tx = call.build_transaction(
            {
                "from": sender.address,
                "nonce": w3.eth.get_transaction_count(sender.address, "pending"),
                "chainId": w3.eth.chain_id,
            }
        )
        # web3's TxParams is a TypedDict, eth_account's parameter a plain dict of the same fields:
        # the two libraries' stubs disagree about one and the same value.
        signed = sender.sign_transaction(cast("TransactionDictType", tx))
        tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
    else:
        tx_hash = call.transact({"from": to_checksum_address(sender)})
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=timeout)
    if receipt["status"] != 1:
        raise DeploymentError(f"transaction {tx_hash.to_0x_hex()} reverted")
    return receipt


def _deploy(w3: Web3, sender: Sender, name: str, *args: Any) -> tuple[ChecksumAddress, TxReceipt]:
    """The new contract's address and the receipt of its deployment."""
    receipt = send_transaction(w3, sender, contract_factory(w3, name).constructor(*args))
    address = receipt["contractAddress"]
    if not address:
        raise DeploymentError(f"{name} deployment produced no contract address")
    return address, receipt


def deploy_devnet(
    w3: Web3,
    deployer: Sender,
    *,
    verifier_signer: str,
    dispute_multisig: str,
    treasury: str,
    fee_rate_bps: int = DEFAULT_FEE_RATE_BPS,
) -> Deployment:
    """Deploy TestUSDC, MarketplaceEscrow, the MarketplaceProject implementation and
    MarketplaceRegistry, and bind the escrow to the registry. ``deployer`` becomes the registry
    admin. Five transactions; returns the resulting :class:`Deployment`."""
    verifier_signer = to_checksum_address(verifier_signer)
    dispute_multisig = to_checksum_address(dispute_multisig)
    treasury = to_checksum_address(treasury)

    usdc, usdc_receipt = _deploy(w3, deployer, "TestUSDC")
    escrow, _ = _deploy(w3, deployer, "MarketplaceEscrow", usdc)
    implementation, _ = _deploy(w3, deployer, "MarketplaceProject")
    registry, _ = _deploy(
        w3,
        deployer,
        "MarketplaceRegistry",
        usdc,
        escrow,
        implementation,
        (fee_rate_bps, dispute_multisig, verifier_signer, treasury),
    )
    send_transaction(
        w3, deployer, contract_at(w3, "MarketplaceEscrow", escrow).functions.setRegistry(registry)
    )
    return Deployment(
        chain_id=w3.eth.chain_id,
        usdc=to_checksum_address(usdc),
        escrow=to_checksum_address(escrow),
        registry=to_checksum_address(registry),
        project_implementation=to_checksum_address(implementation),
        start_block=int(usdc_receipt["blockNumber"]),
        verifier_signer=verifier_signer,
        dispute_multisig=dispute_multisig,
        treasury=treasury,
        fee_rate_bps=fee_rate_bps,
    )


def deploy_dev_defaults(w3: Web3, *, fee_rate_bps: int = DEFAULT_FEE_RATE_BPS) -> Deployment:
    """:func:`deploy_devnet` with anvil's default roles: account 0 deploys, 1 is the dispute
    multisig, 2 the treasury, and the dev verifier key (account 9) signs attestations."""
    return deploy_devnet(
        w3,
        dev_address(DEV_DEPLOYER_INDEX),
        verifier_signer=Account.from_key(DEV_VERIFIER_PRIVATE_KEY).address,
        dispute_multisig=dev_address(DEV_DISPUTE_MULTISIG_INDEX),
        treasury=dev_address(DEV_TREASURY_INDEX),
        fee_rate_bps=fee_rate_bps,
    )


def fund_accounts(
    w3: Web3,
    deployment: Deployment,
    accounts: Iterable[str],
    usdc_amount: int,
    *,
    sender: Sender | None = None,
    eth_wei: int | None = None,
) -> None:
    """Mint ``usdc_amount`` TestUSDC base units (6 decimals: 1 USDC = 1_000_000) to each
    account. ``sender`` pays gas (default: the node's first account); ``eth_wei``, when given,
    also sets each account's ETH balance with ``anvil_setBalance`` (anvil only)."""
    if usdc_amount < 0:
        raise ValueError("usdc_amount must be >= 0")
    payer: Sender = sender if sender is not None else w3.eth.accounts[0]
    usdc = contract_at(w3, "TestUSDC", deployment.usdc)
    for account in accounts:
        address = to_checksum_address(account)
        if eth_wei is not None:
            w3.provider.make_request(RPCEndpoint("anvil_setBalance"), [address, hex(eth_wei)])
        if usdc_amount:
            send_transaction(w3, payer, usdc.functions.mint(address, usdc_amount))
