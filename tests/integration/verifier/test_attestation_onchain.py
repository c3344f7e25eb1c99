"""The attestation of a verifier job is accepted by the project contract on a devnet.

A disputed milestone on anvil (submitted with the registry's address as its delivery), indexed,
``address-smoke`` fixed as its acceptance policy; the selected worker requests an
``address-smoke`` job of that delivery through the API; the ``verifier`` queue's worker (in
process here, with its policy executor actor: ``test_pool.py`` runs the Ray actors) runs it;
``attestMilestone`` with the job's attestation succeeds on chain, while the same attestation with
one field changed reverts. Indexed again, the milestone read model shows the attestation and the
job's result.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
import ray
from eth_utils import keccak

from marketplace.chain.enums import MilestoneStatus
from marketplace.config import Settings
from marketplace.indexer.engine import IndexerEngine
from marketplace.jobs.worker import JobWorker
from marketplace.verifier.execution import VERIFIER_QUEUE
from marketplace.verifier.policy import PolicyId
from tests.api.verifier.conftest import start_executor
from tests.conftest import Servers, kill_namespace_actors
from tests.contracts.helpers import DAY, Chain
from tests.integration.jobs.conftest import running
from tests.integration.records.conftest import link_dev_account
from tests.integration.verifier.conftest import (
    Devnet,
    disputed_projects,
    verifier_settings,
)
from tests.support.apps import app_client
from tests.support.chain import sync
from tests.support.waiting import eventually

pytestmark = pytest.mark.usefixtures("ray_cluster")


@pytest.fixture(scope="module")
def namespace() -> Iterator[str]:
    name = f"verifier-onchain-{uuid.uuid4().hex[:8]}"
    yield name
    kill_namespace_actors(name)


@pytest.fixture
def settings(servers: Servers, devnet: Devnet, namespace: str) -> Settings:
    # The app starts no `verifier` workers: this test runs the queue's worker in process.
    return verifier_settings(
        servers, devnet, namespace, jobs_workers={"notifications": 0, "verifier": 0}
    )


@pytest.fixture
async def client(aiohttp_client: Any, settings: Settings, pool: asyncpg.Pool) -> Any:
    # Built after the pool's state reset (the suite's only one), as the other fixtures are.
    return await app_client(aiohttp_client, settings)


@pytest.fixture
async def verifier(pool: asyncpg.Pool, settings: Settings) -> AsyncIterator[JobWorker]:
    """The queue's worker (index 0) and its policy executor."""
    executor = start_executor(settings)
    worker = JobWorker(VERIFIER_QUEUE, pool, settings, owner=f"test-verifier:{uuid.uuid4().hex}")
    try:
        async with running(worker):
            yield worker
    finally:
        ray.kill(executor, no_restart=True)


async def disputed_project(
    client: Any, chain: Chain, engine: IndexerEngine, pool: asyncpg.Pool, settings: Settings
) -> tuple[Any, Any]:
    """A project in Building whose milestone 0 the worker submitted with the registry's address
    (what :func:`run_job` requests) and the owner disputed, indexed, with ``address-smoke`` as
    the milestone's acceptance policy; its contract and the worker's user (linked to the worker's
    dev account through the API)."""
    (address,) = await disputed_projects(
        chain, engine, pool, PolicyId.ADDRESS_SMOKE, [settings.registry_address]
    )
    worker = await link_dev_account(client, chain.a.worker)
    return chain.project(address), worker


async def run_job(client: Any, worker: Any, project: Any, settings: Settings) -> dict[str, Any]:
    """The worker requests an address-smoke job (the registry has code: passes); the completed
    job record."""
    resp = await client.post(
        "/v1/verifier/jobs",
        json={
            "projectAddress": project.address,
            "milestoneIndex": 0,
            "checkPolicyId": "address-smoke",
            "deliveryRef": settings.registry_address,
            "chainId": settings.chain_id,
        },
        headers=worker.headers,
    )
    assert resp.status == 202, await resp.text()
    poll = (await resp.json())["pollUrl"]
    record: dict[str, Any] = {}

    async def completed() -> bool:
        nonlocal record
        got = await client.get(poll, headers=worker.headers)
        assert got.status == 200, await got.text()
        record = await got.json()
        assert record["status"] not in ("failed",), record
        return record["status"] == "completed"

    await eventually(completed, within=60, what="verifier job completed", interval=0.1)
    return record


