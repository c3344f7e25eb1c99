"""GET /v1/internal/indexer/status and the indexer metrics mirrored into /metrics."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from eth_utils import to_checksum_address

from marketplace.indexer.engine import METRICS_KEY
from tests.conftest import SCHEDULER_SECRET, Servers, bearer, new_user


async def _cursor(
    servers: Servers, *, synced: int, head: int, block_age: float, sync_age: float
) -> None:
    now = datetime.now(UTC)
    conn = await asyncpg.connect(servers.database_url)
    try:
        await conn.execute(
            """INSERT INTO indexer_cursors (chain_id, registry_address, start_block,
               last_synced_block, head_block, last_synced_block_time, last_successful_sync_at)
               VALUES (31337, $1, 1, $2, $3, $4, $5)""",
            "0x" + "ab" * 20,
            synced,
            head,
            now - timedelta(seconds=block_age),
            now - timedelta(seconds=sync_age),
        )
    finally:
        await conn.close()


async def test_status_needs_a_principal_or_the_scheduler(client: Any) -> None:
    resp = await client.get("/v1/internal/indexer/status")
    assert resp.status == 401
    resp = await client.get("/v1/internal/indexer/status", headers=bearer(SCHEDULER_SECRET))
    assert resp.status == 200
    body = await resp.json()
    assert body["source"] == "unknown"
    assert body["stale"] is True
    assert body["staleReason"] == "notConfigured"
    assert body["freshnessTargetMs"] == 300_000


async def test_caught_up_indexer_is_fresh(client: Any, servers: Servers) -> None:
    await _cursor(servers, synced=120, head=120, block_age=4000, sync_age=3)
    resp = await client.get("/v1/internal/indexer/status", headers=new_user().headers)
    body = await resp.json()
    assert resp.status == 200
    assert body["source"] == "indexed"
    assert body["stale"] is False
    assert "staleReason" not in body
    # Stored lower-case, returned EIP-55 like every address.
    assert body["registryAddress"] == to_checksum_address("0x" + "ab" * 20)
    assert body["registryAddress"] != "0x" + "ab" * 20
    assert body["lagBlocks"] == 0
    assert body["lagSeconds"] == 0
    assert body["lastSyncedBlock"] == 120
    assert body["indexedAt"].endswith(("Z", "+00:00"))


async def test_lagging_or_silent_indexer_is_stale(client: Any, servers: Servers) -> None:
    await _cursor(servers, synced=100, head=400, block_age=900, sync_age=2)
    body = await (
        await client.get("/v1/internal/indexer/status", headers=new_user().headers)
    ).json()
    assert body["stale"] is True
    assert body["staleReason"] == "lagging"
    assert body["lagBlocks"] == 300
    assert body["lagSeconds"] >= 900


async def test_silent_indexer_is_stale_even_when_it_was_caught_up(
    client: Any, servers: Servers
) -> None:
    await _cursor(servers, synced=10, head=10, block_age=1000, sync_age=1000)
    body = await (
        await client.get("/v1/internal/indexer/status", headers=new_user().headers)
    ).json()
    assert body["stale"] is True
    assert body["staleReason"] == "notSyncing"


async def test_source_is_the_spec_enum_in_the_openapi_document(client: Any) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    source = schemas["IndexerStatusResponse"]["properties"]["source"]
    if "$ref" in source:
        source = schemas[source["$ref"].rsplit("/", 1)[-1]]
    assert source["enum"] == ["indexed", "manual", "unknown"]
    registry = schemas["IndexerStatusResponse"]["properties"]["registryAddress"]
    assert "0x[0-9a-fA-F]{40}" in json.dumps(registry)


async def test_indexer_metrics_are_mirrored_into_metrics(client: Any) -> None:
    from marketplace.http import keys

    await client.app[keys.REDIS].hset(
        METRICS_KEY, mapping={"blocks_processed": 42, "lag_blocks": 7, "reorgs_handled": 1}
    )
    text = await (await client.get("/metrics")).text()
    assert "marketplace_indexer_blocks_processed_total 42.0" in text
    assert "marketplace_indexer_lag_blocks 7.0" in text
    assert "marketplace_indexer_reorgs_handled_total 1.0" in text


async def _staleness_metrics(client: Any) -> tuple[float, float]:
    text = await (await client.get("/metrics")).text()
    values = dict(
        line.rsplit(" ", 1)
        for line in text.splitlines()
        if line.startswith(
            ("marketplace_indexer_stale ", "marketplace_indexer_last_success_age_seconds ")
        )
    )
    return (
        float(values["marketplace_indexer_stale"]),
        float(values["marketplace_indexer_last_success_age_seconds"]),
    )


async def test_staleness_metrics_agree_with_the_status_route(client: Any, servers: Servers) -> None:
    await _cursor(servers, synced=120, head=120, block_age=4000, sync_age=30)
    body = await (
        await client.get("/v1/internal/indexer/status", headers=new_user().headers)
    ).json()
    stale, age = await _staleness_metrics(client)
    assert body["stale"] is False and stale == 0
    assert 30 <= age < 90


async def test_silent_indexer_is_stale_in_the_metrics_too(client: Any, servers: Servers) -> None:
    await _cursor(servers, synced=10, head=10, block_age=1000, sync_age=1000)
    body = await (
        await client.get("/v1/internal/indexer/status", headers=new_user().headers)
    ).json()
    stale, age = await _staleness_metrics(client)
    assert body["stale"] is True and stale == 1
    assert 1000 <= age < 1060
