"""Deployment-wide figures for ``/metrics`` (docs/metrics.md), read from Postgres and Redis.

Verifier jobs and results, notification deliveries, moderation offenses and suspensions, the
outbox consumers' lag, the indexer's staleness and the actors' restarts are facts about shared
state, not about the frontend that is scraped: every frontend reads them from the same tables and
Redis hashes and exports the same values, so dashboards aggregate them with ``max`` across
frontend instances. The frontend reads them at scrape time, at most every ``max_age`` seconds
(:class:`CachedDeploymentSnapshot`), so a scrape storm costs one statement per interval.

A source that cannot be read keeps its last values (logged): a scrape never fails because
Postgres or Redis is unavailable for a moment.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import asyncpg
import redis.asyncio as aioredis

from marketplace.aio import AtMostEvery, within
from marketplace.indexer.health import freshness
from marketplace.metric_sources import ACTOR_RESTARTS_KEY, SOURCE_READ_TIMEOUT_SECONDS
from marketplace.storage.repositories import deployment_figures as repo
from marketplace.verifier.policy import PolicyId

log = logging.getLogger(__name__)
T = TypeVar("T")

ACTOR_KINDS = ("project-shard", "user-shard", "indexer", "job-worker", "notification-limiter")
VERIFIER_STATUSES = ("queued", "running", "completed", "failed")
DELIVERY_STATUSES = ("queued", "sent", "failed", "rate_limited", "suppressed")


def _verifier_zeros() -> dict[tuple[str, str], float]:
    return {(policy.value, status): 0.0 for policy in PolicyId for status in VERIFIER_STATUSES}


def _result_zeros() -> dict[tuple[str, str], float]:
    return {(policy.value, passes): 0.0 for policy in PolicyId for passes in ("true", "false")}


@dataclass(frozen=True)
class DeploymentSnapshot:
    """One reading of the shared state. Every label value a dashboard may filter on is present
    (0 when there is nothing), so an empty state is a 0 rather than a missing series."""

    # (policy, status) -> verifier jobs
    verifier_jobs: dict[tuple[str, str], float] = field(default_factory=_verifier_zeros)
    # (policy, "true" | "false") -> completed verifier jobs
    verifier_results: dict[tuple[str, str], float] = field(default_factory=_result_zeros)
    deliveries: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(DELIVERY_STATUSES, 0.0)
    )
    offenses_recorded: float = 0.0
    offenses_window: float = 0.0
    suspensions_active: float = 0.0
    leaderboard_lag_events: float = 0.0
    notification_lag_events: float = 0.0
    # 1 or 0, as the indexer status route's `stale`; +Inf age before any successful sync.
    indexer_stale: float = 0.0
    indexer_last_success_age_seconds: float = math.inf
    actor_restarts: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(ACTOR_KINDS, 0.0)
    )


def postgres_figures(row: repo.SnapshotRow) -> dict[str, object]:
    """The snapshot fields held in the row of :func:`repo.snapshot`."""
    verifier_jobs = _verifier_zeros()
    for policy, status, jobs in row.verifier_jobs:
        verifier_jobs[(str(policy), str(status))] = float(jobs)
    verifier_results = _result_zeros()
    for policy, passes, jobs in row.verifier_results:
        verifier_results[(str(policy), "true" if passes else "false")] = float(jobs)
    deliveries = dict.fromkeys(DELIVERY_STATUSES, 0.0)
    for status, count in row.deliveries:
        deliveries[str(status)] = float(count)
    newest = int(row.newest_event_id)
    return {
        "verifier_jobs": verifier_jobs,
        "verifier_results": verifier_results,
        "deliveries": deliveries,
        "offenses_recorded": float(row.offenses_recorded),
        "offenses_window": float(row.offenses_window),
        "suspensions_active": float(row.suspensions_active),
        "leaderboard_lag_events": float(max(0, newest - int(row.leaderboard_cursor))),
        "notification_lag_events": float(max(0, newest - int(row.notification_cursor))),
    }


def restart_figures(fields: dict[str, str]) -> dict[str, float]:
    """The restart counts of the Redis hash; every known kind present, unknown kinds kept."""
    restarts = dict.fromkeys(ACTOR_KINDS, 0.0)
    for kind, raw in fields.items():
        try:
            restarts[kind] = float(raw)
        except ValueError:
            continue
    return restarts


async def _bounded(read: Awaitable[T]) -> T:
    return await within(SOURCE_READ_TIMEOUT_SECONDS, read)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class CachedDeploymentSnapshot:
    """The frontend's view, refreshed at most every ``max_age`` seconds however often
    Prometheus (or several Prometheus servers) scrape. Each source (Postgres, the indexer's
    freshness, the restart hash in Redis) that fails keeps its last values."""

    def __init__(
        self,
        max_age: float,
        *,
        moderation_window_seconds: float,
        chain_id: int,
        chain_configured: bool,
        lag_alert_seconds: int,
    ) -> None:
        self._latest = AtMostEvery(max_age, DeploymentSnapshot())
        self.moderation_window_seconds = moderation_window_seconds
        self.chain_id = chain_id
        self.chain_configured = chain_configured
        self.lag_alert_seconds = lag_alert_seconds

    async def refresh(self, pool: asyncpg.Pool, redis: aioredis.Redis) -> DeploymentSnapshot:
        return await self._latest.get(lambda: self._read(pool, redis))

    async def _read(self, pool: asyncpg.Pool, redis: aioredis.Redis) -> DeploymentSnapshot:
        row, fresh, restarts = await asyncio.gather(
            _bounded(repo.snapshot(pool, moderation_window_seconds=self.moderation_window_seconds)),
            _bounded(
                freshness(
                    pool,
                    redis,
                    chain_id=self.chain_id,
                    chain_configured=self.chain_configured,
                    lag_alert_seconds=self.lag_alert_seconds,
                )
            ),
            _bounded(redis.hgetall(ACTOR_RESTARTS_KEY)),
            return_exceptions=True,
        )
        changes: dict[str, object] = {}
        if isinstance(row, BaseException):
            log.warning("deployment metrics: postgres figures unavailable", exc_info=row)
        else:
            changes.update(postgres_figures(row))
        if isinstance(fresh, BaseException):
            log.warning("deployment metrics: indexer freshness unavailable", exc_info=fresh)
        else:
            last_sync = fresh.cursor.last_successful_sync_at if fresh.cursor else None
            changes["indexer_stale"] = 1.0 if fresh.stale else 0.0
            changes["indexer_last_success_age_seconds"] = (
                math.inf
                if last_sync is None
                else max(0.0, (datetime.now(UTC) - last_sync).total_seconds())
            )
        if isinstance(restarts, BaseException):
            log.warning("deployment metrics: actor restarts unavailable", exc_info=restarts)
        else:
            changes["actor_restarts"] = restart_figures(
                {_text(k): _text(v) for k, v in restarts.items()}
            )
        return dataclasses.replace(self._latest.value, **changes)  # type: ignore[arg-type]
