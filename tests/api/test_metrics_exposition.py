"""GET /metrics of a running app (real PostgreSQL, Redis and Ray from the suite's fixtures)
passes Prometheus' own linter, `promtool check metrics`: counters end in `_total`, no other
family uses a histogram's suffixes, and no `_created` series (docs/metrics.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from marketplace.indexer.engine import METRICS_KEY
from marketplace_devstack.embedded.redis import EmbeddedRedis
from tests.conftest import Servers, make_settings


def _promtool_check(exposition: str) -> subprocess.CompletedProcess[str]:
    """`promtool check metrics` on ``exposition``: silent and 0 when it finds nothing."""
    found = shutil.which("promtool")
    # scripts/test installs Debian's prometheus package, which carries promtool.
    assert found, "promtool is missing: apt-get install prometheus"
    return subprocess.run(
        [found, "check", "metrics"],
        input=exposition,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def _scrape_after_traffic(client: Any) -> str:
    from marketplace.http import keys

    # Traffic that gives the per-request families several label sets (200, 404, 405), and the
    # indexer's mirrored figures values of their own.
    await client.app[keys.REDIS].hset(
        METRICS_KEY,
        mapping={"blocks_processed": 42, "batches": 3, "batch_seconds_sum": 1.5, "rpc_errors": 2},
    )
    for path in ("/v1/health", "/v1/health/ready", "/v1/", "/v1/openapi.json", "/v1/nope"):
        await client.get(path)
    await client.delete("/v1/health")
    await client.get("/metrics")  # a scrape is traffic too
    response = await client.get("/metrics")
    assert response.status == 200
    text: str = await response.text()
    return text


async def test_promtool_finds_no_problem_in_metrics(client: Any) -> None:
    text = await _scrape_after_traffic(client)
    assert 'marketplace_http_requests_total{method="GET",route="/v1/health",status="200"}' in text
    checked = _promtool_check(text)
    assert (checked.stdout + checked.stderr).strip() == ""
    assert checked.returncode == 0


def test_promtool_check_is_real() -> None:
    """The linter does flag what the service used to export (so a clean run means something)."""
    broken = (
        "# HELP marketplace_indexer_batch_seconds_sum Seconds.\n"
        "# TYPE marketplace_indexer_batch_seconds_sum gauge\n"
        "marketplace_indexer_batch_seconds_sum 1.5\n"
        "# HELP marketplace_indexer_batches Batches.\n"
        "# TYPE marketplace_indexer_batches counter\n"
        "marketplace_indexer_batches 3\n"
    )
    checked = _promtool_check(broken)
    problems = checked.stdout + checked.stderr
    assert checked.returncode != 0
    assert '"_sum" suffix' in problems and "_total" in problems


async def test_no_created_series_and_counters_end_in_total(client: Any) -> None:
    text = await _scrape_after_traffic(client)
    created = re.findall(r"^(\w+_created)\b", text, re.M)
    assert created == []
    counters = re.findall(r"^# TYPE (\S+) counter$", text, re.M)
    assert counters and all(name.endswith("_total") for name in counters), counters
    # The indexer's running totals are counters, its batch time a summary.
    assert "marketplace_indexer_blocks_processed_total 42.0" in text
    assert "marketplace_indexer_rpc_errors_total 2.0" in text
    assert "# TYPE marketplace_indexer_batch_duration_seconds summary" in text
    assert "marketplace_indexer_batch_duration_seconds_count 3.0" in text
    assert "marketplace_indexer_batch_duration_seconds_sum 1.5" in text
    assert "marketplace_indexer_batch_seconds_sum" not in text
    # The scrape ran a readiness round: this app's dependencies answer.
    assert re.search(r"^marketplace_ready 1\.0$", text, re.M)


def _ready(exposition: str) -> float:
    (value,) = re.findall(r"^marketplace_ready (\S+)$", exposition, re.M)
    return float(value)


async def test_ready_gauge_is_the_readiness_check_of_the_scraped_frontend(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, clean_state: None, tmp_path: Path
) -> None:
    """`marketplace_ready` (the alert MarketplaceFrontendNotReady) is what readiness answers: 1
    while the frontend's dependencies answer, 0 once its Redis is gone, with no probe asking
    readiness first (the scrape runs the check)."""
    from marketplace.http.app import create_app

    # A Redis of this test's own: the session's shared one is never stopped.
    own_redis = EmbeddedRedis(tmp_path)
    own_redis.start()
    try:
        settings = make_settings(servers, redis_url=own_redis.url, readiness_cache_ms=0)
        client = await aiohttp_client(create_app(settings))
        assert _ready(await (await client.get("/metrics")).text()) == 1
        own_redis.stop()
        response = await client.get("/metrics")
        assert response.status == 200
        assert _ready(await response.text()) == 0
        ready = await client.get("/v1/health/ready")
        assert ready.status == 503
        assert (await ready.json())["checks"]["redis"] == "unavailable"
    finally:
        own_redis.stop()
