"""The relay: committed events, in id order, from the Postgres outbox to a Redis Stream.

Every frontend runs one (``marketplace.http.app``); exactly one is active. A relay holds a
session-level ``pg_try_advisory_lock`` on a connection of its own (never the shared pool, whose
connections are reused and would carry the lock, or the LISTEN, to whoever acquires them next);
the others retry the lock every ``standby_interval`` and take over within that time once the
active relay's connection closes (process exit, crash, or a dead network connection noticed by
the server).

The active relay reads ``id > cursor ORDER BY id LIMIT n``, sends one ``XADD <stream> MAXLEN ~
<maxlen> <id>-0 type .. subject .. payload .. createdAt ..`` per event in one pipeline, then
advances the cursor in ``event_relay_cursor``. It wakes on the NOTIFY every producing
transaction sends at commit, and polls every ``poll_interval`` in case a notification is lost.

Fault contract (at-least-once, and no duplicate in the stream): the cursor moves only after
Redis accepted the entries. A relay killed between the XADD and the cursor update leaves the
cursor behind; the next active relay sends those events again, and Redis refuses each one
because the stream already holds an entry with that id or a larger one ("equal or smaller than
the target stream top item"), which counts as relayed. Since producers commit in id order
(``storage/repositories/events.py``), the cursor never passes an event that commits later.
Consumers still dedupe by id (``consumer.py``): a stream lost with its Redis server is rebuilt
from the cursor on, and what was older is read from Postgres.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import asyncpg
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from marketplace.config import Settings
from marketplace.outbox.leader import OutboxLeader
from marketplace.storage.repositories import events as repo

log = logging.getLogger(__name__)

SWEEP_INTERVAL_SECONDS = 60.0
SWEEP_BATCH = 10_000
BATCH_INTERVAL_SECONDS = 0.01
# Redis's answer to an XADD whose explicit id is not above the stream's last id.
_ALREADY_IN_STREAM = "equal or smaller than the target stream top item"


@dataclass(frozen=True)
class RelayConfig:
    stream: str
    maxlen: int
    poll_interval: float
    batch_size: int
    retention: timedelta | None
    # How often a standby relay tries to become the active one.
    standby_interval: float
    # After relaying a batch, events gather this long before the next read: under a steady
    # stream of commits (each wakes the relay) batches grow instead of costing three round trips
    # per event; an event that finds the relay idle still goes at once (bench/README.md,
    # "Messaging", has what it saves).
    batch_interval: float = BATCH_INTERVAL_SECONDS

    @classmethod
    def from_settings(cls, settings: Settings) -> RelayConfig:
        poll = settings.events_relay_poll_interval_ms / 1000
        hours = settings.events_retention_hours
        return cls(
            stream=settings.events_stream,
            maxlen=settings.events_stream_maxlen,
            poll_interval=poll,
            batch_size=settings.events_relay_batch_size,
            retention=timedelta(hours=hours) if hours else None,
            standby_interval=max(1.0, 10 * poll),
        )


def stream_entry(event: repo.StoredEvent) -> dict[str, str]:
    """The fields of an event's stream entry (its id is the entry id ``<id>-0``)."""
    return {
        "type": event.type,
        "subject": event.subject,
        "payload": event.payload_json,
        "createdAt": event.created_at.isoformat(),
    }


class EventRelay(OutboxLeader):
    role = "event relay"

    def __init__(self, dsn: str, redis: aioredis.Redis, config: RelayConfig) -> None:
        super().__init__(
            dsn,
            poll_interval=config.poll_interval,
            standby_interval=config.standby_interval,
            log=log,
        )
        self.redis = redis
        self.config = config
        self.relayed = 0  # entries this relay added to the stream
        self.already_relayed = 0  # entries Redis refused as already there
        self._next_sweep = 0.0

    async def try_lock(self, conn: asyncpg.Connection) -> bool:
        return await repo.try_relay_lock(conn)

    async def work(self, conn: asyncpg.Connection) -> bool:
        batch = await repo.unrelayed(conn, self.config.batch_size)
        if not batch:
            return False
        await self._relay(conn, batch)
        return await self.after_batch(
            len(batch), self.config.batch_size, self.config.batch_interval
        )

    async def between(self, conn: asyncpg.Connection) -> None:
        loop = asyncio.get_running_loop()
        if self.config.retention is not None and loop.time() >= self._next_sweep:
            await self._sweep(conn, self.config.retention)
            self._next_sweep = loop.time() + SWEEP_INTERVAL_SECONDS

    async def _relay(self, conn: asyncpg.Connection, batch: Sequence[repo.StoredEvent]) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for event in batch:
                pipe.xadd(
                    self.config.stream,
                    stream_entry(event),  # type: ignore[arg-type]
                    id=f"{event.id}-0",
                    maxlen=self.config.maxlen,
                    approximate=True,
                )
            results = await pipe.execute(raise_on_error=False)
        last: int | None = None
        failure: BaseException | None = None
        for event, result in zip(batch, results, strict=True):
            if isinstance(result, ResponseError) and _ALREADY_IN_STREAM in str(result):
                self.already_relayed += 1
            elif isinstance(result, BaseException):
                failure = result
                break
            else:
                self.relayed += 1
            last = event.id
        if last is not None:
            await self._mark_relayed(conn, last)
        if failure is not None:
            raise failure

    async def _mark_relayed(self, conn: asyncpg.Connection, last_id: int) -> None:
        await repo.advance_relay_cursor(conn, last_id)

    async def _sweep(self, conn: asyncpg.Connection, retention: timedelta) -> None:
        deleted = SWEEP_BATCH
        while deleted == SWEEP_BATCH:
            deleted = await repo.sweep(conn, retention, SWEEP_BATCH)
            if deleted:
                log.info("swept %d relayed events older than %s", deleted, retention)


# How a relay's connection names itself in pg_stat_activity (which host and process holds the
# relay lock).
relay_application_name = EventRelay.application_name
