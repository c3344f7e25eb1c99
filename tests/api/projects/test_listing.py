"""GET /v1/projects: order, keyset pagination, count, filters and input validation."""

from __future__ import annotations

import time
from typing import Any

import asyncpg
from eth_utils import to_checksum_address

from marketplace.projects.models import ProjectListResponse
from marketplace.projects.read_models import PROJECT_LIST_CURSOR
from tests.api.projects import seed
from tests.api.projects.contract import conforms


async def _seed_many(db: asyncpg.Connection, n: int, **values: Any) -> list[str]:
    """``n`` projects; returns their checksummed addresses newest first."""
    rows = [await seed.project(db, **values) for _ in range(n)]
    return [to_checksum_address(r["project_address"]) for r in reversed(rows)]


async def _page(client: Any, query: str = "", **kw: Any) -> dict[str, Any]:
    resp = await client.get(f"/v1/projects{query}", **kw)
    assert resp.status == 200, await resp.text()
    return conforms(ProjectListResponse, await resp.json())


async def _walk(client: Any, query: str) -> list[dict[str, Any]]:
    pages, cursor = [], None
    while True:
        sep = "&" if "?" in query else "?"
        page = await _page(client, query + (f"{sep}cursor={cursor}" if cursor else ""))
        pages.append(page)
        cursor = page["nextCursor"]
        if cursor is None:
            return pages


async def test_empty_listing(client: Any, db: asyncpg.Connection) -> None:
    assert await _page(client) == {"items": [], "count": 0, "nextCursor": None}


async def test_default_limit_is_20_and_count_is_the_total(
    client: Any, db: asyncpg.Connection
) -> None:
    newest_first = await _seed_many(db, 23)
    page = await _page(client)
    assert [i["projectAddress"] for i in page["items"]] == newest_first[:20]
    assert page["count"] == 23
    assert page["nextCursor"]
    second = await _page(client, f"?cursor={page['nextCursor']}")
    assert [i["projectAddress"] for i in second["items"]] == newest_first[20:]
    assert second["count"] == 23  # all pages, not this page
    assert second["nextCursor"] is None


async def test_limit_bounds(client: Any, db: asyncpg.Connection) -> None:
    await _seed_many(db, 101)
    page = await _page(client, "?limit=100")
    assert len(page["items"]) == 100 and page["count"] == 101
    assert len((await _page(client, "?limit=1"))["items"]) == 1
    for bad in ("0", "101", "-1", "abc", "2.5", ""):
        resp = await client.get(f"/v1/projects?limit={bad}")
        assert resp.status == 400, bad
        body = await resp.json()
        assert body["error"] == "invalid_request"
        assert body["details"][0]["field"] == "limit"


async def test_exact_multiple_of_limit_ends_without_a_cursor(
    client: Any, db: asyncpg.Connection
) -> None:
    await _seed_many(db, 4)
    first = await _page(client, "?limit=2")
    second = await _page(client, f"?limit=2&cursor={first['nextCursor']}")
    assert len(second["items"]) == 2
    assert second["nextCursor"] is None


async def test_cursor_round_trip_until_exhaustion(client: Any, db: asyncpg.Connection) -> None:
    newest_first = await _seed_many(db, 17)
    pages = await _walk(client, "?limit=5")
    assert [len(p["items"]) for p in pages] == [5, 5, 5, 2]
    assert [i["projectAddress"] for p in pages for i in p["items"]] == newest_first
    assert {p["count"] for p in pages} == {17}


async def test_order_is_block_then_log_index_newest_first(
    client: Any, db: asyncpg.Connection
) -> None:
    rows = [
        await seed.project(db, created_block=b, created_log_index=li)
        for b, li in ((7, 1), (9, 0), (7, 3), (8, 2), (9, 5), (7, 2))
    ]
    order = sorted(rows, key=lambda r: (r["created_block"], r["created_log_index"]), reverse=True)
    expected = [to_checksum_address(r["project_address"]) for r in order]
    pages = await _walk(client, "?limit=2")
    assert [i["projectAddress"] for p in pages for i in p["items"]] == expected


async def test_no_repeat_or_skip_while_new_projects_are_indexed(
    client: Any, db: asyncpg.Connection
) -> None:
    original = await _seed_many(db, 9)
    seen: list[str] = []
    batches: list[list[str]] = []
    cursor = None
    while True:
        page = await _page(client, "?limit=4" + (f"&cursor={cursor}" if cursor else ""))
        seen += [i["projectAddress"] for i in page["items"]]
        assert page["count"] == len(original) + 3 * len(batches)  # count follows the inserts
        # the indexer keeps inserting newer projects between page fetches
        batches.append(await _seed_many(db, 3))
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == original  # each exactly once, in order, none of the new ones inside
    added = [address for batch in reversed(batches) for address in batch]
    first = await _page(client, "?limit=100")
    # the new ones come before the old first page, newest first
    assert [i["projectAddress"] for i in first["items"]] == added + original
    assert first["count"] == len(original) + len(added)


