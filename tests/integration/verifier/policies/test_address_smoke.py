"""``address-smoke`` on a real anvil devnet with the reference contracts deployed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from eth_utils import keccak

from marketplace.verifier.evidence import evidence_hash
from marketplace.verifier.policies import run_policy
from marketplace.verifier.policy import PolicyId, TransientPolicyError
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment, dev_address
from tests.support.chain import start_devnet, web3_for
from tests.support.verifier_fixtures import context, free_port, local_settings


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AnvilProcess, Deployment]]:
    with start_devnet(tmp_path_factory.mktemp("anvil"), silent=True) as started:
        yield started


async def test_contract_has_code(devnet: tuple[AnvilProcess, Deployment], tmp_path: Path) -> None:
    process, deployment = devnet
    ctx = context(tmp_path, local_settings(), rpc_url=process.rpc_url)
    outcome = await run_policy(PolicyId.ADDRESS_SMOKE, deployment.registry.lower(), ctx)
    assert outcome.passes
    code = bytes(web3_for(process.rpc_url).eth.get_code(deployment.registry))
    assert outcome.evidence == {
        "policy": "address-smoke",
        "chainId": deployment.chain_id,
        "address": deployment.registry,
        "blockNumber": web3_for(process.rpc_url).eth.block_number,
        "codeSize": len(code),
        "codeHash": "0x" + keccak(code).hex(),
        "hasCode": True,
    }
    again = await run_policy(PolicyId.ADDRESS_SMOKE, deployment.registry, ctx)
    assert evidence_hash(again.evidence) == evidence_hash(outcome.evidence)


async def test_account_without_code_fails(
    devnet: tuple[AnvilProcess, Deployment], tmp_path: Path
) -> None:
    process, _ = devnet
    ctx = context(tmp_path, local_settings(), rpc_url=process.rpc_url)
    outcome = await run_policy(PolicyId.ADDRESS_SMOKE, dev_address(7), ctx)
    assert not outcome.passes
    assert outcome.evidence["codeSize"] == 0
    assert outcome.evidence["hasCode"] is False


async def test_unreachable_rpc_is_transient(tmp_path: Path) -> None:
    ctx = context(tmp_path, local_settings(), rpc_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(TransientPolicyError):
        await run_policy(PolicyId.ADDRESS_SMOKE, dev_address(1), ctx)
