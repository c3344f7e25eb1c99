"""Every records route: anonymous refused, guarded POSTs (verified e-mail, then legal assent,
before validation), and the OpenAPI description of the routes."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from openapi_spec_validator import validate

from tests.api.records.conftest import (
    HASH_A,
    AppFactory,
    error_code,
    linked_party,
    random_address,
    seed_project,
)

POSTS = ("bid-drafts", "challenge-submissions", "dispute-evidence")
ADDRESS_PATTERN = "^0x[0-9a-fA-F]{40}$"  # spec, "Conventions"


def path(project: str, record: str) -> str:
    return f"/v1/projects/{project}/{record}"


@pytest.mark.parametrize("record", POSTS)
async def test_anonymous_is_refused_on_every_route(client: Any, record: str) -> None:
    project = random_address()
    resp = await client.get(path(project, record))
    assert await error_code(resp, 401) == "unauthorized"
    resp = await client.post(path(project, record), json={"evidenceHash": HASH_A})
    assert await error_code(resp, 401) == "unauthorized"
    resp = await client.get(path(project, record), headers={"Authorization": "Bearer not-a-jwt"})
    assert await error_code(resp, 401) == "unauthorized"


async def test_unverified_email_is_refused_before_validation(
    client: Any, db: asyncpg.Connection
) -> None:
    party = await linked_party(client, email_verified=False)
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    for record in POSTS:
        for body in ({}, {"bidderWalletAddress": party.address, "draftHash": HASH_A}):
            resp = await client.post(path(project, record), json=body, headers=party.headers)
            assert await error_code(resp, 403) == "email_not_verified", record
    # Reads are not guarded.
    resp = await client.get(path(project, "bid-drafts"), headers=party.headers)
    assert await error_code(resp, 403) == "not_project_owner"
    assert await db.fetchval("SELECT count(*) FROM bid_drafts") == 0
    assert await db.fetchval("SELECT count(*) FROM legal_acceptances") == 0


async def test_strict_legal_mode_blocks_and_implicit_mode_records_assent(
    make_client: AppFactory, servers: Any
) -> None:
    strict = await make_client(legal_acceptance_mode="strict")
    party = await linked_party(strict)
    for record in POSTS:
        resp = await strict.post(path(random_address(), record), json={}, headers=party.headers)
        assert await error_code(resp, 403) == "legal_acceptance_required"
        assert (await resp.json())["missing"]

    implicit = await make_client(legal_acceptance_mode="implicit")
    party = await linked_party(implicit)
    resp = await implicit.post(path(random_address(), "bid-drafts"), json={}, headers=party.headers)
    assert await error_code(resp, 400) == "invalid_request"
    conn = await asyncpg.connect(servers.database_url)
    try:
        routes = await conn.fetch(
            "SELECT DISTINCT trigger_route FROM legal_acceptances WHERE user_id = $1",
            party.user.user_id,
        )
    finally:
        await conn.close()
    assert [r["trigger_route"] for r in routes] == ["POST /v1/projects/{projectAddress}/bid-drafts"]


ROUTES = {
    ("post", "bid-drafts"): ("upsertBidDraft", "BidDraftRecord", "BidDraftUpsertRequest", "200"),
    ("get", "bid-drafts"): ("listBidDrafts", "BidDraftListResponse", None, "200"),
    ("post", "challenge-submissions"): (
        "upsertChallengeSubmission",
        "ChallengeSubmissionRecord",
        "ChallengeSubmissionUpsertRequest",
        "200",
    ),
    ("get", "challenge-submissions"): (
        "listChallengeSubmissions",
        "ChallengeSubmissionListResponse",
        None,
        "200",
    ),
    ("post", "dispute-evidence"): (
        "submitDisputeEvidence",
        "DisputeEvidenceRecord",
        "DisputeEvidenceRequest",
        "201",
    ),
    ("get", "dispute-evidence"): (
        "listDisputeEvidence",
        "DisputeEvidenceListResponse",
        None,
        "200",
    ),
}
CODES = {
    ("post", "bid-drafts"): (
        "wallet_not_linked",
        "owner_cannot_bid",
        "bidder_not_allowlisted",
        "project_not_found",
        "project_mode_mismatch",
        "project_not_bidding",
        "email_not_verified",
        "legal_acceptance_required",
    ),
    ("get", "bid-drafts"): ("not_project_owner", "project_not_found"),
    ("post", "challenge-submissions"): ("submission_hash_mismatch", "project_mode_mismatch"),
    ("get", "challenge-submissions"): ("not_challenge_participant",),
    ("post", "dispute-evidence"): (
        "submitter_ambiguous",
        "not_dispute_party",
        "no_active_dispute",
        "milestone_not_disputed",
        "dispute_evidence_already_submitted",
    ),
    ("get", "dispute-evidence"): ("not_dispute_party",),
}


async def test_routes_are_documented(client: Any) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    validate(doc)
    schemas = doc["components"]["schemas"]
    for (method, record), (operation_id, response, request, ok) in ROUTES.items():
        operation = doc["paths"][f"/v1/projects/{{projectAddress}}/{record}"][method]
        assert operation["operationId"] == operation_id
        content = operation["responses"][ok]["content"]["application/json"]
        assert content["schema"]["$ref"].endswith(f"/{response}")
        assert operation["security"] == [{"sessionBearer": []}, {"agentApiKey": []}]
        assert operation.get("x-guarded", False) is (method == "post")
        if request:
            body = operation["requestBody"]["content"]["application/json"]["schema"]
            assert body["$ref"].endswith(f"/{request}")
        [param] = operation["parameters"][:1]
        assert (param["name"], param["in"]) == ("projectAddress", "path")
        assert param["schema"]["pattern"] == ADDRESS_PATTERN
        described = " ".join(r["description"] for r in operation["responses"].values())
        for code in CODES[(method, record)]:
            assert f"`{code}`" in described, (method, record, code)

    shapes = schemas["DisputeEvidenceRequest"]["oneOf"]
    assert [s["$ref"].rsplit("/", 1)[1] for s in shapes] == [
        "DisputeEvidenceSubmitRequest",
        "DisputeEvidencePayloadRequest",
    ]
    full = schemas["DisputeEvidenceSubmitRequest"]
    assert set(full["required"]) == {"milestoneIndex", "submitterAddress", "evidenceHash"}
    assert full["properties"]["milestoneIndex"]["maximum"] == 65535
    assert schemas["DisputeEvidencePayloadRequest"]["required"] == ["evidenceHash"]
    draft = schemas["BidDraftUpsertRequest"]["properties"]
    uri = draft["artifactUri"]["anyOf"][0]
    assert uri["maxLength"] == 1024
    assert uri["pattern"].startswith("^(https|ipfs)://")
    assert draft["notes"]["anyOf"][0]["maxLength"] == 4000
    assert draft["draftHash"]["pattern"] == "^0x[0-9a-fA-F]{64}$"
    assert draft["bidderWalletAddress"]["pattern"] == ADDRESS_PATTERN
    listing = schemas["DisputeEvidenceListResponse"]
    assert set(listing["required"]) == {"projectAddress", "milestoneIndex", "items", "count"}
    roles = schemas["DisputeEvidenceRecord"]["properties"]["submitterRole"]
    role_schema = schemas[roles["$ref"].rsplit("/", 1)[1]] if "$ref" in roles else roles
    assert role_schema["enum"] == ["owner", "worker"]


def _upper(address: str) -> str:
    return "0x" + address[2:].upper()


async def test_addresses_are_lower_cased_at_the_edge(client: Any, db: asyncpg.Connection) -> None:
    """Path, body and query addresses in any case reach the rules and the tables lower-case;
    a malformed one is 400 `invalid_request` naming where it was."""
    owner = await linked_party(client)
    bidder = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)

    resp = await client.post(
        path(_upper(project), "bid-drafts"),
        json={"bidderWalletAddress": _upper(bidder.lower), "draftHash": HASH_A},
        headers=bidder.headers,
    )
    assert resp.status == 200, await resp.text()
    stored = await db.fetch("SELECT project_address, bidder_address FROM bid_drafts")
    assert [tuple(row) for row in stored] == [(project, bidder.lower)]
    resp = await client.get(
        path(_upper(project), "bid-drafts"),
        params={"bidderWalletAddress": _upper(bidder.lower)},
        headers=owner.headers,
    )
    listing = await resp.json()
    assert resp.status == 200, listing
    assert listing["count"] == 1
    assert listing["bidderWalletAddress"] == bidder.address  # checksummed on the way out

    bad = "0x" + "g" * 40
    drafts = path(project, "bid-drafts")
    for location, field, method, url, options in (
        ("path", "projectAddress", "GET", path(bad, "bid-drafts"), {"headers": owner.headers}),
        (
            "body",
            "bidderWalletAddress",
            "POST",
            drafts,
            {"json": {"bidderWalletAddress": bad, "draftHash": HASH_A}, "headers": bidder.headers},
        ),
        (
            "query",
            "bidderWalletAddress",
            "GET",
            drafts,
            {"params": {"bidderWalletAddress": bidder.lower[:-1]}, "headers": owner.headers},
        ),
    ):
        resp = await client.request(method, url, **options)
        assert await error_code(resp, 400) == "invalid_request"
        details = (await resp.json())["details"]
        assert [(d["location"], d["field"]) for d in details] == [(location, field)]
