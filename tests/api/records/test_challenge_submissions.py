"""Challenge submissions through HTTP: the rules decided before the chain is read, and who sees
which registrations. The on-chain hash check runs against anvil in tests/integration/records."""

from __future__ import annotations

from typing import Any

import asyncpg

from tests.api.identity.conftest import Wallet, link_wallet
from tests.api.records.conftest import (
    HASH_A,
    HASH_B,
    ZERO_HASH,
    Party,
    error_code,
    linked_party,
    random_address,
    seed_project,
)
from tests.conftest import new_user


def submissions_path(project: str) -> str:
    return f"/v1/projects/{project}/challenge-submissions"


async def post_submission(client: Any, party: Party, project: str, **body: Any) -> Any:
    payload = {"submitterAddress": party.address, "submissionHash": HASH_A, **body}
    return await client.post(submissions_path(project), json=payload, headers=party.headers)


async def seed_challenge(db: asyncpg.Connection, owner: Party, **values: Any) -> str:
    fields: dict[str, Any] = {
        "owner_address": owner.lower,
        "project_mode": "challenge",
        "challenge_submission_count": 3,
    }
    fields.update(values)
    return await seed_project(db, **fields)


async def register(db: asyncpg.Connection, project: str, submitter: str, digest: str) -> None:
    """A registration as the shard writes it after a successful chain check."""
    await db.execute(
        "INSERT INTO challenge_submissions (project_address, submitter_address, submission_hash,"
        " notes) VALUES ($1, $2, $3, 'n')",
        project,
        submitter.lower(),
        digest,
    )


async def test_rules_checked_before_the_chain(client: Any, db: asyncpg.Connection) -> None:
    owner, submitter, stranger = [await linked_party(client) for _ in range(3)]
    challenge = await seed_challenge(db, owner)
    standard = await seed_project(db, owner_address=owner.lower)

    resp = await post_submission(client, stranger, challenge, submitterAddress=submitter.address)
    assert await error_code(resp, 403) == "wallet_not_linked"
    resp = await post_submission(client, submitter, random_address())
    assert await error_code(resp, 404) == "project_not_found"
    resp = await post_submission(client, submitter, standard)
    assert await error_code(resp, 409) == "project_mode_mismatch"
    resp = await client.post(
        submissions_path(challenge),
        json={"submitterAddress": submitter.address, "submissionHash": HASH_A},
    )
    assert await error_code(resp, 401) == "unauthorized"
    for bad in (
        {"submissionHash": ZERO_HASH},
        {"submissionHash": "0xabc"},
        {"artifactUri": "http://insecure.example"},
        {"notes": "n" * 4001},
        {"extra": True},
    ):
        resp = await post_submission(client, submitter, challenge, **bad)
        assert await error_code(resp, 400) == "invalid_request", bad
    assert await db.fetchval("SELECT count(*) FROM challenge_submissions") == 0


async def test_owner_sees_all_submitter_sees_own_others_refused(
    client: Any, db: asyncpg.Connection
) -> None:
    owner = await linked_party(client)
    first, second = await linked_party(client), await linked_party(client)
    project = await seed_challenge(db, owner, challenge_submission_count=3)
    await register(db, project, first.address, HASH_A)
    await register(db, project, second.address, HASH_B)

    resp = await client.get(submissions_path(project), headers=owner.headers)
    assert resp.status == 200
    body = await resp.json()
    assert body["onchainSubmissionCount"] == 3
    assert body["submitterAddress"] is None
    assert body["count"] == 2
    assert [i["submitterAddress"] for i in body["items"]] == [first.address, second.address]
    assert set(body["items"][0]) == {
        "id",
        "projectAddress",
        "submitterAddress",
        "submissionHash",
        "notes",
        "createdAt",
        "updatedAt",
    }

    resp = await client.get(
        submissions_path(project), params={"submitterAddress": second.lower}, headers=owner.headers
    )
    body = await resp.json()
    assert body["submitterAddress"] == second.address
    assert [i["submissionHash"] for i in body["items"]] == [HASH_B]

    # A submitter sees their own registration only, whatever the filter says.
    resp = await client.get(submissions_path(project), headers=first.headers)
    body = await resp.json()
    assert [i["submitterAddress"] for i in body["items"]] == [first.address]
    assert body["count"] == 1
    assert body["onchainSubmissionCount"] == 3
    resp = await client.get(
        submissions_path(project),
        params={"submitterAddress": second.address},
        headers=first.headers,
    )
    body = await resp.json()
    assert body["items"] == [] and body["count"] == 0

    # A second wallet of the first submitter's user widens what that user sees to both.
    extra = Wallet()
    await link_wallet(client, first.headers, extra)
    await register(db, project, extra.address, HASH_B)
    resp = await client.get(submissions_path(project), headers=first.headers)
    assert (await resp.json())["count"] == 2

    stranger = await linked_party(client)
    for headers in (stranger.headers, new_user().headers):
        resp = await client.get(submissions_path(project), headers=headers)
        assert await error_code(resp, 403) == "not_challenge_participant"
    resp = await client.get(submissions_path(project))
    assert await error_code(resp, 401) == "unauthorized"

    # Revoking the link ends the access.
    resp = await client.delete(f"/v1/wallet-links/{second.address}", headers=second.headers)
    assert resp.status == 200
    resp = await client.get(submissions_path(project), headers=second.headers)
    assert await error_code(resp, 403) == "not_challenge_participant"


async def test_list_needs_an_indexed_challenge_project(client: Any, db: asyncpg.Connection) -> None:
    owner = await linked_party(client)
    resp = await client.get(submissions_path(random_address()), headers=owner.headers)
    assert await error_code(resp, 404) == "project_not_found"
    standard = await seed_project(db, owner_address=owner.lower)
    resp = await client.get(submissions_path(standard), headers=owner.headers)
    assert await error_code(resp, 409) == "project_mode_mismatch"
    # No on-chain submissions yet: the count is 0, not absent.
    fresh = await seed_challenge(db, owner, challenge_submission_count=None)
    resp = await client.get(submissions_path(fresh), headers=owner.headers)
    assert (await resp.json()) == {
        "projectAddress": (await resp.json())["projectAddress"],
        "submitterAddress": None,
        "onchainSubmissionCount": 0,
        "items": [],
        "count": 0,
    }
