"""The job queue in the frontend: the registry of declared queues, their worker actors, and the
queue metrics mirrored into ``/metrics`` (docs/jobs.md).

Queues are declared by the capabilities that own them (``Capability.queues`` in
:mod:`marketplace.http.capabilities`); the app factory puts their registry in
``app[keys.JOB_REGISTRY]``, which tests replace before start-up.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

from aiohttp import web
from prometheus_client import REGISTRY
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from marketplace.actors.job_worker import JobWorkers
from marketplace.http import keys
from marketplace.jobs.metrics import (
    OUTCOMES,
    RUN_BUCKETS,
    WAIT_BUCKETS,
    CachedSnapshot,
    JobMetricsSnapshot,
)
from marketplace.metric_sources import SOURCE_READ_TIMEOUT_SECONDS

log = logging.getLogger(__name__)


class JobMetricsCollector(Collector):
    """Job queue figures of the whole deployment (docs/jobs.md, "Metrics"): depth read from
    Postgres and worker events mirrored from Redis, set as one snapshot before each scrape."""

    def __init__(self) -> None:
        self.snapshot: JobMetricsSnapshot | None = None

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        if snap is None:
            return
        depth = GaugeMetricFamily(
            "marketplace_jobs",
            "Jobs by queue and status (queued includes jobs not yet due; completed jobs are "
            "counted by marketplace_job_outcomes_total).",
            labels=["queue", "status"],
        )
        for (queue, status), count in sorted(snap.depth.items()):
            depth.add_metric([queue, status], count)
        due = GaugeMetricFamily(
            "marketplace_jobs_due", "Queued jobs that are due now.", labels=["queue"]
        )
        oldest = GaugeMetricFamily(
            "marketplace_jobs_oldest_due_seconds",
            "How long the oldest due job has waited (0 when none is due).",
            labels=["queue"],
        )
        for queue in sorted(snap.due):
            due.add_metric([queue], snap.due[queue])
            oldest.add_metric([queue], snap.oldest_due_seconds.get(queue, 0.0))
        attempts = CounterMetricFamily(
            "marketplace_job_attempts", "Job attempts started (claims).", labels=["queue"]
        )
        for queue, count in sorted(snap.attempts.items()):
            attempts.add_metric([queue], count)
        outcomes = CounterMetricFamily(
            "marketplace_job_outcomes",
            "Finished attempts by outcome: " + ", ".join(OUTCOMES) + ".",
            labels=["queue", "outcome"],
        )
        for (queue, outcome), count in sorted(snap.outcomes.items()):
            outcomes.add_metric([queue, outcome], count)
        wait = HistogramMetricFamily(
            "marketplace_job_wait_seconds",
            "Seconds from a job becoming due (queued) to an attempt starting (running).",
            labels=["queue"],
        )
        for queue, data in sorted(snap.wait.items()):
            wait.add_metric([queue], data.cumulative(WAIT_BUCKETS), data.sum)
        run = HistogramMetricFamily(
            "marketplace_job_run_seconds",
            "Seconds an attempt ran (running to done), by outcome.",
            labels=["queue", "outcome"],
        )
        for (queue, outcome), data in sorted(snap.run.items()):
            run.add_metric([queue, outcome], data.cumulative(RUN_BUCKETS), data.sum)
        yield from (depth, due, oldest, attempts, outcomes, wait, run)


JOB_METRICS = JobMetricsCollector()
REGISTRY.register(JOB_METRICS)


def setup(app: web.Application) -> None:
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
