"""Contract tests against a real anvil: one anvil and one deployment per session, and every test
runs between ``evm_snapshot`` and ``evm_revert`` so tests never see each other's state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from web3 import Web3

from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment, deploy_dev_defaults
from tests.contracts.helpers import Actors, Chain


@pytest.fixture(scope="session")
def anvil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilProcess]:
    data_dir: Path = tmp_path_factory.mktemp("anvil")
    with AnvilProcess(data_dir, silent=True) as process:
        yield process


@pytest.fixture(scope="session")
def w3(anvil: AnvilProcess) -> Web3:
    return Web3(Web3.HTTPProvider(anvil.rpc_url, request_kwargs={"timeout": 30}))


@pytest.fixture(scope="session")
def deployment(w3: Web3) -> Deployment:
    return deploy_dev_defaults(w3, fee_rate_bps=250)


@pytest.fixture(scope="session")
def session_chain(w3: Web3, deployment: Deployment) -> Chain:
    return Chain(w3, deployment)


@pytest.fixture
def chain(session_chain: Chain) -> Iterator[Chain]:
    snapshot = session_chain.rpc("evm_snapshot")
    try:
        yield session_chain
    finally:
        assert session_chain.rpc("evm_revert", snapshot) is True


@pytest.fixture
def actors(chain: Chain) -> Actors:
    return chain.a
