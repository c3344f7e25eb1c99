"""The notification rate-limiter actor: per recipient and event type, at most N deliveries in
any window of T seconds (docs/notifications.md, "Rate limit").

One named actor, ``notification-limiter``, not a command on the user shards: its only caller
is the one active notifications consumer, which asks once per batch about every delivery of the
batch in order; spreading the keys over the user shards would turn one call into one per shard
and gain nothing, since the consumer serialises the decisions anyway. Its state (the admission
times still inside each key's window, :class:`~marketplace.notifications.rate_limit.WindowLimiter`)
is a cache of the delivery rows: a key seen for the first time is loaded from the rows counted
against the limit (queued, sent, failed), so an actor killed and restarted by Ray
(``max_restarts=-1``) resets nobody's window.

Fault contract: ``admit`` is safe to repeat (an admitted event is answered yes again without
being counted twice; refusals change nothing), so Ray may retry it after a restart
(``idempotent_calls``). Decisions are made before the consumer's transaction commits; if that
transaction rolls back the consumer reads the same events again and gets the same answers. The
one leftover: an admission whose batch rolled back and, on the retry, was suppressed instead
(the recipient muted the sender in between) stays counted in this actor's memory until it
leaves the window or the actor restarts; it can only make the limit stricter, never looser.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import asyncpg

from marketplace.actors.options import ActorSpec
from marketplace.actors.runtime import ActorRuntime
from marketplace.actors.settings import ActorSettings
from marketplace.actors.startup import start_actor
from marketplace.actors.status import LimiterStatus
from marketplace.notifications.rate_limit import LimitRequest, WindowLimiter
from marketplace.storage.pool import create_pool
from marketplace.storage.repositories import notification_deliveries as repo

ACTOR_NAME = "notification-limiter"
# Idle keys are dropped at most this often (they are rebuilt from the rows if seen again).
FORGET_INTERVAL_SECONDS = 300.0


class NotificationLimiterActor:
    def __init__(self, settings: ActorSettings) -> None:
        start_actor("notification-limiter", settings)
        self.settings = settings
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()
        self.limiter = WindowLimiter(self._load)
        # One decision at a time: a burst split over concurrent calls is still counted exactly.
        self._lock = asyncio.Lock()
        self._forgotten_at = time.monotonic()
        self.started_at = time.time()

    async def _pool_(self) -> asyncpg.Pool:
        async with self._pool_lock:
            if self._pool is None:
                self._pool = await create_pool(self.settings.database_url, min_size=1, max_size=2)
        return self._pool

    async def _load(
        self, recipient_user_id: str, event_type: str, since: float
    ) -> Iterable[tuple[float, int]]:
        pool = await self._pool_()
        return await repo.admitted_since(pool, uuid.UUID(recipient_user_id), event_type, since)

    async def admit(self, requests: Sequence[LimitRequest], now: float) -> list[bool]:
        async with self._lock:
            verdicts = await self.limiter.admit(requests, now)
            if time.monotonic() - self._forgotten_at > FORGET_INTERVAL_SECONDS:
                self.limiter.forget_idle(now)
                self._forgotten_at = time.monotonic()
            return verdicts

    async def status(self) -> LimiterStatus:
        return LimiterStatus(
            pid=os.getpid(),
            keys=len(self.limiter.log),
            rebuilt_keys=self.limiter.rebuilt_keys,
            started_at=self.started_at,
        )


LIMITER_SPEC = ActorSpec(
    name=ACTOR_NAME,
    cls=NotificationLimiterActor,
    idempotent_calls=True,
    max_concurrency=16,
)


class RemoteLimiter:
    """The consumer's :class:`~marketplace.notifications.consumer.Limiter`: the actor, called
    through the runtime (a dead or restarting actor raises; the consumer retries its batch)."""

    def __init__(self, runtime: ActorRuntime) -> None:
        self.runtime = runtime

    def handle(self) -> Any:
        return self.runtime.handle(LIMITER_SPEC, self.runtime.actor_settings())

    async def admit(self, requests: Sequence[LimitRequest], now: float) -> list[bool]:
        result = await self.runtime.call(ACTOR_NAME, self.handle(), "admit", list(requests), now)
        return list(result)

    async def status(self) -> LimiterStatus:
        result: LimiterStatus = await self.runtime.call(ACTOR_NAME, self.handle(), "status")
        return result
