"""The deployment-wide figures of ``/metrics`` (docs/metrics.md): read from Postgres and Redis
by one refresher before each scrape, at most every ``jobs_metrics_cache_seconds``."""

from __future__ import annotations

import logging

from aiohttp import web

from marketplace.deployment_metrics import CachedDeploymentSnapshot
from marketplace.http import keys
from marketplace.http.routes.indexer_status import chain_configured
from marketplace.metrics import DEPLOYMENT_METRICS

log = logging.getLogger(__name__)

_CACHE: web.AppKey[CachedDeploymentSnapshot] = web.AppKey(
    "deployment_metrics_cache", CachedDeploymentSnapshot
)


def setup(app: web.Application) -> None:
    settings = app[keys.SETTINGS]
    app[_CACHE] = CachedDeploymentSnapshot(
        settings.jobs_metrics_cache_seconds,
        moderation_window_seconds=settings.moderation_window_seconds,
        chain_id=settings.chain_id,
        chain_configured=chain_configured(settings),
        lag_alert_seconds=settings.indexer_lag_alert_seconds,
    )
    app[keys.METRICS_REFRESHERS].append(refresh_deployment_metrics)


async def refresh_deployment_metrics(app: web.Application) -> None:
    try:
        DEPLOYMENT_METRICS.snapshot = await app[_CACHE].refresh(app[keys.PG_POOL], app[keys.REDIS])
    except Exception:
        # Each source already keeps its last values; this is for anything unforeseen.
        log.warning("deployment metrics unavailable", exc_info=True)
