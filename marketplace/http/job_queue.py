"""The job queue in the frontend: the registry of declared queues, their worker actors, and the
queue metrics mirrored into ``/metrics`` (docs/jobs.md).

Queues are declared by the capabilities that own them (``Capability.queues`` in
:mod:`marketplace.capabilities`); tests replace ``app[keys.JOB_REGISTRY]`` before start-up.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from marketplace.actors.job_worker import JobWorkers
from marketplace.capabilities import CAPABILITIES, Capability, resolve
from marketplace.http import keys
from marketplace.jobs.metrics import CachedSnapshot
from marketplace.jobs.registry import JobRegistry
from marketplace.metric_sources import SOURCE_READ_TIMEOUT_SECONDS
from marketplace.metrics import JOB_METRICS

log = logging.getLogger(__name__)


def declared_queues(capabilities: tuple[Capability, ...] = CAPABILITIES) -> JobRegistry:
    """Every queue the capabilities declare; a queue name declared twice is refused."""
    return JobRegistry(resolve(ref) for capability in capabilities for ref in capability.queues)


def setup(app: web.Application) -> None:
    app[keys.JOB_REGISTRY] = declared_queues()
    app[keys.METRICS_REFRESHERS].append(refresh_job_metrics)


async def job_workers(app: web.Application) -> AsyncIterator[None]:
    """Find or create the worker actors of every registered queue (get-if-exists: every
    frontend asks, each named worker exists once). They are detached: they outlive this
    frontend and keep working for the others."""
    workers = JobWorkers(app[keys.ACTORS], app[keys.JOB_REGISTRY])
    if app[keys.SETTINGS].jobs_enabled:
        count = workers.start()
        log.info("job workers started", extra={"workers": count})
    app[keys.JOB_WORKERS] = workers
    app[_METRICS_CACHE] = CachedSnapshot(
        app[keys.SETTINGS].jobs_metrics_cache_seconds, read_timeout=SOURCE_READ_TIMEOUT_SECONDS
    )
    yield


_METRICS_CACHE: web.AppKey[CachedSnapshot] = web.AppKey("job_metrics_cache", CachedSnapshot)


async def refresh_job_metrics(app: web.Application) -> None:
    cache = app.get(_METRICS_CACHE)
    if cache is None:
        return
    try:
        JOB_METRICS.snapshot = await cache.refresh(
            app[keys.PG_POOL], app[keys.REDIS], app[keys.JOB_REGISTRY].names()
        )
    except Exception:
        # A scrape must not fail because the queue's figures are unavailable for a moment.
        log.warning("job metrics unavailable", exc_info=True)
