"""Dispute evidence through HTTP on seeded disputes: both body shapes, one submission per party
(also under concurrency), visibility, limits. A dispute raised on a real chain is covered in
tests/integration/records."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg

from tests.api.identity.conftest import Wallet, link_wallet
from tests.api.records.conftest import (
    HASH_A,
    HASH_B,
    ZERO_HASH,
    AppFactory,
    Party,
    error_code,
    linked_party,
    random_address,
    seed_dispute,
    seed_project,
)
from tests.conftest import new_user

RECORD_FIELDS = {
    "id",
    "projectAddress",
    "milestoneIndex",
    "submitterAddress",
    "submitterRole",
    "evidenceHash",
    "createdAt",
}


def evidence_path(project: str) -> str:
    return f"/v1/projects/{project}/dispute-evidence"


async def submit(client: Any, party: Party, project: str, body: dict[str, Any]) -> Any:
    return await client.post(evidence_path(project), json=body, headers=party.headers)


async def dispute(client: Any, db: asyncpg.Connection, **values: Any) -> tuple[Party, Party, str]:
    owner, worker = await linked_party(client), await linked_party(client)
    project = await seed_dispute(db, owner.address, worker.address, **values)
    return owner, worker, project


async def test_owner_schema_shape_and_worker_payload_shape(
    client: Any, db: asyncpg.Connection
) -> None:
    owner, worker, project = await dispute(client, db, milestone=1)
    evidence = {"summary": "late and broken", "links": ["https://x.io/1"], "zeta": 1, "alpha": "é"}
    resp = await submit(
        client,
        owner,
        project,
        {
            "milestoneIndex": 1,
            "submitterAddress": owner.lower,
            "evidenceHash": HASH_A,
            "evidencePayload": evidence,
        },
    )
    assert resp.status == 201, await resp.text()
    record = await resp.json()
    assert set(record) == RECORD_FIELDS | {"evidencePayload"}
    assert record["submitterRole"] == "owner"
    assert record["submitterAddress"] == owner.address
    assert record["milestoneIndex"] == 1
    assert record["evidenceHash"] == HASH_A
    assert record["projectAddress"].lower() == project
    # Stored as sent: same object, same key order.
    assert list(record["evidencePayload"].items()) == list(evidence.items())

    resp = await submit(client, worker, project, {"evidenceHash": HASH_B, "payload": {"k": [1]}})
    assert resp.status == 201, await resp.text()
    record = await resp.json()
    assert record["submitterRole"] == "worker"
    assert record["submitterAddress"] == worker.address
    assert record["milestoneIndex"] == 1  # the active dispute's milestone
    assert record["evidencePayload"] == {"k": [1]}

    rows = await db.fetch(
        "SELECT submitter_role, submitter_address, dispute_opened_at, submitted_by"
        " FROM dispute_evidence ORDER BY created_at"
    )
    assert [tuple(r) for r in rows] == [
        ("owner", owner.lower, 1_700_000_000, owner.user.user_id),
        ("worker", worker.lower, 1_700_000_000, worker.user.user_id),
    ]


async def test_payload_is_optional_in_both_shapes(client: Any, db: asyncpg.Connection) -> None:
    owner, worker, project = await dispute(client, db, milestone=0)
    resp = await submit(
        client,
        owner,
        project,
        {"milestoneIndex": 0, "submitterAddress": owner.address, "evidenceHash": HASH_A},
    )
    assert resp.status == 201
    assert set(await resp.json()) == RECORD_FIELDS
    resp = await submit(client, worker, project, {"evidenceHash": HASH_A, "payload": None})
    assert resp.status == 201
    assert set(await resp.json()) == RECORD_FIELDS


async def test_one_submission_per_party_per_disputed_milestone(
    client: Any, db: asyncpg.Connection
) -> None:
    owner, worker, project = await dispute(client, db)
    assert (await submit(client, owner, project, {"evidenceHash": HASH_A})).status == 201
    for body in (
        {"evidenceHash": HASH_B},
        {"milestoneIndex": 1, "submitterAddress": owner.address, "evidenceHash": HASH_A},
    ):
        resp = await submit(client, owner, project, body)
        assert await error_code(resp, 409) == "dispute_evidence_already_submitted"
    # Another wallet of the same party counts as the same party.
    assert (await submit(client, worker, project, {"evidenceHash": HASH_A})).status == 201
    assert await db.fetchval("SELECT count(*) FROM dispute_evidence") == 2


async def test_concurrent_identical_submissions_store_exactly_one(
    client: Any, db: asyncpg.Connection
) -> None:
    owner, _worker, project = await dispute(client, db)
    body = {"evidenceHash": HASH_A, "payload": {"n": 1}}
    responses = await asyncio.gather(*(submit(client, owner, project, body) for _ in range(20)))
    statuses = sorted(r.status for r in responses)
    assert statuses == [201] + [409] * 19, statuses
    for resp in responses:
        if resp.status == 409:
            assert (await resp.json())["error"] == "dispute_evidence_already_submitted"
    assert await db.fetchval("SELECT count(*) FROM dispute_evidence") == 1


async def test_only_owner_and_selected_worker_may_submit(
    client: Any, db: asyncpg.Connection
) -> None:
    owner, _worker, project = await dispute(client, db)
    stranger = await linked_party(client)
    resp = await submit(client, stranger, project, {"evidenceHash": HASH_A})
    assert await error_code(resp, 403) == "not_dispute_party"
    resp = await submit(
        client,
        stranger,
        project,
        {"milestoneIndex": 1, "submitterAddress": stranger.address, "evidenceHash": HASH_A},
    )
    assert await error_code(resp, 403) == "not_dispute_party"
    # Naming the owner's wallet does not make anyone the owner.
    resp = await submit(
        client,
        stranger,
        project,
        {"milestoneIndex": 1, "submitterAddress": owner.address, "evidenceHash": HASH_A},
    )
    assert await error_code(resp, 403) == "wallet_not_linked"
    no_wallet = new_user()
    resp = await client.post(
        evidence_path(project), json={"evidenceHash": HASH_A}, headers=no_wallet.headers
    )
    assert await error_code(resp, 403) == "not_dispute_party"
    resp = await client.post(evidence_path(project), json={"evidenceHash": HASH_A})
    assert await error_code(resp, 401) == "unauthorized"
    assert await db.fetchval("SELECT count(*) FROM dispute_evidence") == 0


async def test_a_user_linking_both_parties_must_name_the_wallet(
    client: Any, db: asyncpg.Connection
) -> None:
    owner = await linked_party(client)
    worker_wallet = Wallet()
    await link_wallet(client, owner.headers, worker_wallet)
    project = await seed_dispute(db, owner.address, worker_wallet.address)
    resp = await submit(client, owner, project, {"evidenceHash": HASH_A})
    assert await error_code(resp, 400) == "submitter_ambiguous"
    resp = await submit(
        client,
        owner,
        project,
        {"milestoneIndex": 1, "submitterAddress": worker_wallet.address, "evidenceHash": HASH_A},
    )
    assert resp.status == 201
    assert (await resp.json())["submitterRole"] == "worker"


async def test_dispute_must_be_active_and_for_that_milestone(
    client: Any, db: asyncpg.Connection
) -> None:
    owner, worker, project = await dispute(client, db, milestone=1)
    resp = await submit(
        client,
        owner,
        project,
        {"milestoneIndex": 0, "submitterAddress": owner.address, "evidenceHash": HASH_A},
    )
    assert await error_code(resp, 409) == "milestone_not_disputed"

    building = await seed_project(
        db, owner_address=owner.lower, selected_builder_address=worker.lower, status="building"
    )
    for body in (
        {"evidenceHash": HASH_A},
        {"milestoneIndex": 0, "submitterAddress": owner.address, "evidenceHash": HASH_A},
    ):
        resp = await submit(client, owner, building, body)
        assert await error_code(resp, 409) == "no_active_dispute"

    # The verifier-verdict phase is still an active dispute (the override window is open).
    verdict = await seed_dispute(
        db, owner.address, worker.address, milestone=0, dispute_phase="verifier_verdict"
    )
    assert (await submit(client, worker, verdict, {"evidenceHash": HASH_A})).status == 201

    resp = await submit(client, owner, random_address(), {"evidenceHash": HASH_A})
    assert await error_code(resp, 404) == "project_not_found"


async def test_invite_only_dispute_is_hidden_from_strangers(
    client: Any, db: asyncpg.Connection
) -> None:
    owner, worker = await linked_party(client), await linked_party(client)
    # The worker was removed from the allowlist after selection: still a party.
    project = await seed_dispute(db, owner.address, worker.address, bidding_access="invite_only")
    stranger = await linked_party(client)
    resp = await submit(client, stranger, project, {"evidenceHash": HASH_A})
    assert await error_code(resp, 404) == "project_not_found"
    resp = await client.get(evidence_path(project), headers=stranger.headers)
    assert await error_code(resp, 404) == "project_not_found"
    assert (await submit(client, worker, project, {"evidenceHash": HASH_A})).status == 201


async def test_evidence_validation(client: Any, db: asyncpg.Connection) -> None:
    owner, _worker, project = await dispute(client, db)

    def blob(size: int) -> dict[str, str]:
        # {"d":"..."} is 8 bytes of framing; "é" is 2 bytes of UTF-8.
        body = size - 8
        return {"d": "é" * (body // 2) + "x" * (body % 2)}

    assert len(json.dumps(blob(64_000), ensure_ascii=False, separators=(",", ":")).encode()) == (
        64_000
    )
    bad: list[dict[str, Any]] = [
        {"evidenceHash": ZERO_HASH},
        {"evidenceHash": ZERO_HASH, "payload": {"a": 1}},
        {"milestoneIndex": 1, "submitterAddress": owner.address, "evidenceHash": ZERO_HASH},
        {"evidenceHash": "0x12"},
        {},
        {"payload": {"a": 1}},
        {"evidenceHash": HASH_A, "payload": [1, 2]},
        {"evidenceHash": HASH_A, "payload": "text"},
        {"evidenceHash": HASH_A, "payload": blob(64_001)},
        {
            "milestoneIndex": 1,
            "submitterAddress": owner.address,
            "evidenceHash": HASH_A,
            "evidencePayload": blob(64_001),
        },
        # Shapes do not mix.
        {"milestoneIndex": 1, "evidenceHash": HASH_A, "payload": {}},
        {"submitterAddress": owner.address, "evidenceHash": HASH_A},
        {"evidenceHash": HASH_A, "evidencePayload": {}},
        {"milestoneIndex": 65_536, "submitterAddress": owner.address, "evidenceHash": HASH_A},
        {"milestoneIndex": -1, "submitterAddress": owner.address, "evidenceHash": HASH_A},
    ]
    for body in bad:
        resp = await submit(client, owner, project, body)
        assert await error_code(resp, 400) == "invalid_request", body
    for raw in (
        "[]",
        f'{{"evidenceHash": "{HASH_A}", "payload": {{"x": NaN}}}}',
        f'{{"evidenceHash": "{HASH_A}", "payload": {{"x": "\\udc00"}}}}',
    ):
        resp = await client.post(
            evidence_path(project),
            data=raw,
            headers={**owner.headers, "Content-Type": "application/json"},
        )
        assert await error_code(resp, 400) == "invalid_request", raw
    assert await db.fetchval("SELECT count(*) FROM dispute_evidence") == 0

    resp = await submit(client, owner, project, {"evidenceHash": HASH_A, "payload": blob(64_000)})
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["evidencePayload"] == blob(64_000)


async def test_list_is_for_owner_worker_and_dispute_admins(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    admin_wallet = Wallet()
    client = await make_client(dispute_admin_wallets=[admin_wallet.address])
    admin_user = new_user()
    await link_wallet(client, admin_user.headers, admin_wallet)
    owner, worker = await linked_party(client), await linked_party(client)
    project = await seed_dispute(db, owner.address, worker.address, milestone=1)
    # Evidence of an earlier (seeded) dispute on milestone 0, then the current one.
    await db.execute(
        "INSERT INTO dispute_evidence (project_address, milestone_index, submitter_address,"
        " submitter_role, evidence_hash) VALUES ($1, 0, $2, 'worker', $3)",
        project,
        worker.lower,
        HASH_B,
    )
    assert (await submit(client, owner, project, {"evidenceHash": HASH_A})).status == 201

    for headers in (owner.headers, worker.headers, admin_user.headers):
        resp = await client.get(evidence_path(project), headers=headers)
        assert resp.status == 200
        body = await resp.json()
        assert body["milestoneIndex"] is None
        assert body["projectAddress"].lower() == project
        assert body["count"] == 2
        assert [(i["milestoneIndex"], i["submitterRole"]) for i in body["items"]] == [
            (0, "worker"),
            (1, "owner"),
        ]
    resp = await client.get(
        evidence_path(project), params={"milestoneIndex": "1"}, headers=admin_user.headers
    )
    body = await resp.json()
    assert body["milestoneIndex"] == 1
    assert [i["evidenceHash"] for i in body["items"]] == [HASH_A]

    stranger = await linked_party(client)
    resp = await client.get(evidence_path(project), headers=stranger.headers)
    assert await error_code(resp, 403) == "not_dispute_party"
    resp = await client.get(evidence_path(project), headers=new_user().headers)
    assert await error_code(resp, 403) == "not_dispute_party"
    resp = await client.get(evidence_path(project))
    assert await error_code(resp, 401) == "unauthorized"
    resp = await client.get(
        evidence_path(project), params={"milestoneIndex": "x"}, headers=owner.headers
    )
    assert await error_code(resp, 400) == "invalid_request"
    resp = await client.get(evidence_path(random_address()), headers=owner.headers)
    assert await error_code(resp, 404) == "project_not_found"

    # An admin may post nothing: reading is all the setting grants.
    resp = await client.post(
        evidence_path(project), json={"evidenceHash": HASH_A}, headers=admin_user.headers
    )
    assert await error_code(resp, 403) == "not_dispute_party"
