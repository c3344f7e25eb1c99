"""Indexer freshness (``GET /v1/internal/indexer/status``) and the indexer actor's start-up.

The status is read from the cursor row in Postgres and the indexer's last poll outcome in Redis
(``marketplace.indexer.health``), not from the actor: it stays answerable while the actor
restarts, and it is the same on every frontend.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Self

from aiohttp import web
from pydantic import Field

from marketplace.actors.indexer import INDEXER_SPEC
from marketplace.config import Settings
from marketplace.http import keys
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.indexer.engine import METRICS_KEY
from marketplace.indexer.health import Freshness, FreshnessSource, StaleReason, freshness
from marketplace.metrics import INDEXER_METRICS
from marketplace.types import Address, ResponseModel

log = logging.getLogger(__name__)
routes = RouteTable(tag="indexer")


class IndexerStatusResponse(ResponseModel):
    """Indexer health and freshness (IndexerFreshnessStatus fields plus cursor details)."""

    source: FreshnessSource
    indexedAt: datetime | None = None
    stale: bool
    freshnessTargetMs: int = Field(ge=1)
    lastSuccessfulSyncAt: datetime | None = None
    staleReason: StaleReason | None = Field(
        default=None,
        description=(
            "why `stale` is true (our extension): rpcUnreachable / rpcError / indexerError "
            "(the indexer's last poll failed; seen within one poll interval), notSyncing (no "
            "successful sync within the lag alert threshold), lagging, notStarted, notConfigured"
        ),
    )
    failingSince: datetime | None = Field(
        default=None, description="start of the current run of failed polls (our extension)"
    )
    chainId: int
    registryAddress: Address | None = None
    startBlock: int | None = None
    lastSyncedBlock: int | None = None
    headBlock: int | None = None
    lagBlocks: int | None = None
    lagSeconds: float | None = None
    lagAlertSeconds: int
    pollIntervalMs: int

    @classmethod
    def from_freshness(cls, state: Freshness, settings: Settings) -> Self:
        """``state.cursor`` is the indexer's cursor row, None before its first start."""
        cursor = state.cursor
        lag_seconds = state.lag_seconds
        return cls(
            source=state.source,
            indexedAt=cursor.last_synced_block_time if cursor else None,
            stale=state.stale,
            freshnessTargetMs=settings.indexer_lag_alert_seconds * 1000,
            lastSuccessfulSyncAt=cursor.last_successful_sync_at if cursor else None,
            staleReason=state.reason,
            failingSince=state.failing_since,
            chainId=cursor.chain_id if cursor else settings.chain_id,
            registryAddress=cursor.registry_address if cursor else None,
            startBlock=cursor.start_block if cursor else None,
            lastSyncedBlock=cursor.last_synced_block if cursor else None,
            headBlock=cursor.head_block if cursor else None,
            lagBlocks=state.lag_blocks,
            lagSeconds=None
            if lag_seconds is None or lag_seconds == float("inf")
            else round(lag_seconds, 3),
            lagAlertSeconds=settings.indexer_lag_alert_seconds,
            pollIntervalMs=settings.indexer_poll_interval_ms,
        )


def chain_configured(settings: Settings) -> bool:
    return bool(settings.indexer_enabled and settings.chain_rpc_url and settings.registry_address)


async def current_freshness(app: web.Application) -> Freshness:
    settings = app[keys.SETTINGS]
    return await freshness(
        app[keys.PG_POOL],
        app[keys.REDIS],
        chain_id=settings.chain_id,
        chain_configured=chain_configured(settings),
        lag_alert_seconds=settings.indexer_lag_alert_seconds,
    )


@routes.get(
    "/v1/internal/indexer/status",
    name="getIndexerStatus",
    summary="Chain indexer freshness: cursor, head, lag and staleness",
    auth=AuthMode.EITHER_OR_SCHEDULER,
    response=IndexerStatusResponse,
    exclude_none=True,
)
async def get_indexer_status(call: Call[None, None, None]) -> IndexerStatusResponse:
    """`stale` is true when the indexer's last poll failed (a dead chain RPC shows within one
    poll interval), when no successful sync happened within the lag alert threshold (a stopped
    indexer is stale too), or when the read model lags the chain by more than it; `staleReason`
    says which. Nothing here names a host or URL."""
    state = await current_freshness(call.app)
    return IndexerStatusResponse.from_freshness(state, call.settings)


def setup(app: web.Application) -> None:
    app[keys.METRICS_REFRESHERS].append(mirror_indexer_metrics)


async def indexer_actor(app: web.Application) -> AsyncIterator[None]:
    """Makes sure the deployment's one indexer actor runs. It outlives this frontend (detached):
    other frontends share it, so stopping one frontend must not stop indexing."""
    settings = app[keys.SETTINGS]
    if chain_configured(settings):
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
    INDEXER_METRICS.mirror(
        {(n if isinstance(n, str) else n.decode()): float(v) for n, v in values.items()}
    )