def attest_call(project: Any, a: dict[str, Any], **changes: Any) -> Any:
    values = {**a, **changes}
    return project.functions.attestMilestone(
        values["milestoneIndex"],
        values["passes"],
        bytes.fromhex(values["evidenceHash"][2:]),
        values["deadline"],
        values["nonce"],
        values["chainId"],
        bytes.fromhex(values["signature"][2:]),
    )


async def test_the_jobs_attestation_is_accepted_on_chain_and_a_tampered_one_reverts(
    client: Any,
    chain: Chain,
    engine: IndexerEngine,
    pool: asyncpg.Pool,
    settings: Settings,
    verifier: JobWorker,
) -> None:
    project, worker = await disputed_project(client, chain, engine, pool, settings)
    record = await run_job(client, worker, project, settings)
    result = record["result"]
    attestation = result["attestation"]
    assert result["passes"] is True
    assert attestation["passes"] is True
    assert attestation["evidenceHash"] == result["evidenceHash"]
    assert attestation["project"] == project.address
    assert (attestation["milestoneIndex"], attestation["chainId"]) == (0, chain.chain_id)
    assert attestation["signer"] == chain.a.verifier
    # The deadline comes from the chain's latest block time (plus the TTL).
    assert chain.now() < attestation["deadline"] <= chain.now() + 3600

    tampered: dict[str, dict[str, Any]] = {
        "passes flipped": {"passes": False},
        "evidenceHash changed": {"evidenceHash": "0x" + keccak(text="other evidence").hex()},
        "nonce changed": {"nonce": attestation["nonce"] + 1},
        "deadline changed": {"deadline": attestation["deadline"] + 1},
    }
    for what, change in tampered.items():
        fn = attest_call(project, attestation, **change)
        reverted = chain.simulate(chain.a.stranger, fn)
        assert reverted is not None, f"{what}: accepted"
        # The signature recovers to another address than the trusted verifier's.
        assert reverted[0] == "WrongSigner", (what, reverted)
        receipt = chain.send(chain.a.stranger, fn)
        assert receipt["status"] == 0, f"{what}: the transaction did not revert"

    # Anyone may send it (the signature is the authority); the real one succeeds.
    receipt = chain.ok(chain.a.stranger, attest_call(project, attestation))
    (event,) = chain.events(receipt, project, "MilestoneAttested")
    assert event["passes"] is True
    assert "0x" + event["evidenceHash"].hex() == attestation["evidenceHash"]
    assert event["nonce"] == attestation["nonce"]
    assert bool(chain.registry.functions.isNonceUsed(chain.a.verifier, attestation["nonce"]).call())
    # Used once: the same attestation again reverts (the dispute moved on, the nonce is spent).
    assert chain.send(chain.a.stranger, attest_call(project, attestation))["status"] == 0

    state = chain.state(project)["milestones"][0]
    assert state["status"] == MilestoneStatus.ATTESTED and state["attested"]
    await sync(engine)
    resp = await client.get(f"/v1/projects/{project.address}", headers=worker.headers)
    assert resp.status == 200, await resp.text()
    milestone = (await resp.json())["milestones"][0]
    assert milestone["attestedOnChain"] is True
    assert milestone["status"] == "attested"
    assert milestone["latestVerifierJobId"] == record["id"]
    assert milestone["latestVerifierPasses"] is True
    assert milestone["latestEvidenceHash"] == attestation["evidenceHash"]
    # The other milestone was neither attested nor verified.
    other = (await (await client.get(f"/v1/projects/{project.address}")).json())["milestones"][1]
    assert other["attestedOnChain"] is False and other.get("latestVerifierJobId") is None


async def test_a_devnet_whose_clock_was_advanced_still_accepts_a_fresh_attestation(
    client: Any,
    chain: Chain,
    engine: IndexerEngine,
    pool: asyncpg.Pool,
    settings: Settings,
    verifier: JobWorker,
) -> None:
    project, worker = await disputed_project(client, chain, engine, pool, settings)
    chain.rpc("evm_increaseTime", 10 * DAY)
    chain.rpc("evm_mine")
    assert chain.now() > time.time() + 9 * DAY
    await sync(engine)

    record = await run_job(client, worker, project, settings)
    attestation = record["result"]["attestation"]
    # A deadline from the server's clock would be ten days in the chain's past.
    assert attestation["deadline"] > time.time() + 9 * DAY
    assert chain.now() < attestation["deadline"]
    receipt = chain.ok(chain.a.stranger, attest_call(project, attestation))
    assert chain.events(receipt, project, "MilestoneAttested")
    assert chain.state(project)["milestones"][0]["status"] == MilestoneStatus.ATTESTED
