"""Challenge submissions against anvil: the hash is compared with challengeSubmissionOf() of the
real project contract; the read model comes from the indexer."""

from __future__ import annotations

from typing import Any

import asyncpg

from marketplace.indexer.engine import IndexerEngine
from tests.contracts.helpers import Chain, h
from tests.integration.records.conftest import (
    ChainParty,
    error_code,
    link_dev_account,
)
from tests.support.chain import sync


def hex32(label: str) -> str:
    return "0x" + h(label).hex()


async def post(client: Any, party: ChainParty, project: str, digest: str, **extra: Any) -> Any:
    return await client.post(
        f"/v1/projects/{project}/challenge-submissions",
        json={"submitterAddress": party.address, "submissionHash": digest, **extra},
        headers=party.headers,
    )


async def test_submission_hash_must_match_the_chain(
    client: Any, chain: Chain, engine: IndexerEngine, pool: asyncpg.Pool
) -> None:
    a = chain.a
    project = chain.create_challenge()
    address = project.address
    chain.ok(a.submitter, project.functions.submitChallengeSubmission(h("artifact-v1")))
    submitter = await link_dev_account(client, a.submitter)
    owner = await link_dev_account(client, a.owner)
    late = await link_dev_account(client, a.bidder2)

    # Not indexed yet: the rules read the read model, not the chain.
    resp = await post(client, submitter, address, hex32("artifact-v1"))
    assert await error_code(resp, 404) == "project_not_found"
    await sync(engine)

    resp = await post(client, submitter, address, hex32("something-else"))
    assert await error_code(resp, 409) == "submission_hash_mismatch"
    # No on-chain submission at all (and the owner can never have one).
    resp = await post(client, late, address, hex32("artifact-v1"))
    assert await error_code(resp, 409) == "submission_hash_mismatch"
    resp = await post(client, owner, address, hex32("artifact-v1"))
    assert await error_code(resp, 409) == "submission_hash_mismatch"
    assert await pool.fetchval("SELECT count(*) FROM challenge_submissions") == 0

    resp = await post(
        client, submitter, address, hex32("artifact-v1"), artifactUri="ipfs://cid-v1", notes="v1"
    )
    assert resp.status == 200, await resp.text()
    first = await resp.json()
    assert first["submitterAddress"] == a.submitter
    assert first["projectAddress"] == address
    assert first["submissionHash"] == hex32("artifact-v1")
    assert first["artifactUri"] == "ipfs://cid-v1"

    # The submitter replaces the submission on chain. An update with the unchanged (now stale)
    # hash touches metadata only and is not checked again ...
    chain.ok(a.submitter, project.functions.submitChallengeSubmission(h("artifact-v2")))
    resp = await post(
        client, submitter, address, hex32("artifact-v1"), artifactUri="https://x.io/v1b"
    )
    assert resp.status == 200, await resp.text()
    meta_only = await resp.json()
    assert meta_only["id"] == first["id"]
    assert meta_only["submissionHash"] == hex32("artifact-v1")
    assert meta_only["artifactUri"] == "https://x.io/v1b"
    assert "notes" not in meta_only
    # ... while a changed hash must match the chain's current one.
    resp = await post(client, submitter, address, hex32("artifact-v3"))
    assert await error_code(resp, 409) == "submission_hash_mismatch"
    resp = await post(client, submitter, address, hex32("artifact-v2"), notes="v2")
    assert resp.status == 200, await resp.text()
    second = await resp.json()
    assert second["id"] == first["id"]
    assert second["submissionHash"] == hex32("artifact-v2")
    assert second["createdAt"] == first["createdAt"]

    await sync(engine)
    resp = await client.get(f"/v1/projects/{address}/challenge-submissions", headers=owner.headers)
    body = await resp.json()
    assert resp.status == 200
    assert body["onchainSubmissionCount"] == 1
    assert [(i["submitterAddress"], i["submissionHash"]) for i in body["items"]] == [
        (a.submitter, hex32("artifact-v2"))
    ]
    resp = await client.get(f"/v1/projects/{address}/challenge-submissions", headers=late.headers)
    assert await error_code(resp, 403) == "not_challenge_participant"
    rows = await pool.fetch("SELECT submitter_address, notes FROM challenge_submissions")
    assert [tuple(r) for r in rows] == [(a.submitter.lower(), "v2")]


async def test_standard_projects_take_no_challenge_submissions(
    client: Any, chain: Chain, engine: IndexerEngine
) -> None:
    project = chain.open_standard()
    await sync(engine)
    bidder = await link_dev_account(client, chain.a.worker)
    resp = await post(client, bidder, project.address, hex32("x"))
    assert await error_code(resp, 409) == "project_mode_mismatch"
