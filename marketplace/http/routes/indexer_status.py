"""Indexer freshness (``GET /v1/internal/indexer/status``) and the indexer actor's start-up.

The status is read from the cursor row in Postgres, not from the actor: it stays answerable while
the actor restarts, and it is the same on every frontend.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from aiohttp import web
from pydantic import Field

from marketplace.actors.indexer import INDEXER_SPEC
from marketplace.http import keys
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.indexer.engine import METRICS_KEY, lag_seconds_of
from marketplace.metrics import INDEXER_GAUGES
from marketplace.storage.repositories import indexer as indexer_repo
from marketplace.types import ResponseModel

log = logging.getLogger(__name__)
routes = RouteTable(tag="indexer")


class IndexerStatusResponse(ResponseModel):
    """Indexer health and freshness (IndexerFreshnessStatus fields plus cursor details)."""

    source: str = Field(description="indexed, manual or unknown")
    indexedAt: datetime | None = None
    stale: bool
    freshnessTargetMs: int = Field(ge=1)
    lastSuccessfulSyncAt: datetime | None = None
    chainId: int
    registryAddress: str | None = None
    startBlock: int | None = None
    lastSyncedBlock: int | None = None
    headBlock: int | None = None
    lagBlocks: int | None = None
    lagSeconds: float | None = None
    lagAlertSeconds: int
    pollIntervalMs: int


@routes.get(
    "/v1/internal/indexer/status",
    name="getIndexerStatus",
    summary="Chain indexer freshness: cursor, head, lag and staleness",
    auth=AuthMode.EITHER_OR_SCHEDULER,
    response=IndexerStatusResponse,
    exclude_none=True,
)
async def get_indexer_status(call: Call[None, None, None]) -> IndexerStatusResponse:
    """`stale` is true when the read model lags the chain by more than the alert threshold, or
    when no successful sync happened within it (a stopped indexer is stale too)."""
    settings = call.settings
    cursor = await indexer_repo.get_cursor(call.pool, settings.chain_id)
    target_ms = settings.indexer_lag_alert_seconds * 1000
    if cursor is None:
        return IndexerStatusResponse(
            source="unknown",
            stale=True,
            freshnessTargetMs=target_ms,
            chainId=settings.chain_id,
            lagAlertSeconds=settings.indexer_lag_alert_seconds,
            pollIntervalMs=settings.indexer_poll_interval_ms,
        )
    now = datetime.now(UTC)
    lag_blocks = max(0, cursor["head_block"] - cursor["last_synced_block"])
    lag_seconds = lag_seconds_of(lag_blocks, cursor["last_synced_block_time"], now)
    last_sync = cursor["last_successful_sync_at"]
    silent = (
        last_sync is None or (now - last_sync).total_seconds() > settings.indexer_lag_alert_seconds
    )
    return IndexerStatusResponse(
        source="indexed",
        indexedAt=cursor["last_synced_block_time"],
        stale=silent or lag_seconds > settings.indexer_lag_alert_seconds,
        freshnessTargetMs=target_ms,
        lastSuccessfulSyncAt=last_sync,
        chainId=cursor["chain_id"],
        registryAddress=cursor["registry_address"],
        startBlock=cursor["start_block"],
        lastSyncedBlock=cursor["last_synced_block"],
        headBlock=cursor["head_block"],
        lagBlocks=lag_blocks,
        lagSeconds=None if lag_seconds == float("inf") else round(lag_seconds, 3),
        lagAlertSeconds=settings.indexer_lag_alert_seconds,
        pollIntervalMs=settings.indexer_poll_interval_ms,
    )


def setup(app: web.Application) -> None:
    app[keys.METRICS_REFRESHERS].append(mirror_indexer_metrics)


async def indexer_actor(app: web.Application) -> AsyncIterator[None]:
    """Makes sure the deployment's one indexer actor runs. It outlives this frontend (detached):
    other frontends share it, so stopping one frontend must not stop indexing."""
    settings = app[keys.SETTINGS]
    if settings.indexer_enabled and settings.chain_rpc_url and settings.registry_address:
        runtime = app[keys.ACTORS]
        # get-if-exists: every frontend asks, exactly one actor runs.
        runtime.handle(INDEXER_SPEC, runtime.actor_settings())
    else:
        log.info("chain indexer not started: no chain configured")
    yield


async def mirror_indexer_metrics(app: web.Application) -> None:
    try:
        values = await app[keys.REDIS].hgetall(METRICS_KEY)
    except Exception:
        log.debug("indexer metrics unavailable", exc_info=True)
        return
    for name, value in values.items():
        gauge = INDEXER_GAUGES.get(name)
        if gauge is not None:
            gauge.set(float(value))
