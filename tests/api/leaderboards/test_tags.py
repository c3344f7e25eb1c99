"""Category tags of completed milestones through HTTP on seeded read-model projects: the owner
rule (through an active link), completion, slugs, revisions and their pages, the idempotent
upsert, the outbox event, concurrency and invite-only visibility."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import datetime
from typing import Any

import asyncpg

from tests.api.identity.conftest import agent, create_key
from tests.api.leaderboards.conftest import (
    error_code,
    link_another,
    linked_party,
    owned_project,
    seed_milestones,
    seed_project,
    tag,
    tags_path,
)
from tests.conftest import new_user

TAG_FIELDS = {
    "projectAddress",
    "milestoneIndex",
    "ownerWalletAddress",
    "categories",
    "createdAt",
    "updatedAt",
}
REVISION_FIELDS = {
    "id",
    "projectAddress",
    "milestoneIndex",
    "ownerWalletAddress",
    "revision",
    "categories",
    "previousCategories",
    "createdAt",
}


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def revisions(client: Any, project: str, milestone: int, **kw: Any) -> dict[str, Any]:
    resp = await client.get(tags_path(project, milestone) + "/revisions", **kw)
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    assert body["count"] == len(body["items"])
    return body


async def tag_events(db: asyncpg.Connection) -> list[dict[str, Any]]:
    rows = await db.fetch(
        "SELECT subject, payload::text AS payload FROM events "
        "WHERE type = 'category_tags.changed' ORDER BY id"
    )
    return [{"subject": row["subject"], **json.loads(row["payload"])} for row in rows]


async def test_owner_tags_revises_and_an_identical_upsert_writes_nothing(
    client: Any, db: asyncpg.Connection
) -> None:
    owner, project = await owned_project(client, db)

    resp = await tag(client, owner, project, 1, ["backend", "smart-contracts"])
    assert resp.status == 200, await resp.text()
    first = await resp.json()
    assert set(first) == TAG_FIELDS
    assert first["projectAddress"].lower() == project
    assert first["milestoneIndex"] == 1
    assert first["ownerWalletAddress"] == owner.address
    # Stored in the categories' order (sortOrder), not the request's.
    assert first["categories"] == ["smart-contracts", "backend"]
    resp = await client.get(tags_path(project, 1))  # anonymous: an open project
    assert resp.status == 200
    assert await resp.json() == first

    resp = await tag(client, owner, project, 1, ["docs", "security"])
    assert resp.status == 200
    second = await resp.json()
    assert second["categories"] == ["security", "docs"]
    assert second["createdAt"] == first["createdAt"]
    assert moment(second["updatedAt"]) > moment(first["updatedAt"])

    page = await revisions(client, project, 1)
    assert page["nextCursor"] is None
    newest, oldest = page["items"]
    assert set(newest) == REVISION_FIELDS
    assert (newest["revision"], oldest["revision"]) == (2, 1)
    assert newest["categories"] == ["security", "docs"]
    assert newest["previousCategories"] == ["smart-contracts", "backend"]
    assert oldest["categories"] == ["smart-contracts", "backend"]
    assert oldest["previousCategories"] == []
    assert oldest["ownerWalletAddress"] == owner.address

    events = await tag_events(db)
    assert [(e["revision"], e["categories"], e["previousCategories"]) for e in events] == [
        (1, ["smart-contracts", "backend"], []),
        (2, ["security", "docs"], ["smart-contracts", "backend"]),
    ]
    assert events[1]["subject"] == project
    assert events[1]["milestoneIndex"] == 1
    assert events[1]["ownerWalletAddress"] == owner.lower
    assert events[1]["revisionId"] == newest["id"]
    assert events[1]["userId"] == str(owner.user.user_id)

    # The same set again, in another order: 200 with what is stored, and nothing written.
    resp = await tag(client, owner, project, 1, ["docs", "security"])
    assert resp.status == 200
    assert await resp.json() == second
    resp = await tag(client, owner, project, 1, ["security", "docs"])
    assert await resp.json() == second
    assert len((await revisions(client, project, 1))["items"]) == 2
    assert len(await tag_events(db)) == 2

    # Another milestone has its own tags and revisions; an untagged one has none.
    assert (await tag(client, owner, project, 0, ["design"])).status == 200
    assert [r["revision"] for r in (await revisions(client, project, 0))["items"]] == [1]
    resp = await client.get(tags_path(project, 2))
    assert await error_code(resp, 404) == "category_tags_not_found"
    assert (await revisions(client, project, 2))["items"] == []


async def test_an_agent_key_of_the_owner_may_tag(client: Any, db: asyncpg.Connection) -> None:
    owner, project = await owned_project(client, db)
    key = await create_key(client, owner.user)
    resp = await tag(client, owner, project, 0, ["ai-agents"], headers=agent(key["secret"]))
    assert resp.status == 200, await resp.text()


async def test_only_the_owner_through_an_active_link(client: Any, db: asyncpg.Connection) -> None:
    owner, project = await owned_project(client, db)
    stranger = await linked_party(client)

    resp = await client.post(
        tags_path(project, 0), json={"ownerWalletAddress": owner.address, "categories": ["data"]}
    )
    assert await error_code(resp, 401) == "unauthorized"
    # The owner's wallet, not linked by the caller.
    resp = await tag(client, owner, project, 0, ["data"], headers=stranger.headers)
    assert await error_code(resp, 403) == "wallet_not_linked"
    # The caller's own wallet, which is not the owner.
    resp = await tag(client, stranger, project, 0, ["data"])
    assert await error_code(resp, 403) == "not_project_owner"
    # The owner's other linked wallet is not the project's owner either.
    other = await link_another(client, owner)
    resp = await tag(client, owner, project, 0, ["data"], owner=other.address)
    assert await error_code(resp, 403) == "not_project_owner"
    # The owner after revoking its link to the owner wallet.
    resp = await client.delete(f"/v1/wallet-links/{owner.address}", headers=owner.headers)
    assert resp.status == 200, await resp.text()
    resp = await tag(client, owner, project, 0, ["data"])
    assert await error_code(resp, 403) == "wallet_not_linked"
    # A project that is not indexed.
    resp = await tag(client, owner, "0x" + "12" * 20, 0, ["data"])
    assert await error_code(resp, 404) == "project_not_found"
    assert await tag_events(db) == []
    assert await db.fetchval("SELECT count(*) FROM milestone_category_tags") == 0


async def test_only_completed_milestones(client: Any, db: asyncpg.Connection) -> None:
    owner, project = await owned_project(
        client, db, ("approved", "submitted", "attested", "disputed", "rejected", "pending")
    )
    for milestone in range(1, 6):
        resp = await tag(client, owner, project, milestone, ["frontend"])
        assert await error_code(resp, 409) == "milestone_not_completed", milestone
    resp = await tag(client, owner, project, 6, ["frontend"])
    assert await error_code(resp, 404) == "milestone_not_found"
    assert (await tag(client, owner, project, 0, ["frontend"])).status == 200


async def test_slug_rules(client: Any, db: asyncpg.Connection) -> None:
    owner, project = await owned_project(client, db)
    await db.execute("UPDATE leaderboard_categories SET is_active = false WHERE slug = 'docs'")

    resp = await tag(client, owner, project, 0, ["backend", "blockchain", "docs", "web-3"])
    assert await error_code(resp, 422) == "unknown_category"
    body = await resp.json()
    assert body["unknown"] == ["blockchain", "docs", "web-3"]
    assert "blockchain" in body["message"]

    for bad in (
        [],
        ["frontend", "backend", "design", "data", "devops", "security"],
        ["backend", "frontend", "backend"],
        ["Backend"],
        ["back_end"],
    ):
        resp = await tag(client, owner, project, 0, bad)
        assert await error_code(resp, 400) == "invalid_request", bad
    five = ["frontend", "backend", "design", "data", "devops"]
    resp = await tag(client, owner, project, 0, five)
    assert resp.status == 200
    assert (await resp.json())["categories"] == five
    assert len(await tag_events(db)) == 1


async def test_revision_pages_never_repeat(client: Any, db: asyncpg.Connection) -> None:
    owner, project = await owned_project(client, db)
    sets = [["frontend"], ["backend"], ["design"], ["data"], ["devops"]]
    for categories in sets:
        assert (await tag(client, owner, project, 0, categories)).status == 200

    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = await revisions(client, project, 0, params=params)
        assert page["count"] <= 2
        seen += page["items"]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert [r["revision"] for r in seen] == [5, 4, 3, 2, 1]
    assert len({r["id"] for r in seen}) == 5
    assert [r["categories"] for r in seen] == sets[::-1]
    assert [r["previousCategories"] for r in seen] == [*sets[::-1][1:], []]

    resp = await client.get(tags_path(project, 0) + "/revisions", params={"cursor": "not-a-cursor"})
    assert await error_code(resp, 400) == "invalid_request"
    resp = await client.get(tags_path(project, 0) + "/revisions", params={"limit": "101"})
    assert await error_code(resp, 400) == "invalid_request"


async def test_concurrent_upserts_lose_no_revision(client: Any, db: asyncpg.Connection) -> None:
    owner, project = await owned_project(client, db)
    sets = [["frontend"], ["backend"], ["design"], ["data"], ["devops"], ["security"]]
    responses = await asyncio.gather(*(tag(client, owner, project, 0, s) for s in sets))
    assert [r.status for r in responses] == [200] * len(sets)
    items = (await revisions(client, project, 0))["items"]
    assert sorted(r["revision"] for r in items) == list(range(1, len(sets) + 1))
    # Each revision replaced exactly what the one before it set: a chain, nothing lost.
    ordered = sorted(items, key=lambda r: r["revision"])
    for before, after in itertools.pairwise(ordered):
        assert after["previousCategories"] == before["categories"]
    current = await (await client.get(tags_path(project, 0))).json()
    assert current["categories"] == ordered[-1]["categories"]
    assert len(await tag_events(db)) == len(sets)


async def test_invite_only_tags_are_hidden_from_strangers(
    client: Any, db: asyncpg.Connection
) -> None:
    invited = await linked_party(client)
    owner, project = await owned_project(client, db, bidding_access="invite_only", allowlist=[])
    await db.execute(
        "UPDATE projects SET allowlist = $2 WHERE project_address = $1", project, [invited.lower]
    )
    assert (await tag(client, owner, project, 0, ["security"])).status == 200
    stranger = await linked_party(client)
    signed_in_without_wallet = new_user()

    for headers in ({}, stranger.headers, signed_in_without_wallet.headers):
        resp = await client.get(tags_path(project, 0), headers=headers)
        assert await error_code(resp, 404) == "project_not_found"
        resp = await client.get(tags_path(project, 0) + "/revisions", headers=headers)
        assert await error_code(resp, 404) == "project_not_found"
    # A stranger cannot even learn that the project exists by posting.
    resp = await tag(client, stranger, project, 0, ["security"])
    assert await error_code(resp, 404) == "project_not_found"

    for party in (owner, invited):
        resp = await client.get(tags_path(project, 0), headers=party.headers)
        assert resp.status == 200
        assert (await resp.json())["categories"] == ["security"]
        page = await revisions(client, project, 0, headers=party.headers)
        assert [r["revision"] for r in page["items"]] == [1]


async def test_tags_survive_the_project_leaving_the_read_model(
    client: Any, db: asyncpg.Connection
) -> None:
    """A reorg removes a project from the read model: its tags are hidden (404, as the project)
    but kept, and show again when the project is indexed again."""
    owner, project = await owned_project(client, db)
    assert (await tag(client, owner, project, 0, ["data"])).status == 200
    await db.execute("DELETE FROM projects WHERE project_address = $1", project)
    resp = await client.get(tags_path(project, 0))
    assert await error_code(resp, 404) == "project_not_found"
    await seed_project(db, project_address=project, owner_address=owner.lower)
    await seed_milestones(db, project, ["approved"])
    resp = await client.get(tags_path(project, 0))
    assert resp.status == 200
    assert (await resp.json())["categories"] == ["data"]
