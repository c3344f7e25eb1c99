"""Events of the chain-backed producers on a real anvil: indexer batches (created, changed,
nothing for a replay), reorgs (chain.reorg, project.removed), claims, metadata edits and
challenge submissions."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from marketplace.chain.rpc import JsonRpcClient
from marketplace.indexer.engine import IndexerEngine
from marketplace.storage.pool import fetch_one
from marketplace.storage.repositories import events as repo
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment
from tests.conftest import Servers, new_user
from tests.contracts.helpers import USDC, Chain, h
from tests.integration.claims.conftest import accept_all_legal, link_dev_wallet
from tests.integration.claims.test_claims import (
    claim,
    create_on_chain,
    intent_claim,
    intent_hash_for,
    take_intent,
)
from tests.integration.events.conftest import warm_shards
from tests.integration.records.conftest import link_dev_account
from tests.support.apps import app_client
from tests.support.chain import (
    chain_settings,
    indexer_config,
    reverting_chain,
    start_devnet,
    sync,
)


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AnvilProcess, Deployment]]:
    with start_devnet(tmp_path_factory.mktemp("events-anvil"), fee_rate_bps=250) as started:
        yield started


@pytest.fixture
def chain(devnet: tuple[AnvilProcess, Deployment]) -> Iterator[Chain]:
    # The claim's intent checks compare block times with the server's clock.
    with reverting_chain(devnet[0].rpc_url, devnet[1], align_clock=True) as driver:
        yield driver


@pytest.fixture
async def engine(
    devnet: tuple[AnvilProcess, Deployment], pool: asyncpg.Pool, chain: Chain
) -> AsyncIterator[IndexerEngine]:
    rpc = JsonRpcClient(devnet[0].rpc_url)
    yield IndexerEngine(indexer_config(*devnet), pool, rpc)
    await rpc.close()


@pytest.fixture
async def client(
    aiohttp_client: Any,
    servers: Servers,
    devnet: tuple[AnvilProcess, Deployment],
    module_namespace: str,
    pool: asyncpg.Pool,
    chain: Chain,
) -> Any:
    settings = chain_settings(servers, *devnet, module_namespace, events_relay_enabled=False)
    client = await app_client(aiohttp_client, settings)
    await warm_shards(client)
    return client


async def events_after(pool: asyncpg.Pool, after_id: int = 0) -> list[repo.StoredEvent]:
    return await repo.read_after(pool, after_id, 1000)


def summary(rows: list[repo.StoredEvent]) -> list[tuple[str, str]]:
    return [(r.type, r.subject) for r in rows]


async def test_indexer_batches_record_what_changed_and_nothing_for_a_replay(
    engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    a = chain.a
    project = chain.create_standard(milestones=2)
    address = project.address.lower()
    await sync(engine)
    (created,) = await events_after(pool)
    assert (created.type, created.subject) == ("project.created", address)
    row = await fetch_one(
        pool,
        "SELECT created_block, created_log_index FROM projects WHERE project_address = $1",
        address,
    )
    assert created.payload["ownerAddress"] == a.owner.lower()
    assert created.payload["status"] == "draft"
    assert created.payload["milestoneCount"] == 2
    assert created.payload["createdBlock"] == row["created_block"]
    assert created.payload["createdLogIndex"] == row["created_log_index"]

    chain.ok(a.owner, project.functions.openBidding())
    await sync(engine)
    (opened,) = await events_after(pool, created.id)
    assert (opened.type, opened.subject) == ("project.changed", address)
    assert opened.payload["changes"] == {"status": "bidding"}
    assert opened.payload["milestones"] == []
    assert opened.payload["block"] > created.payload["block"]

    # A bid changes no project field, only the bids read model (issue 27): a project.changed
    # with the bid alone.
    chain.post_bid(project, a.worker, [300 * USDC, 700 * USDC], [86_400, 86_400])
    await sync(engine)
    (bid,) = await events_after(pool, opened.id)
    assert (bid.type, bid.subject) == ("project.changed", address)
    assert bid.payload["changes"] == {}
    assert bid.payload["milestones"] == []
    assert [b["bidderAddress"] for b in bid.payload["bids"]] == [a.worker.lower()]

    chain.select(project, a.worker)
    await sync(engine)
    (selected,) = await events_after(pool, bid.id)
    assert selected.payload["changes"]["status"] == "building"
    assert selected.payload["changes"]["selectedBuilderAddress"] == a.worker.lower()
    payouts = {
        m["milestoneIndex"]: m["changes"]["payoutUSDC"] for m in selected.payload["milestones"]
    }
    assert payouts == {0: "300", 1: "700"}

    # Replaying the indexed range (a crash before the cursor moved) rewrites identical rows.
    await pool.execute(
        "UPDATE indexer_cursors SET last_synced_block = $1", engine.config.start_block - 1
    )
    await sync(engine)
    assert await events_after(pool, selected.id) == []


async def test_a_reorg_records_chain_reorg_then_removals_then_the_new_history(
    engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    a = chain.a
    survivor = chain.create_standard(milestones=1)
    await sync(engine)
    fork_point = chain.rpc("evm_snapshot")
    fork_block = int(chain.rpc("eth_blockNumber"), 16)
    orphan = chain.create_standard(milestones=3)
    chain.ok(a.owner, survivor.functions.openBidding())
    await sync(engine)
    before_reorg = await events_after(pool)
    assert summary(before_reorg) == [
        ("project.created", survivor.address.lower()),
        ("project.created", orphan.address.lower()),
        ("project.changed", survivor.address.lower()),
    ]
    synced = int(chain.rpc("eth_blockNumber"), 16)

    assert chain.rpc("evm_revert", fork_point) is True
    replacement = chain.create_standard(milestones=2, owner=a.bidder3)
    while int(chain.rpc("eth_blockNumber"), 16) <= synced:
        chain.rpc("evm_mine")
    await sync(engine)

    after = await events_after(pool, before_reorg[-1].id)
    assert replacement.address == orphan.address  # clone addresses follow the registry's nonce
    address = orphan.address.lower()
    assert summary(after) == [
        ("chain.reorg", f"chain:{engine.config.chain_id}"),
        ("project.removed", address),
        ("project.changed", survivor.address.lower()),
        ("project.created", address),
    ]
    reorg, removed, reverted, recreated = after
    assert reorg.payload["forkBlock"] == fork_block
    assert reorg.payload["depth"] == synced - fork_block
    assert reorg.payload["previousSyncedBlock"] == synced
    assert reorg.payload["removedProjects"] == [address]
    assert survivor.address.lower() in reorg.payload["resnapshotProjects"]
    assert removed.payload == {"reason": "reorg", "forkBlock": fork_block}
    assert reverted.payload["changes"] == {"status": "draft"}
    assert recreated.payload["ownerAddress"] == a.bidder3.lower()
    assert recreated.payload["milestoneCount"] == 2


async def test_claims_and_metadata_edits_record_their_events(
    client: Any, engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    user = new_user()
    await link_dev_wallet(client, user.headers, chain.a.owner)
    await accept_all_legal(client, user.headers)
    intent = await take_intent(client, user)
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent))
    resp = await claim(client, project, intent_claim(intent, tx_hash), user.headers)
    assert resp.status == 200, await resp.text()
    again = await claim(client, project, intent_claim(intent, tx_hash), user.headers)
    assert (await again.json())["status"] == "already_claimed"
    other = new_user()
    await link_dev_wallet(client, other.headers, chain.a.worker)
    refused = await claim(client, project, intent_claim(intent, tx_hash), other.headers)
    assert refused.status == 409

    (claimed,) = await events_after(pool)
    assert (claimed.type, claimed.subject) == ("project.claimed", project.lower())
    config_hash = intent_hash_for(user, intent)
    assert claimed.payload == {
        "ownerAddress": chain.a.owner.lower(),
        "userId": str(user.user_id),
        "claimMode": "intent",
        "configHash": config_hash.lower(),
        "txHash": tx_hash.lower(),
    }

    await sync(engine)
    resp = await client.patch(
        f"/v1/projects/{project}/metadata",
        json={"title": "Renamed", "imageUrl": None},
        headers=user.headers,
    )
    assert resp.status == 200, await resp.text()
    rows = await events_after(pool, claimed.id)
    assert summary(rows) == [
        ("project.created", project.lower()),
        ("project.metadata_updated", project.lower()),
    ]
    assert rows[1].payload == {
        "userId": str(user.user_id),
        "changes": {"title": "Renamed", "imageUrl": None},
    }


async def test_challenge_submissions_record_created_then_updated(
    client: Any, engine: IndexerEngine, chain: Chain, pool: asyncpg.Pool
) -> None:
    a = chain.a
    project = chain.create_challenge()
    address = project.address.lower()
    chain.ok(a.submitter, project.functions.submitChallengeSubmission(h("artifact-v1")))
    submitter = await link_dev_account(client, a.submitter)
    await sync(engine)
    start = (await events_after(pool))[-1].id
    url = f"/v1/projects/{project.address}/challenge-submissions"
    body = {"submitterAddress": a.submitter, "submissionHash": "0x" + h("artifact-v1").hex()}

    resp = await client.post(url, json=body, headers=submitter.headers)
    assert resp.status == 200, await resp.text()
    record = await resp.json()
    resp = await client.post(url, json=body, headers=submitter.headers)  # identical
    assert resp.status == 200
    resp = await client.post(url, json={**body, "notes": "v1b"}, headers=submitter.headers)
    assert resp.status == 200

    rows = await events_after(pool, start)
    assert summary(rows) == [
        ("challenge_submission.created", address),
        ("challenge_submission.updated", address),
    ]
    assert rows[0].payload == {
        "submissionId": record["id"],
        "projectAddress": address,
        "submitterAddress": a.submitter.lower(),
        "submissionHash": body["submissionHash"],
        "userId": str(submitter.user.user_id),
    }
