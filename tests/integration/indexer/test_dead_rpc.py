"""A dead chain RPC shows in the indexer status and in readiness within one poll interval, by
kind and never by address, and clears once the node is back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from eth_utils import to_checksum_address
from web3 import Web3

from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment, deploy_dev_defaults
from tests.conftest import SCHEDULER_SECRET, Servers, bearer, make_settings
from tests.support.waiting import eventually

POLL_INTERVAL_MS = 1000
STATUS = "/v1/internal/indexer/status"


class StatefulAnvil(AnvilProcess):
    """Keeps its chain in a state file across a stop and start, so the same chain comes back."""

    def command(self) -> list[str]:
        return [*super().command(), "--state", str(self.data_dir / "state.json")]


@pytest.fixture
def own_devnet(tmp_path: Path) -> Iterator[tuple[StatefulAnvil, Deployment]]:
    """An anvil of this test's own: the module's shared devnet is never stopped."""
    process = StatefulAnvil(tmp_path, silent=True)
    process.start()
    try:
        w3 = Web3(Web3.HTTPProvider(process.rpc_url, request_kwargs={"timeout": 30}))
        yield process, deploy_dev_defaults(w3, fee_rate_bps=250)
    finally:
        process.stop()


async def _status(client: Any) -> tuple[dict[str, Any], str]:
    resp = await client.get(STATUS, headers=bearer(SCHEDULER_SECRET))
    assert resp.status == 200
    text = await resp.text()
    return json.loads(text), text


async def _body(client: Any) -> dict[str, Any]:
    body, _ = await _status(client)
    return body


async def test_dead_rpc_is_stale_within_one_poll_interval_and_recovers(
    aiohttp_client: Any,
    servers: Servers,
    module_namespace: str,
    clean_state: None,
    own_devnet: tuple[StatefulAnvil, Deployment],
) -> None:
    from marketplace.http.app import create_app

    anvil, deployment = own_devnet
    settings = make_settings(
        servers,
        ray_namespace=module_namespace,
        chain_rpc_url=anvil.rpc_url,
        chain_id=deployment.chain_id,
        registry_address=deployment.registry,
        chain_start_block=deployment.start_block,
        indexer_poll_interval_ms=POLL_INTERVAL_MS,
        readiness_cache_ms=0,
    )
    client = await aiohttp_client(create_app(settings))  # starts the indexer actor

    await eventually(
        lambda: _body(client),
        until=lambda b: b["source"] == "indexed" and not b["stale"],
        within=60,
        what="the indexer to be fresh",
    )
    body, _ = await _status(client)
    assert body["registryAddress"] == to_checksum_address(deployment.registry)
    assert "staleReason" not in body
    ready = await (await client.get("/v1/health/ready")).json()
    assert (ready["status"], ready["indexer"]) == ("ready", "ok")

    anvil.stop()
    elapsed = await eventually(
        lambda: _body(client),
        until=lambda b: b["stale"] and b.get("staleReason") == "rpcUnreachable",
        within=10,
        what="the dead RPC to be reported",
    )
    # About 0.06 s measured (the lost newHeads subscription wakes the loop); the bound is one
    # poll interval plus slack for a loaded machine.
    assert elapsed <= POLL_INTERVAL_MS / 1000 + 1.0, f"took {elapsed:.2f} s"
    body, text = await _status(client)
    assert body["source"] == "indexed"
    assert body["failingSince"]
    # The RPC's address is internal: neither its host, its port nor a URL shows.
    for secret in (anvil.rpc_url, f":{anvil.port}", str(anvil.port), "http://", "127.0.0.1"):
        assert secret not in text

    resp = await client.get("/v1/health/ready")
    assert resp.status == 200  # reads and off-chain writes still work
    ready = await resp.json()
    assert ready["status"] == "degraded"
    assert (ready["indexer"], ready["indexerStaleReason"]) == ("stale", "rpcUnreachable")
    assert str(anvil.port) not in await resp.text()

    anvil.start()  # same port, same chain
    recovered = await eventually(
        lambda: _body(client),
        until=lambda b: not b["stale"] and "staleReason" not in b,
        within=15,
        what="the indexer to recover",
    )
    assert recovered <= POLL_INTERVAL_MS / 1000 + 2
    ready = await (await client.get("/v1/health/ready")).json()
    assert (ready["status"], ready["indexer"]) == ("ready", "ok")