async def test_cursor_pointing_after_everything(client: Any, db: asyncpg.Connection) -> None:
    await _seed_many(db, 2)
    page = await _page(client, f"?cursor={PROJECT_LIST_CURSOR.encode(0, 0)}")
    assert page == {"items": [], "count": 2, "nextCursor": None}


async def test_malformed_cursor_is_400(client: Any, db: asyncpg.Connection) -> None:
    for cursor in ("zz", "cDE6NQ", " ", "x" * 201, PROJECT_LIST_CURSOR.encode(5, 1) + "A", ""):
        resp = await client.get("/v1/projects", params={"cursor": cursor})
        assert resp.status == 400, cursor
        body = await resp.json()
        assert body["error"] == "invalid_request"
        assert body["details"][0]["field"] == "cursor"


async def test_owner_filter(client: Any, db: asyncpg.Connection) -> None:
    owner = seed.address()
    mine = await _seed_many(db, 3, owner_address=owner)
    await _seed_many(db, 4)
    for spelled in (owner, owner.upper().replace("0X", "0x"), to_checksum_address(owner)):
        page = await _page(client, f"?ownerAddress={spelled}&limit=2")
        assert page["count"] == 3
        pages = await _walk(client, f"?ownerAddress={spelled}&limit=2")
        assert [i["projectAddress"] for p in pages for i in p["items"]] == mine
    assert (await _page(client, f"?ownerAddress={seed.address()}"))["count"] == 0


async def test_status_filter_uses_the_stored_status(client: Any, db: asyncpg.Connection) -> None:
    now = int(time.time())
    bidding = await _seed_many(db, 2, status="bidding")
    await _seed_many(db, 3, status="draft")
    # stored bidding, effectively failed (deadline passed without submissions)
    expired = await _seed_many(
        db,
        1,
        status="bidding",
        project_mode="challenge",
        challenge_submission_count=0,
        challenge_submission_deadline=now - 60,
    )
    page = await _page(client, "?status=bidding")
    assert page["count"] == 3
    assert [i["projectAddress"] for i in page["items"]] == expired + bidding
    assert (await _page(client, "?status=draft"))["count"] == 3
    assert (await _page(client, "?status=complete"))["count"] == 0

    effective = await _page(client, "?effectiveStatus=failed")
    assert [i["projectAddress"] for i in effective["items"]] == expired
    assert effective["count"] == 1
    effective = await _page(client, "?effectiveStatus=bidding")
    assert [i["projectAddress"] for i in effective["items"]] == bidding
    both = await _page(client, "?status=bidding&effectiveStatus=bidding&limit=1")
    assert both["count"] == 2 and len(both["items"]) == 1
    rest = await _page(
        client, f"?status=bidding&effectiveStatus=bidding&cursor={both['nextCursor']}"
    )
    assert [i["projectAddress"] for i in both["items"] + rest["items"]] == bidding


async def test_filters_combine(client: Any, db: asyncpg.Connection) -> None:
    owner = seed.address()
    target = await _seed_many(db, 2, owner_address=owner, status="complete")
    await _seed_many(db, 2, owner_address=owner, status="draft")
    await _seed_many(db, 2, status="complete")
    page = await _page(client, f"?ownerAddress={owner}&status=complete")
    assert page["count"] == 2
    assert [i["projectAddress"] for i in page["items"]] == target


async def test_bad_query_values_are_400(client: Any, db: asyncpg.Connection) -> None:
    for query in (
        "?ownerAddress=0x123",
        "?ownerAddress=" + "0x" + "g" * 40,
        "?ownerAddress=" + "a" * 42,
        "?ownerAddress=",
        "?status=open",
        "?status=Draft",
        "?effectiveStatus=late",
    ):
        resp = await client.get(f"/v1/projects{query}")
        assert resp.status == 400, query
        assert (await resp.json())["error"] == "invalid_request"


async def test_unknown_query_parameters_are_ignored(client: Any, db: asyncpg.Connection) -> None:
    await _seed_many(db, 1)
    assert (await _page(client, "?_=123&offset=5"))["count"] == 1


async def test_milestones_are_embedded_in_list_items(client: Any, db: asyncpg.Connection) -> None:
    a = await seed.project(db, milestone_count=3)
    b = await seed.project(db, milestone_count=1)
    for index in (2, 0, 1):
        await seed.milestone(db, a["project_address"], index, payout_usdc=index * 10)
    await seed.milestone(db, b["project_address"], 0, status="approved")
    items = (await _page(client))["items"]
    assert [[m["milestoneIndex"] for m in i["milestones"]] for i in items] == [[0], [0, 1, 2]]
    assert items[0]["milestones"][0]["status"] == "approved"
    assert [m.get("payoutUSDC") for m in items[1]["milestones"]] == ["0", "10", "20"]
