"""Dispute evidence on a dispute raised on anvil and indexed into the read model."""

from __future__ import annotations

from typing import Any

from marketplace.indexer.engine import IndexerEngine
from tests.contracts.helpers import DAY, Chain, h
from tests.integration.records.conftest import error_code, link_dev_account, sync


def hex32(label: str) -> str:
    return "0x" + h(label).hex()


async def test_parties_submit_evidence_for_the_disputed_milestone(
    client: Any, chain: Chain, engine: IndexerEngine
) -> None:
    a = chain.a
    project = chain.building()
    address = project.address
    owner = await link_dev_account(client, a.owner)
    worker = await link_dev_account(client, a.worker)
    bidder = await link_dev_account(client, a.stranger)
    path = f"/v1/projects/{address}/dispute-evidence"
    await sync(engine)
    resp = await client.post(path, json={"evidenceHash": hex32("early")}, headers=owner.headers)
    assert await error_code(resp, 409) == "no_active_dispute"

    chain.dispute(project, 0)
    await sync(engine)
    resp = await client.post(
        path,
        json={
            "milestoneIndex": 1,
            "submitterAddress": owner.address,
            "evidenceHash": hex32("owner-evidence"),
        },
        headers=owner.headers,
    )
    assert await error_code(resp, 409) == "milestone_not_disputed"
    resp = await client.post(
        path,
        json={"evidenceHash": hex32("owner-evidence"), "payload": {"why": "tests fail"}},
        headers=owner.headers,
    )
    assert resp.status == 201, await resp.text()
    record = await resp.json()
    assert (record["milestoneIndex"], record["submitterRole"]) == (0, "owner")
    assert record["submitterAddress"] == a.owner
    resp = await client.post(
        path,
        json={
            "milestoneIndex": 0,
            "submitterAddress": worker.address,
            "evidenceHash": hex32("worker-evidence"),
            "evidencePayload": {"why": "they pass"},
        },
        headers=worker.headers,
    )
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["submitterRole"] == "worker"
    resp = await client.post(path, json={"evidenceHash": hex32("x")}, headers=bidder.headers)
    assert await error_code(resp, 403) == "not_dispute_party"

    resp = await client.get(path, headers=worker.headers)
    body = await resp.json()
    assert body["count"] == 2
    assert [i["submitterRole"] for i in body["items"]] == ["owner", "worker"]
    resp = await client.get(path, headers=bidder.headers)
    assert await error_code(resp, 403) == "not_dispute_party"

    # The verdict, then the end of the override window: the dispute is over.
    chain.attest(project, 0, passes=True)
    chain.mine_at(chain.now() + 2 * DAY + 10)
    chain.ok(a.stranger, project.functions.finalizeDispute())
    await sync(engine)
    resp = await client.post(path, json={"evidenceHash": hex32("late")}, headers=owner.headers)
    assert await error_code(resp, 409) == "no_active_dispute"
    resp = await client.get(path, params={"milestoneIndex": "0"}, headers=owner.headers)
    assert (await resp.json())["count"] == 2
