"""The durable outbox consumers' lag on ``/metrics`` (docs/events.md, "Retention"; docs/metrics.md).

Per durable consumer (the view ``event_consumer_cursors``: notifications, leaderboards):
events stored past its cursor, the age of the oldest of them, and the unread events retention
deleted from under it (``MARKETPLACE_EVENTS_RETENTION_MAX_HOURS``). Shared state, so every
frontend exports the same values (dashboards take ``max``); read before a scrape at most every
``jobs_metrics_cache_seconds``, and kept when the read fails.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from aiohttp import web
from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from marketplace.aio import AtMostEvery, within
from marketplace.http import keys
from marketplace.metric_sources import SOURCE_READ_TIMEOUT_SECONDS
from marketplace.storage.repositories import events as repo

log = logging.getLogger(__name__)


class ConsumerLagCollector(Collector):
    def __init__(self) -> None:
        self.lags: list[repo.ConsumerLag] = []

    def collect(self) -> Iterator[Metric]:
        events = GaugeMetricFamily(
            "marketplace_events_consumer_lag_events",
            "Outbox events stored past a durable consumer's cursor (0: caught up).",
            labels=["consumer"],
        )
        seconds = GaugeMetricFamily(
            "marketplace_events_consumer_lag_seconds",
            "Age of the oldest outbox event past a durable consumer's cursor (0: caught up).",
            labels=["consumer"],
        )
        skipped = CounterMetricFamily(
            "marketplace_events_consumer_skipped_events",
            "Unread events retention deleted from under a durable consumer "
            "(MARKETPLACE_EVENTS_RETENTION_MAX_HOURS), recorded in event_consumer_skips.",
            labels=["consumer"],
        )
        for lag in self.lags:
            events.add_metric([lag.consumer], lag.lag_events)
            seconds.add_metric([lag.consumer], lag.lag_seconds)
            skipped.add_metric([lag.consumer], lag.skipped_events)
        yield from (events, seconds, skipped)


CONSUMER_LAG = ConsumerLagCollector()
REGISTRY.register(CONSUMER_LAG)


class LatestLag(AtMostEvery[list[repo.ConsumerLag]]):
    """The lag read at most every ``jobs_metrics_cache_seconds``."""


_LATEST: web.AppKey[LatestLag] = web.AppKey("events_consumer_lag", LatestLag)


def setup(app: web.Application) -> None:
    app[_LATEST] = LatestLag(app[keys.SETTINGS].jobs_metrics_cache_seconds, [])
    app[keys.METRICS_REFRESHERS].append(refresh_consumer_lag)


async def refresh_consumer_lag(app: web.Application) -> None:
    pool = app[keys.PG_POOL]

    async def read() -> list[repo.ConsumerLag]:
        try:
            return await within(SOURCE_READ_TIMEOUT_SECONDS, repo.consumer_lag(pool))
        except Exception:
            log.warning("outbox consumer lag unavailable", exc_info=True)
            return CONSUMER_LAG.lags  # the last values

    CONSUMER_LAG.lags = await app[_LATEST].get(read)
