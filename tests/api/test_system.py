"""System endpoints, the JSON error contract and the OpenAPI document."""

from __future__ import annotations

from typing import Any

from openapi_spec_validator import validate

from marketplace import API_VERSION


async def test_health(client: Any) -> None:
    resp = await client.get("/v1/health")
    assert resp.status == 200
    assert await resp.json() == {"status": "ok"}
    assert len(resp.headers["x-request-id"]) >= 16


async def test_readiness_round_trips_every_shard_actor(client: Any) -> None:
    resp = await client.get("/v1/health/ready")
    assert resp.status == 200
    body = await resp.json()
    assert body == {"status": "ready", "postgres": "ok", "redis": "ok", "projectShards": 2}


async def test_root_info(client: Any) -> None:
    resp = await client.get("/v1/")
    body = await resp.json()
    assert resp.status == 200
    assert set(body) == {"name", "version", "auth", "note"}
    assert all(isinstance(v, str) and v for v in body.values())


async def test_incoming_request_id_is_echoed(client: Any) -> None:
    resp = await client.get("/v1/health", headers={"x-request-id": "abc-123"})
    assert resp.headers["x-request-id"] == "abc-123"
    resp = await client.get("/v1/health", headers={"x-request-id": "bad id with spaces"})
    assert resp.headers["x-request-id"] != "bad id with spaces"


async def test_unknown_route_is_json_404(client: Any) -> None:
    resp = await client.get("/v1/does-not-exist")
    assert resp.status == 404
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert body["error"] == "not_found"
    assert body["message"]


async def test_wrong_method_is_json_405(client: Any) -> None:
    resp = await client.delete("/v1/health")
    assert resp.status == 405
    assert (await resp.json())["error"] == "method_not_allowed"
    assert resp.headers["x-request-id"]


async def test_openapi_document_is_valid_and_lists_every_route(client: Any) -> None:
    from marketplace.http.app import ROUTES

    resp = await client.get("/v1/openapi.json")
    assert resp.status == 200
    doc = await resp.json()
    validate(doc)
    assert doc["openapi"].startswith("3.1")
    assert doc["info"]["version"] == API_VERSION == "1.0.0"
    declared = {(r.method.lower(), r.path) for r in client.app[ROUTES]}
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert declared == documented
    health = doc["paths"]["/v1/health"]["get"]
    assert health["security"] == []
    assert health["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/HealthStatus"
    )


async def test_docs_page_renders_the_document(client: Any) -> None:
    resp = await client.get("/v1/docs")
    assert resp.status == 200
    assert resp.content_type == "text/html"
    assert "/v1/openapi.json" in await resp.text()


async def test_metrics_expose_requests_latency_in_flight_and_pool(client: Any) -> None:
    await client.get("/v1/health")
    await client.get("/v1/health/ready")
    resp = await client.get("/metrics")
    assert resp.status == 200
    text = await resp.text()
    assert 'marketplace_http_requests_total{method="GET",route="/v1/health",status="200"}' in text
    assert "marketplace_http_request_duration_seconds_bucket" in text
    assert "marketplace_http_in_flight_requests" in text
    assert "marketplace_db_pool_size" in text
    assert 'marketplace_actor_call_duration_seconds_count{actor="project-shard-' in text


async def test_access_log_writes_one_json_line_per_request(client: Any) -> None:
    import io
    import json

    from marketplace.http import keys

    access_log = client.app[keys.ACCESS_LOG]
    access_log.stream, access_log.enabled, access_log.json_lines = io.StringIO(), True, True
    resp = await client.get("/v1/health", headers={"x-request-id": "trace-me"})
    await client.get("/v1/nope")
    access_log.flush()
    lines = [json.loads(line) for line in access_log.stream.getvalue().splitlines()]
    assert [(e["route"], e["status"]) for e in lines] == [("/v1/health", 200), ("unmatched", 404)]
    assert lines[0]["request_id"] == resp.headers["x-request-id"] == "trace-me"
    assert lines[0]["duration_ms"] >= 0
