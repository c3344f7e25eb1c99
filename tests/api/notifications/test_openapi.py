"""The notifications routes in the OpenAPI document, with their schemas and errors."""

from __future__ import annotations

from typing import Any

from openapi_spec_validator import validate


async def test_openapi_lists_the_notifications_routes(client: Any) -> None:
    resp = await client.get("/v1/openapi.json")
    doc = await resp.json()
    validate(doc)
    paths = doc["paths"]
    deliveries = paths["/v1/notifications/deliveries"]["get"]
    assert deliveries["x-auth"] == "either"
    params = {p["name"]: p for p in deliveries["parameters"]}
    assert set(params) == {"userId", "eventType", "status", "limit", "cursor"}
    assert params["limit"]["schema"]["maximum"] == 100
    assert "not_delivery_viewer" in deliveries["responses"]["403"]["description"]
    schemas = doc["components"]["schemas"]
    item = schemas["DeliveryItem"]
    assert set(item["required"]) == {
        "id",
        "eventType",
        "recipientUserId",
        "channel",
        "status",
        "reason",
        "attempts",
        "lastError",
        "subject",
        "createdAt",
        "sentAt",
    }

    prefs = paths["/v1/notifications/preferences"]
    assert set(prefs) == {"get", "put"}
    assert prefs["put"]["x-guarded"] is True
    assert "400" in prefs["put"]["responses"]
    response = schemas["PreferencesResponse"]
    assert set(response["required"]) == {
        "bid_draft",
        "dispute_evidence",
        "project_chat_message",
        "direct_message",
    }
    assert schemas["PreferencesUpdate"]["additionalProperties"] is False

    unsubscribe = paths["/v1/notifications/unsubscribe"]
    assert unsubscribe["post"]["x-auth"] == "none" and unsubscribe["get"]["x-auth"] == "none"
    assert set(unsubscribe["post"]["requestBody"]["content"]) == {
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    }
    assert "invalid_unsubscribe_token" in unsubscribe["post"]["responses"]["400"]["description"]
    assert "text/html" in unsubscribe["get"]["responses"]["200"]["content"]
    assert "429" in unsubscribe["post"]["responses"]
    answer = schemas["UnsubscribeResponse"]["properties"]
    assert answer["email"]["const"] is False
