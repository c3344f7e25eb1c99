"""Indexer freshness: how current the read models are, and why not when they are not.

Two sources, read by every frontend alike: the cursor row in Postgres (what was synced, when,
against which head) and the indexer's last attempt, which the indexer writes to Redis after every
poll (``ok``, or what failed). The cursor alone cannot tell a dead chain RPC from a quiet chain
until the lag alert threshold passes; the last attempt tells it within one poll interval.
Messages and payloads here name failures by kind, never by address: the RPC URL stays internal.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import asyncpg
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from marketplace.chain.rpc import RpcError
from marketplace.storage.repositories import indexer as indexer_repo

log = logging.getLogger(__name__)

HEALTH_KEY_PREFIX = "marketplace:indexer:health"


def health_key(chain_id: int) -> str:
    return f"{HEALTH_KEY_PREFIX}:{chain_id}"


class FreshnessSource(enum.StrEnum):
    """The spec's IndexerFreshnessStatus.source."""

    INDEXED = "indexed"
    MANUAL = "manual"
    UNKNOWN = "unknown"


class Attempt(enum.StrEnum):
    """Outcome of the indexer's last poll."""

    OK = "ok"
    RPC_UNREACHABLE = "rpcUnreachable"  # no answer: refused, reset, timed out, HTTP error
    RPC_ERROR = "rpcError"  # the node answered with a JSON-RPC error
    INDEXER_ERROR = "indexerError"  # anything else (e.g. the database)


class StaleReason(enum.StrEnum):
    NOT_CONFIGURED = "notConfigured"  # no chain configured: nothing is indexed
    NOT_STARTED = "notStarted"  # no cursor yet
    RPC_UNREACHABLE = "rpcUnreachable"
    RPC_ERROR = "rpcError"
    INDEXER_ERROR = "indexerError"
    NOT_SYNCING = "notSyncing"  # no successful sync within the lag alert threshold
    LAGGING = "lagging"  # behind the chain head by more than the threshold


def classify_failure(exc: BaseException) -> Attempt:
    if isinstance(exc, TimeoutError | aiohttp.ClientError | ConnectionError):
        return Attempt.RPC_UNREACHABLE
    if isinstance(exc, RpcError):
        # A JSON-RPC error object carries a code; transport and HTTP failures do not.
        return Attempt.RPC_ERROR if exc.code is not None else Attempt.RPC_UNREACHABLE
    return Attempt.INDEXER_ERROR


class HealthRecorder:
    """What the indexer writes after each poll (kept small: one hash per chain)."""

    def __init__(self, redis: aioredis.Redis | None, chain_id: int) -> None:
        self.redis = redis
        self.key = health_key(chain_id)
        self.attempt: Attempt | None = None
        self.since = 0.0

    async def record(self, attempt: Attempt) -> bool:
        """Store the outcome of a poll; True when it differs from the previous one."""
        now = time.time()
        changed = attempt is not self.attempt
        if changed:
            if attempt is Attempt.OK and self.attempt is not None:
                log.warning("indexer polls succeed again (after %s)", self.attempt.value)
            self.attempt, self.since = attempt, now
        if self.redis is None:
            return changed
        try:
            await self.redis.hset(
                self.key,
                mapping={"attempt": attempt.value, "since": self.since, "checkedAt": now},
            )
        except (RedisError, OSError):
            log.debug("indexer health write failed", exc_info=True)
        return changed


@dataclass(frozen=True)
class LastAttempt:
    attempt: Attempt
    since: datetime
    checked_at: datetime


async def read_last_attempt(redis: aioredis.Redis, chain_id: int) -> LastAttempt | None:
    try:
        values: dict[Any, Any] = await redis.hgetall(health_key(chain_id))
    except (RedisError, OSError):
        return None
    values = {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in values.items()
    }
    try:
        return LastAttempt(
            attempt=Attempt(values["attempt"]),
            since=datetime.fromtimestamp(float(values["since"]), UTC),
            checked_at=datetime.fromtimestamp(float(values["checkedAt"]), UTC),
        )
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True)
class Freshness:
    source: FreshnessSource
    stale: bool
    reason: StaleReason | None
    cursor: indexer_repo.CursorRow | None = None
    failing_since: datetime | None = None
    lag_blocks: int | None = None
    lag_seconds: float | None = None


def lag_seconds_of(
    lag_blocks: int, synced_block_time: datetime | None, now: datetime | None = None
) -> float:
    """Seconds the read model is behind, in chain time: 0 while caught up, else the age of the
    newest block it reflects."""
    if lag_blocks == 0:
        return 0.0
    if synced_block_time is None:
        return float("inf")
    return max(0.0, ((now or datetime.now(UTC)) - synced_block_time).total_seconds())


async def freshness(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    *,
    chain_id: int,
    chain_configured: bool,
    lag_alert_seconds: int,
) -> Freshness:
    """Where the read models stand for ``chain_id``; the most pressing reason when stale."""
    cursor, last = await asyncio.gather(
        indexer_repo.get_cursor(pool, chain_id), read_last_attempt(redis, chain_id)
    )
    failing = last is not None and last.attempt is not Attempt.OK
    failure = StaleReason(last.attempt.value) if failing and last is not None else None
    failing_since = last.since if failing and last is not None else None
    if cursor is None:
        unknown = failure or (
            StaleReason.NOT_STARTED if chain_configured else StaleReason.NOT_CONFIGURED
        )
        return Freshness(FreshnessSource.UNKNOWN, True, unknown, failing_since=failing_since)
    now = datetime.now(UTC)
    lag_blocks = max(0, cursor.head_block - cursor.last_synced_block)
    lag_seconds = lag_seconds_of(lag_blocks, cursor.last_synced_block_time, now)
    last_sync = cursor.last_successful_sync_at
    silent = last_sync is None or (now - last_sync).total_seconds() > lag_alert_seconds
    if failure is not None:
        reason: StaleReason | None = failure
    elif silent:
        reason = StaleReason.NOT_SYNCING
    elif lag_seconds > lag_alert_seconds:
        reason = StaleReason.LAGGING
    else:
        reason = None
    return Freshness(
        FreshnessSource.INDEXED,
        reason is not None,
        reason,
        cursor=cursor,
        failing_since=failing_since,
        lag_blocks=lag_blocks,
        lag_seconds=lag_seconds,
    )
