"""Artifacts, the anvil launcher, deployment and the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eth_account import Account
from web3 import Web3

from marketplace.chain import artifacts
from marketplace_devstack.devnet.anvil import (
    ANVIL_BIN_ENV,
    AnvilError,
    AnvilProcess,
    find_anvil_binary,
)
from marketplace_devstack.devnet.deploy import (
    ANVIL_PRIVATE_KEYS,
    DEV_VERIFIER_PRIVATE_KEY,
    Deployment,
    DeploymentError,
    read_manifest,
    write_manifest,
)
from tests.contracts.helpers import Chain

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOYABLE = ["MarketplaceEscrow", "MarketplaceProject", "MarketplaceRegistry", "TestUSDC"]


# ------------------------------------------------------------------ artifacts


def test_artifacts_fresh() -> None:
    """Fails when a contracts/*.sol changed without `node scripts/build_contracts.js`."""
    assert artifacts.sources_digest() == artifacts.artifacts_digest(), (
        "contracts/ changed since the artifacts were built; run `node scripts/build_contracts.js`"
    )


def test_artifacts_built_with_installed_solc() -> None:
    package = REPO_ROOT / "node_modules" / "solc" / "package.json"
    assert package.is_file(), "solc is installed by scripts/setup (package.json)"
    installed = json.loads(package.read_text())["version"]
    assert artifacts.artifacts_solc_version() == installed


def test_sources_digest_detects_edits(tmp_path: Path) -> None:
    for source in artifacts.CONTRACTS_DIR.glob("*.sol"):
        (tmp_path / source.name).write_bytes(source.read_bytes())
    assert artifacts.sources_digest(tmp_path) == artifacts.artifacts_digest()
    victim = tmp_path / "MarketplaceProject.sol"
    victim.write_bytes(victim.read_bytes() + b"\n")
    assert artifacts.sources_digest(tmp_path) != artifacts.artifacts_digest()
    (tmp_path / "Extra.sol").write_text("// new file\n")
    victim.write_bytes(victim.read_bytes()[:-1])
    assert artifacts.sources_digest(tmp_path) != artifacts.artifacts_digest()
    assert artifacts.sources_digest(tmp_path, solc_version="0.0.1") != artifacts.sources_digest(
        tmp_path
    )


def test_load_artifact_shapes() -> None:
    assert artifacts.artifact_names() == DEPLOYABLE
    for name in DEPLOYABLE:
        artifact = artifacts.load_artifact(name)
        assert set(artifact) == {"contractName", "abi", "bytecode", "deployedBytecode"}
        assert artifact["contractName"] == name
        assert artifact["bytecode"].startswith("0x") and len(artifact["bytecode"]) > 2
        assert artifact["deployedBytecode"].startswith("0x")
        assert (len(artifact["deployedBytecode"]) - 2) // 2 <= 24576
    first = artifacts.load_artifact("TestUSDC")
    first["abi"].clear()
    assert artifacts.load_artifact("TestUSDC")["abi"], "load_artifact must return a fresh copy"
    with pytest.raises(artifacts.ArtifactNotFound):
        artifacts.load_artifact("Interfaces")


def test_deployed_implementation_matches_artifact(chain: Chain) -> None:
    code = chain.w3.eth.get_code(chain.dep.project_implementation)
    assert code.to_0x_hex() == artifacts.load_artifact("MarketplaceProject")["deployedBytecode"]


# ---------------------------------------------------------------------- anvil


def test_find_anvil_binary_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    default = find_anvil_binary()
    assert default.is_file()
    monkeypatch.setenv(ANVIL_BIN_ENV, str(tmp_path / "missing"))
    with pytest.raises(AnvilError):
        find_anvil_binary()
    monkeypatch.setenv(ANVIL_BIN_ENV, str(default))
    assert find_anvil_binary() == default


def test_anvil_process_lifecycle(tmp_path: Path) -> None:
    process = AnvilProcess(tmp_path / "devnet", chain_id=4242)
    with pytest.raises(AnvilError):
        _ = process.rpc_url
    with process:
        assert process.running
        w3 = Web3(Web3.HTTPProvider(process.rpc_url))
        assert w3.eth.chain_id == 4242
        assert process.port != 0
    assert not process.running
    assert (tmp_path / "devnet" / "anvil.log").exists()
    process.stop()  # idempotent


def test_anvil_command_options(tmp_path: Path) -> None:
    command = AnvilProcess(tmp_path, port=8545, block_time=0.5, silent=True).command()
    assert command[1:] == [
        "--host", "127.0.0.1",
        "--port", "8545",
        "--chain-id", "31337",
        "--block-time", "0.5",
        "--silent",
    ]  # fmt: skip
    assert AnvilProcess(tmp_path, port=1, block_time=2).command()[-2:] == ["--block-time", "2"]


def test_dev_keys_are_anvil_accounts(chain: Chain) -> None:
    node_accounts = chain.w3.eth.accounts
    assert [Account.from_key(k).address for k in ANVIL_PRIVATE_KEYS] == node_accounts[:10]
    assert Account.from_key(DEV_VERIFIER_PRIVATE_KEY).address == chain.dep.verifier_signer


# ----------------------------------------------------------------- deployment


def test_deployment_wiring(chain: Chain) -> None:
    dep, a = chain.dep, chain.a
    assert dep.chain_id == 31337
    assert dep.dispute_multisig == a.multisig and dep.treasury == a.treasury
    assert chain.escrow.functions.registry().call() == dep.registry
    assert chain.escrow.functions.usdc().call() == dep.usdc
    reg = chain.registry.functions
    assert reg.usdc().call() == dep.usdc
    assert reg.escrow().call() == dep.escrow
    assert reg.projectImplementation().call() == dep.project_implementation
    assert reg.admin().call() == a.admin
    assert reg.currentConfig().call() == (250, a.multisig, a.verifier, a.treasury)
    assert dep.start_block >= 1
    assert chain.w3.eth.get_code(dep.usdc, block_identifier=dep.start_block)
    assert not chain.w3.eth.get_code(dep.usdc, block_identifier=dep.start_block - 1)


def test_manifest_roundtrip(chain: Chain, tmp_path: Path) -> None:
    path = tmp_path / "nested" / "deployment.json"
    write_manifest(path, chain.dep)
    assert read_manifest(path) == chain.dep
    assert Deployment.from_json(chain.dep.to_json()) == chain.dep
    assert Deployment.from_json(chain.dep.to_dict()) == chain.dep
    assert json.loads(path.read_text())["registry"] == chain.dep.registry
    with pytest.raises(DeploymentError):
        Deployment.from_json({**chain.dep.to_dict(), "surprise": 1})
    broken = chain.dep.to_dict()
    del broken["escrow"]
    with pytest.raises(DeploymentError):
        Deployment.from_json(broken)


def test_escrow_registry_binding_is_one_shot(chain: Chain) -> None:
    a = chain.a
    chain.reverts(a.admin, chain.escrow.functions.setRegistry(a.stranger), "RegistryAlreadySet")
    chain.reverts(a.stranger, chain.escrow.functions.setRegistry(a.stranger), "NotDeployer")
