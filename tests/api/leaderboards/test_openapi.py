"""The leaderboard routes in the OpenAPI document, with their auth, schemas and errors."""

from __future__ import annotations

from typing import Any

from openapi_spec_validator import validate

TAGS = "/v1/projects/{projectAddress}/milestones/{milestoneIndex}/category-tags"


async def test_openapi_lists_the_leaderboard_routes(client: Any) -> None:
    resp = await client.get("/v1/openapi.json")
    doc = await resp.json()
    validate(doc)
    paths, schemas = doc["paths"], doc["components"]["schemas"]

    listing = paths["/v1/leaderboard/categories"]["get"]
    assert listing["x-auth"] == "optional"
    category = schemas["Category"]
    assert set(category["required"]) == {
        "slug",
        "displayName",
        "sortOrder",
        "isActive",
        "createdAt",
        "updatedAt",
    }
    assert category["properties"]["sortOrder"]["minimum"] == 1

    upsert = paths[TAGS]["post"]
    assert upsert["x-auth"] == "either" and upsert["x-guarded"] is True
    responses = upsert["responses"]
    assert "not_project_owner" in responses["403"]["description"]
    assert "wallet_not_linked" in responses["403"]["description"]
    assert "milestone_not_completed" in responses["409"]["description"]
    assert "unknown_category" in responses["422"]["description"]
    assert "project_not_found" in responses["404"]["description"]
    request = schemas["TagUpsertRequest"]
    assert set(request["required"]) == {"ownerWalletAddress", "categories"}
    assert request["properties"]["categories"]["maxItems"] == 5

    read = paths[TAGS]["get"]
    assert read["x-auth"] == "optional"
    assert "category_tags_not_found" in read["responses"]["404"]["description"]
    revisions = paths[TAGS + "/revisions"]["get"]
    params = {p["name"]: p for p in revisions["parameters"]}
    assert {"projectAddress", "milestoneIndex", "limit", "cursor"} <= set(params)
    assert params["limit"]["schema"]["maximum"] == 100
    assert set(schemas["TagRevision"]["required"]) == {
        "id",
        "projectAddress",
        "milestoneIndex",
        "ownerWalletAddress",
        "revision",
        "categories",
        "previousCategories",
        "createdAt",
    }


async def test_openapi_lists_the_board(client: Any) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    validate(doc)
    board = doc["paths"]["/v1/leaderboards"]["get"]
    assert board["x-auth"] == "optional"
    assert {p["name"] for p in board["parameters"]} >= {
        "categories",
        "sort",
        "window",
        "limit",
        "cursor",
    }
    assert "unknown_category" in board["responses"]["422"]["description"]
    schemas = doc["components"]["schemas"]
    assert set(schemas["LeaderboardResponse"]["required"]) == {
        "items",
        "count",
        "nextCursor",
        "freshness",
    }
    assert set(schemas["IndexerFreshnessStatus"]["required"]) == {
        "source",
        "stale",
        "freshnessTargetMs",
    }
    assert set(schemas["LeaderboardRow"]["required"]) >= {"rank", "walletAddress", "userId"}
