"""Bid drafts through HTTP: upsert rules, owner-only listing, validation limits."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from tests.api.identity.conftest import Wallet, agent, create_key, link_wallet
from tests.api.records.conftest import (
    HASH_A,
    HASH_B,
    Party,
    error_code,
    linked_party,
    random_address,
    seed_project,
)
from tests.conftest import new_user


def drafts_path(project: str) -> str:
    return f"/v1/projects/{project}/bid-drafts"


async def post_draft(client: Any, party: Party, project: str, **body: Any) -> Any:
    payload = {"bidderWalletAddress": party.address, "draftHash": HASH_A, **body}
    return await client.post(drafts_path(project), json=payload, headers=party.headers)


async def test_upsert_creates_then_replaces_one_draft_per_bidder(
    client: Any, db: asyncpg.Connection
) -> None:
    owner = await linked_party(client)
    bidder = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)

    resp = await post_draft(
        client,
        bidder,
        project,
        bidderWalletAddress=bidder.lower,  # any case in, checksummed out
        draftHash=HASH_A.upper().replace("0X", "0x"),
        artifactUri="ipfs://bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi",
        notes="first version",
    )
    assert resp.status == 200, await resp.text()
    created = await resp.json()
    assert set(created) == {
        "id",
        "projectAddress",
        "bidderWalletAddress",
        "draftHash",
        "artifactUri",
        "notes",
        "createdAt",
        "updatedAt",
    }
    assert created["projectAddress"].lower() == project
    assert created["projectAddress"] != project  # EIP-55 checksummed
    assert created["bidderWalletAddress"] == bidder.address
    assert created["draftHash"] == HASH_A
    assert created["notes"] == "first version"
    assert created["createdAt"] == created["updatedAt"]

    resp = await post_draft(client, bidder, project, draftHash=HASH_B, artifactUri="https://x.io/d")
    assert resp.status == 200
    updated = await resp.json()
    assert updated["id"] == created["id"]
    assert updated["draftHash"] == HASH_B
    assert updated["artifactUri"] == "https://x.io/d"
    assert "notes" not in updated  # the body is the whole draft: omitted notes are cleared
    assert updated["createdAt"] == created["createdAt"]
    assert datetime.fromisoformat(updated["updatedAt"]) > datetime.fromisoformat(
        created["updatedAt"]
    )
    rows = await db.fetch("SELECT bidder_address, draft_hash, notes FROM bid_drafts")
    assert [tuple(r) for r in rows] == [(bidder.lower, HASH_B, None)]


async def test_identical_repeat_changes_nothing(client: Any, db: asyncpg.Connection) -> None:
    bidder = await linked_party(client)
    project = await seed_project(db)
    first = await (await post_draft(client, bidder, project, notes="n")).json()
    again = await post_draft(client, bidder, project, notes="n")
    assert again.status == 200
    assert await again.json() == first


async def test_owner_lists_drafts_with_optional_bidder_filter(
    client: Any, db: asyncpg.Connection
) -> None:
    owner = await linked_party(client)
    first, second = await linked_party(client), await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    other_project = await seed_project(db, owner_address=owner.lower)
    for party, target in ((first, project), (second, project), (second, other_project)):
        assert (await post_draft(client, party, target)).status == 200

    resp = await client.get(drafts_path(project), headers=owner.headers)
    assert resp.status == 200
    body = await resp.json()
    assert body["bidderWalletAddress"] is None
    assert body["count"] == 2
    assert [i["bidderWalletAddress"] for i in body["items"]] == [first.address, second.address]
    assert {i["projectAddress"].lower() for i in body["items"]} == {project}

    resp = await client.get(
        drafts_path(project), params={"bidderWalletAddress": second.lower}, headers=owner.headers
    )
    body = await resp.json()
    assert body["bidderWalletAddress"] == second.address
    assert [i["bidderWalletAddress"] for i in body["items"]] == [second.address]
    assert body["count"] == 1

    resp = await client.get(
        drafts_path(project),
        params={"bidderWalletAddress": random_address()},
        headers=owner.headers,
    )
    assert (await resp.json())["count"] == 0

    resp = await client.get(
        drafts_path(project), params={"bidderWalletAddress": "0x123"}, headers=owner.headers
    )
    assert await error_code(resp, 400) == "invalid_request"


async def test_only_the_owner_reads_drafts(client: Any, db: asyncpg.Connection) -> None:
    owner = await linked_party(client)
    bidder = await linked_party(client)
    stranger = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    assert (await post_draft(client, bidder, project)).status == 200

    for party in (bidder, stranger):
        resp = await client.get(drafts_path(project), headers=party.headers)
        assert await error_code(resp, 403) == "not_project_owner"
    no_wallet = new_user()
    resp = await client.get(drafts_path(project), headers=no_wallet.headers)
    assert await error_code(resp, 403) == "not_project_owner"
    resp = await client.get(drafts_path(project))
    assert await error_code(resp, 401) == "unauthorized"

    # Ownership follows the active link: once revoked, the owner's user reads nothing.
    resp = await client.delete(f"/v1/wallet-links/{owner.address}", headers=owner.headers)
    assert resp.status == 200
    resp = await client.get(drafts_path(project), headers=owner.headers)
    assert await error_code(resp, 403) == "not_project_owner"


async def test_bidder_wallet_must_be_an_active_link_of_the_caller(
    client: Any, db: asyncpg.Connection
) -> None:
    bidder = await linked_party(client)
    stranger = await linked_party(client)
    project = await seed_project(db)
    # Someone else's wallet, and a wallet nobody linked.
    for wallet in (bidder.address, random_address()):
        resp = await post_draft(client, stranger, project, bidderWalletAddress=wallet)
        assert await error_code(resp, 403) == "wallet_not_linked"
    resp = await client.delete(f"/v1/wallet-links/{bidder.address}", headers=bidder.headers)
    assert resp.status == 200
    resp = await post_draft(client, bidder, project)
    assert await error_code(resp, 403) == "wallet_not_linked"
    resp = await client.post(drafts_path(project), json={"bidderWalletAddress": bidder.address})
    assert await error_code(resp, 401) == "unauthorized"
    assert await db.fetchval("SELECT count(*) FROM bid_drafts") == 0


async def test_project_must_be_indexed_standard_and_bidding(
    client: Any, db: asyncpg.Connection
) -> None:
    bidder = await linked_party(client)
    resp = await post_draft(client, bidder, random_address())
    assert await error_code(resp, 404) == "project_not_found"

    challenge = await seed_project(db, project_mode="challenge", challenge_submission_count=0)
    resp = await post_draft(client, bidder, challenge)
    assert await error_code(resp, 409) == "project_mode_mismatch"

    for status in ("draft", "building", "dispute", "complete", "failed"):
        project = await seed_project(db, status=status)
        resp = await post_draft(client, bidder, project)
        assert await error_code(resp, 409) == "project_not_bidding", status
    assert await db.fetchval("SELECT count(*) FROM bid_drafts") == 0

    owner = await linked_party(client)
    resp = await client.get(drafts_path(random_address()), headers=owner.headers)
    assert await error_code(resp, 404) == "project_not_found"


async def test_owner_cannot_draft_a_bid_on_their_project(
    client: Any, db: asyncpg.Connection
) -> None:
    owner = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    resp = await post_draft(client, owner, project)
    assert await error_code(resp, 403) == "owner_cannot_bid"


async def test_invite_only_projects_need_an_allowlisted_bidder(
    client: Any, db: asyncpg.Connection
) -> None:
    owner = await linked_party(client)
    invited = await linked_party(client)
    outsider = await linked_party(client)
    project = await seed_project(
        db, owner_address=owner.lower, bidding_access="invite_only", allowlist=[invited.lower]
    )
    # Hidden from the outsider, exactly like a project that is not indexed.
    resp = await post_draft(client, outsider, project)
    assert await error_code(resp, 404) == "project_not_found"
    resp = await client.get(drafts_path(project), headers=outsider.headers)
    assert await error_code(resp, 404) == "project_not_found"

    assert (await post_draft(client, invited, project)).status == 200
    # The invited user sees the project, but a second, non-allowlisted wallet may not bid.
    extra = Wallet()
    await link_wallet(client, invited.headers, extra)
    resp = await post_draft(client, invited, project, bidderWalletAddress=extra.address)
    assert await error_code(resp, 403) == "bidder_not_allowlisted"

    resp = await client.get(drafts_path(project), headers=owner.headers)
    assert (await resp.json())["count"] == 1


async def test_an_agent_key_acts_for_its_user(client: Any, db: asyncpg.Connection) -> None:
    bidder = await linked_party(client)
    project = await seed_project(db)
    key = await create_key(client, bidder.user)
    resp = await client.post(
        drafts_path(project),
        json={"bidderWalletAddress": bidder.address, "draftHash": HASH_A},
        headers=agent(key["secret"]),
    )
    assert resp.status == 200, await resp.text()
    assert await db.fetchval("SELECT updated_by FROM bid_drafts") == bidder.user.user_id


async def test_field_limits(client: Any, db: asyncpg.Connection) -> None:
    bidder = await linked_party(client)
    project = await seed_project(db)
    ok: list[dict[str, Any]] = [
        {"artifactUri": "https://" + "a" * (1024 - len("https://"))},
        {"artifactUri": "ipfs://cid"},
        {"notes": "é" * 4000},
        {"notes": ""},
        {"artifactUri": None, "notes": None},
    ]
    for extra in ok:
        resp = await post_draft(client, bidder, project, **extra)
        assert resp.status == 200, (extra, await resp.text())
    bad: list[dict[str, Any]] = [
        {"artifactUri": "https://" + "a" * (1025 - len("https://"))},
        {"artifactUri": "http://example.com/a"},
        {"artifactUri": "HTTPS://example.com/a"},
        {"artifactUri": "ftp://example.com/a"},
        {"artifactUri": "https://"},
        {"artifactUri": "https://exa mple.com"},
        {"artifactUri": "javascript:alert(1)"},
        {"notes": "x" * 4001},
        {"notes": "nul\x00byte"},
        {"draftHash": "0x1234"},
        {"draftHash": None},
        {"bidderWalletAddress": "0xnothex"},
        {"unexpected": 1},
    ]
    for extra in bad:
        resp = await post_draft(client, bidder, project, **extra)
        assert await error_code(resp, 400) == "invalid_request", extra
        assert (await resp.json())["details"], extra
    resp = await post_draft(client, bidder, "0xnot-an-address")
    assert await error_code(resp, 400) == "invalid_request"
    # A lone surrogate (valid JSON escape, not storable UTF-8) is a 400, not a failed write.
    raw = (
        f'{{"bidderWalletAddress": "{bidder.address}", "draftHash": "{HASH_A}",'
        ' "notes": "broken \\ud800 text"}'
    )
    resp = await client.post(
        drafts_path(project),
        data=raw,
        headers={**bidder.headers, "Content-Type": "application/json"},
    )
    assert await error_code(resp, 400) == "invalid_request"
    stored = await db.fetchrow("SELECT artifact_uri, notes FROM bid_drafts")
    assert stored is not None
    assert tuple(stored) == (None, None)
