"""Dispute evidence on a dispute raised on anvil and indexed into the read model."""

from __future__ import annotations

from typing import Any

from marketplace.indexer.engine import IndexerEngine
from tests.contracts.helpers import DAY, Chain, h
from tests.integration.records.conftest import error_code, link_dev_account
from tests.support.chain import sync


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


def nested(depth: int) -> dict[str, Any]:
    """An object ``depth`` levels deep (the object itself is level 1)."""
    value: dict[str, Any] = {"leaf": True}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


async def test_deep_evidence_is_refused_before_anything_is_stored(
    client: Any, chain: Chain, engine: IndexerEngine, pool: Any
) -> None:
    """Issue 9: a payload nested 256+ levels used to be committed, answer 500 and poison every
    later read of the list; at ~900 levels it crashed the shard after the commit."""
    a = chain.a
    project = chain.building()
    owner = await link_dev_account(client, a.owner)
    worker = await link_dev_account(client, a.worker)
    chain.dispute(project, 0)
    await sync(engine)
    path = f"/v1/projects/{project.address}/dispute-evidence"

    for depth in (33, 256, 900):
        for body in (
            {"evidenceHash": hex32(f"deep-{depth}"), "payload": nested(depth)},
            {
                "milestoneIndex": 0,
                "submitterAddress": owner.address,
                "evidenceHash": hex32(f"deep-{depth}"),
                "evidencePayload": nested(depth),
            },
        ):
            resp = await client.post(path, json=body, headers=owner.headers)
            assert await error_code(resp, 400) == "invalid_request"
    wide = {"items": [0] * 10_001}
    resp = await client.post(
        path, json={"evidenceHash": hex32("wide"), "payload": wide}, headers=owner.headers
    )
    assert await error_code(resp, 400) == "invalid_request"
    assert await pool.fetchval("SELECT count(*) FROM dispute_evidence") == 0

    # The limit itself is accepted, and the owner's one submission is still available.
    resp = await client.post(
        path, json={"evidenceHash": hex32("ok"), "payload": nested(32)}, headers=owner.headers
    )
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["evidencePayload"] == nested(32)

    # No stored value can make a read fail: plant what older code would have stored.
    await pool.execute(
        "UPDATE dispute_evidence SET evidence_payload = $1::text::jsonb",
        '{"n": ' * 5_000 + "1" + "}" * 5_000,
    )
    resp = await client.post(
        path,
        json={"evidenceHash": hex32("worker"), "payload": {"fine": [1, 2]}},
        headers=worker.headers,
    )
    assert resp.status == 201, await resp.text()
    for reader in (owner, worker):
        resp = await client.get(path, headers=reader.headers)
        assert resp.status == 200, await resp.text()
        items = (await resp.json())["items"]
        assert [i["submitterRole"] for i in items] == ["owner", "worker"]
        assert "evidencePayload" not in items[0]  # withheld, not fatal
        assert items[1]["evidencePayload"] == {"fine": [1, 2]}
