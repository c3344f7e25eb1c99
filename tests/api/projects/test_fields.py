"""Every field of the project and milestone read models, from the table columns to the JSON."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
from eth_utils import to_checksum_address

from marketplace.projects.models import (
    MilestoneListResponse,
    ProjectListResponse,
    ProjectReadModel,
)
from tests.api.projects import seed
from tests.api.projects.contract import conforms
from tests.unit.projects.cases import CASES

PROJECT_REQUIRED = {
    "projectAddress",
    "ownerAddress",
    "status",
    "effectiveStatus",
    "configHash",
    "createdAt",
    "updatedAt",
    "milestoneCount",
    "milestonePolicies",
    "milestones",
}


async def test_every_field_of_a_challenge_project(client: Any, db: asyncpg.Connection) -> None:
    now = int(time.time())
    owner, builder, raiser = seed.address(), seed.address(), seed.address()
    job = uuid.uuid4()
    project = await seed.project(
        db,
        owner_address=owner,
        status="bidding",
        project_mode="challenge",
        bidding_access="open",
        config_hash="0x" + "ab" * 32,
        selected_builder_address=builder,
        milestone_count=2,
        challenge_payout_usdc=10**30 + 7,  # beyond any float: must stay an exact decimal string
        challenge_submission_count=3,
        challenge_submission_window_seconds=86_400,
        challenge_owner_response_window_seconds=172_800,
        challenge_submission_deadline=now - 100,  # passed, with submissions: selection phase
        challenge_owner_response_deadline=now + 3600,
        dispute_phase="verifier_verdict",
        dispute_reason="low_quality",
        dispute_raised_by=raiser,
        dispute_milestone_index=1,
        dispute_opened_at=1_700_000_001,
        dispute_verdict_submitted_at=1_700_000_002,
        dispute_owner_evidence_hash=seed.bytes32(11),
        dispute_worker_evidence_hash=seed.bytes32(12),
        created_at=datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC),
        updated_at=datetime(2025, 3, 5, 0, 0, 0, 123456, tzinfo=UTC),
    )
    address = project["project_address"]
    await seed.metadata(
        db,
        address,
        owner,
        title="Build a bridge",
        description="Across the river",
        image_url="https://example.org/bridge.png",
        # the claimed mode/access are not what the read model reports: the chain is
        project_mode="standard",
        bidding_access="invite_only",
    )
    await seed.milestone(
        db,
        address,
        1,
        status="attested",
        payout_usdc=250,
        deadline_at=datetime(2025, 4, 1, tzinfo=UTC),
        submitted_at=datetime(2025, 4, 2, tzinfo=UTC),
        approved_at=datetime(2025, 4, 3, tzinfo=UTC),
        resolved_at=datetime(2025, 4, 4, tzinfo=UTC),
        delivery_ref_hash=seed.bytes32(21),
        latest_evidence_hash=seed.bytes32(22),
        attested_on_chain=True,
        latest_verifier_job_id=job,
        latest_verifier_passes=True,
    )
    await seed.milestone(db, address, 0)

    milestones = [
        {"milestoneIndex": 0, "status": "pending", "attestedOnChain": False, "checkPolicyId": None},
        {
            "milestoneIndex": 1,
            "status": "attested",
            "payoutUSDC": "250",
            "deadlineAt": "2025-04-01T00:00:00Z",
            "approvedAt": "2025-04-03T00:00:00Z",
            "resolvedAt": "2025-04-04T00:00:00Z",
            "submittedAt": "2025-04-02T00:00:00Z",
            "deliveryRefHash": seed.bytes32(21),
            "latestEvidenceHash": seed.bytes32(22),
            "latestVerifierJobId": str(job),
            "latestVerifierPasses": True,
            "attestedOnChain": True,
            "checkPolicyId": None,
        },
    ]
    expected = {
        "projectAddress": to_checksum_address(address),
        "ownerAddress": to_checksum_address(owner),
        "status": "bidding",
        "effectiveStatus": "building",
        "projectMode": "challenge",
        "biddingAccess": "open",
        "title": "Build a bridge",
        "description": "Across the river",
        "imageUrl": "https://example.org/bridge.png",
        "configHash": "0x" + "ab" * 32,
        "selectedBuilderAddress": to_checksum_address(builder),
        "createdAt": "2025-03-04T05:06:07Z",
        "updatedAt": "2025-03-05T00:00:00.123456Z",
        "milestoneCount": 2,
        "challengePayoutUSDC": str(10**30 + 7),
        "challengeSubmissionCount": 3,
        "challengeSubmissionWindowSeconds": 86_400,
        "challengeOwnerResponseWindowSeconds": 172_800,
        "challengeSubmissionDeadline": str(now - 100),
        "challengeOwnerResponseDeadline": str(now + 3600),
        "disputePhase": "verifier_verdict",
        "disputeReason": "low_quality",
        "disputeRaisedBy": to_checksum_address(raiser),
        "disputeMilestoneIndex": 1,
        "disputeOpenedAt": "1700000001",
        "disputeVerdictSubmittedAt": "1700000002",
        "disputeOwnerEvidenceHash": seed.bytes32(11),
        "disputeWorkerEvidenceHash": seed.bytes32(12),
        "milestonePolicies": [],
        "milestones": milestones,
    }
    assert expected["projectAddress"] != address  # checksumming changed the case

    resp = await client.get(f"/v1/projects/{address}")
    assert resp.status == 200
    assert conforms(ProjectReadModel, await resp.json()) == expected

    resp = await client.get("/v1/projects")
    assert resp.status == 200
    assert conforms(ProjectListResponse, await resp.json()) == {
        "items": [expected],
        "count": 1,
        "nextCursor": None,
    }

    resp = await client.get(f"/v1/projects/{address}/milestones")
    assert resp.status == 200
    assert conforms(MilestoneListResponse, await resp.json()) == {
        "projectAddress": to_checksum_address(address),
        "items": milestones,
        "count": 2,
    }


async def test_minimal_standard_project_omits_every_absent_field(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await seed.project(db, status="building", bid_bond_usdc=0)
    resp = await client.get(f"/v1/projects/{project['project_address']}")
    body = conforms(ProjectReadModel, await resp.json())
    assert resp.status == 200
    # no nulls anywhere; required fields present; optional ones only when they have a value
    assert None not in body.values()
    assert set(body) == PROJECT_REQUIRED | {"projectMode", "biddingAccess", "bidBondUSDC"}
    assert body["bidBondUSDC"] == "0"  # zero is a value, not an absence
    assert body["milestones"] == []
    assert body["milestonePolicies"] == []
    assert body["milestoneCount"] == 0
    assert "challengeSubmissionCount" not in body  # challenge mode only
    assert "title" not in body  # not claimed yet

    list_body = await (await client.get("/v1/projects")).json()
    assert list_body["items"] == [body]
    milestones = await (
        await client.get(f"/v1/projects/{project['project_address']}/milestones")
    ).json()
    assert milestones == {
        "projectAddress": body["projectAddress"],
        "items": [],
        "count": 0,
    }


async def test_challenge_submission_count_defaults_to_zero_in_challenge_mode(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await seed.project(db, project_mode="challenge", status="draft")
    body = await (await client.get(f"/v1/projects/{project['project_address']}")).json()
    assert body["challengeSubmissionCount"] == 0
    assert body["effectiveStatus"] == "draft"


async def test_metadata_of_another_owner_is_not_merged(client: Any, db: asyncpg.Connection) -> None:
    project = await seed.project(db)
    await seed.metadata(db, project["project_address"], seed.address(), title="Not yours")
    body = await (await client.get(f"/v1/projects/{project['project_address']}")).json()
    assert "title" not in body


async def test_metadata_without_optional_parts(client: Any, db: asyncpg.Connection) -> None:
    project = await seed.project(db)
    await seed.metadata(db, project["project_address"], project["owner_address"], title="Only")
    body = await (await client.get(f"/v1/projects/{project['project_address']}")).json()
    assert body["title"] == "Only"
    assert "description" not in body and "imageUrl" not in body


async def test_effective_status_is_derived_on_every_read(
    client: Any, db: asyncpg.Connection
) -> None:
    now = int(time.time())
    failed = await seed.project(
        db,
        project_mode="challenge",
        status="bidding",
        challenge_submission_count=0,
        challenge_submission_deadline=now - 10,
        challenge_owner_response_deadline=now + 1000,
    )
    fallback = await seed.project(
        db,
        project_mode="challenge",
        status="building",
        challenge_submission_count=2,
        challenge_submission_deadline=now - 2000,
        challenge_owner_response_deadline=now - 1000,
    )
    items = (await (await client.get("/v1/projects")).json())["items"]
    assert [(i["status"], i["effectiveStatus"]) for i in items] == [
        ("building", "dispute"),
        ("bidding", "failed"),
    ]
    for project, effective in ((failed, "failed"), (fallback, "dispute")):
        body = await (await client.get(f"/v1/projects/{project['project_address']}")).json()
        assert body["effectiveStatus"] == effective


async def test_sql_effective_status_agrees_with_the_rules(db: asyncpg.Connection) -> None:
    """The SQL twin used by the `effectiveStatus` filter gives the same answer on every case."""
    from marketplace.storage.repositories.projects import EFFECTIVE_STATUS_SQL

    sql = f"""
    SELECT {EFFECTIVE_STATUS_SQL.format(now="$1::bigint")}
    FROM (VALUES ($2::text, $3::text, $4::bigint, $5::integer, $6::bigint))
        AS p(project_mode, status, challenge_submission_deadline, challenge_submission_count,
             challenge_owner_response_deadline)
    """
    for case in CASES:
        got = await db.fetchval(
            sql, case.now, case.mode, case.status, case.sub, case.count, case.resp
        )
        assert got == case.expected, case.id
