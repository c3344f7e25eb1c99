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
    assert body == {
        "status": "ready",
        "postgres": "ok",
        "redis": "ok",
        "projectShards": 2,
        "indexer": "disabled",  # no chain configured here
    }


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


# --- readiness is cheap; /metrics can be restricted -------------------------------------------


def _shard_pings(text: str) -> float:
    import re

    pattern = (
        r'^marketplace_actor_call_duration_seconds_count\{actor="project-shard-\d+",'
        r'method="ping",outcome="ok"\} (\S+)$'
    )
    return sum(float(value) for value in re.findall(pattern, text, re.M))


async def test_readiness_checks_once_per_interval_however_hard_it_is_polled(
    aiohttp_client: Any, servers: Any, ray_cluster: None, clean_state: None
) -> None:
    import asyncio

    from prometheus_client import generate_latest

    from marketplace.http.app import create_app
    from tests.conftest import make_settings

    client = await aiohttp_client(create_app(make_settings(servers, readiness_cache_ms=4000)))
    # Read in-process: a scrape of /metrics runs a readiness round of its own (marketplace_ready).
    before = _shard_pings(generate_latest().decode())
    first = await asyncio.gather(*(client.get("/v1/health/ready") for _ in range(40)))
    for _ in range(10):
        first.append(await client.get("/v1/health/ready"))
    assert {r.status for r in first} == {200}
    after = _shard_pings(generate_latest().decode())
    assert after - before == 2  # one round: one ping per shard actor, for 50 requests

    await asyncio.sleep(4.1)
    assert (await client.get("/v1/health/ready")).status == 200
    assert _shard_pings(await (await client.get("/metrics")).text()) - after == 2


async def test_metrics_are_served_only_to_allowed_networks(
    aiohttp_client: Any, servers: Any, ray_cluster: None, clean_state: None
) -> None:
    import aiohttp

    from marketplace.http.app import create_app
    from tests.conftest import make_settings

    closed = await aiohttp_client(create_app(make_settings(servers, metrics_allow="10.0.0.0/8")))
    resp = await closed.get("/metrics")
    assert resp.status == 403
    body = await resp.json()
    assert body["error"] == "forbidden"
    assert "10.0.0.0" not in body["message"]
    # Other routes are not affected.
    assert (await closed.get("/v1/health")).status == 200

    opened = await aiohttp_client(
        create_app(make_settings(servers, metrics_allow="10.0.0.0/8, 127.0.0.1/32"))
    )
    resp = await opened.get("/metrics")
    assert resp.status == 200
    assert "marketplace_http_requests_total" in await resp.text()
    # Another loopback address is outside 127.0.0.1/32.
    local = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with (
        aiohttp.ClientSession(connector=local) as other,
        other.get(str(opened.make_url("/metrics"))) as resp,
    ):
        assert resp.status == 403
        assert (await resp.json())["error"] == "forbidden"


def test_metrics_allow_must_name_networks(servers: Any) -> None:
    import pytest
    from pydantic import ValidationError

    from tests.conftest import make_settings

    with pytest.raises(ValidationError, match="not a network"):
        make_settings(servers, metrics_allow="10.0.0.0/8, intranet")
    assert make_settings(servers, metrics_allow="").metrics_allow_networks == []
