"""The deployment-wide figures of ``/metrics`` (docs/metrics.md): read from Postgres and Redis
by one refresher before each scrape, at most every ``jobs_metrics_cache_seconds``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from aiohttp import web
from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from marketplace.deployment_figures import CachedDeploymentSnapshot, DeploymentSnapshot
from marketplace.http import keys
from marketplace.http.routes.indexer_status import chain_configured

log = logging.getLogger(__name__)


class DeploymentMetricsCollector(Collector):
    """Deployment-wide figures read from Postgres and Redis (docs/metrics.md): the same on every
    frontend, set as one snapshot before each scrape."""

    def __init__(self) -> None:
        self.snapshot: DeploymentSnapshot | None = None

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        if snap is None:
            return
        yield from deployment_families(snap)


def deployment_families(snap: DeploymentSnapshot) -> list[Metric]:
    """The metric families of one snapshot."""
    verifier_jobs = GaugeMetricFamily(
        "marketplace_verifier_jobs",
        "Verifier jobs by check policy and status (queued, running, completed, failed).",
        labels=["policy", "status"],
    )
    for (policy, status), jobs in sorted(snap.verifier_jobs.items()):
        verifier_jobs.add_metric([policy, status], jobs)
    verifier_results = GaugeMetricFamily(
        "marketplace_verifier_results",
        "Completed verifier jobs by check policy and whether the delivery passed.",
        labels=["policy", "passes"],
    )
    for (policy, passes), jobs in sorted(snap.verifier_results.items()):
        verifier_results.add_metric([policy, passes], jobs)
    deliveries = GaugeMetricFamily(
        "marketplace_notification_deliveries",
        "Notification deliveries by status (queued, sent, failed, rate_limited, suppressed).",
        labels=["status"],
    )
    for status, count in sorted(snap.deliveries.items()):
        deliveries.add_metric([status], count)
    restarts = CounterMetricFamily(
        "marketplace_actor_restarts",
        "Restarts of long-lived actors by Ray, by kind (recorded by each restarted actor).",
        labels=["kind"],
    )
    for kind, count in sorted(snap.actor_restarts.items()):
        restarts.add_metric([kind], count)
    scalars = [
        ("marketplace_moderation_offenses_recorded", "Offense rows recorded (all time).",
         snap.offenses_recorded),
        ("marketplace_moderation_offenses_window",
         "Offenses within the moderation window (MARKETPLACE_MODERATION_WINDOW_SECONDS).",
         snap.offenses_window),
        ("marketplace_moderation_suspensions_active", "Suspensions of sending in force now.",
         snap.suspensions_active),
        ("marketplace_leaderboard_consumer_lag_events",
         "Outbox events the leaderboard consumer has yet to read (newest event id less its "
         "cursor; 0 when caught up).", snap.leaderboard_lag_events),
        ("marketplace_notification_consumer_lag_events",
         "Outbox events the notifications consumer has yet to read (newest event id less its "
         "cursor; 0 when caught up).", snap.notification_lag_events),
        ("marketplace_indexer_stale",
         "1 when the indexer status route reports stale (see its staleReason), else 0.",
         snap.indexer_stale),
        ("marketplace_indexer_last_success_age_seconds",
         "Seconds since the indexer's last successful sync (+Inf before the first).",
         snap.indexer_last_success_age_seconds),
    ]  # fmt: skip
    families: list[Metric] = [verifier_jobs, verifier_results, deliveries, restarts]
    for name, help_text, value in scalars:
        family = GaugeMetricFamily(name, help_text)
        family.add_metric([], value)
        families.append(family)
    return families


DEPLOYMENT_METRICS = DeploymentMetricsCollector()
REGISTRY.register(DEPLOYMENT_METRICS)


# --- read cache (marketplace/http/read_cache.py; docs/read-models.md) ---------------------------

_CACHE: web.AppKey[CachedDeploymentSnapshot] = web.AppKey(
    "deployment_figures_cache", CachedDeploymentSnapshot
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
