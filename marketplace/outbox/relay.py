"""The relay: committed events, in position order, from the Postgres outbox to a Redis Stream.

Every frontend runs one (``marketplace.http.app``); exactly one is active. A relay holds a
session-level ``pg_try_advisory_lock`` on a connection of its own (never the shared pool, whose
connections are reused and would carry the lock, or the LISTEN, to whoever acquires them next);
the others retry the lock every ``standby_interval`` and take over within that time once the
active relay's connection closes (process exit, crash, or a dead network connection noticed by
the server).

Each round, the active relay first positions committed events (``events.position_for_relay``:
producers insert without any lock, and a position is what orders them, docs/events.md; the same
round trip gives back the idle key below), then reads its cursor and ``position > cursor ORDER
BY position LIMIT n`` in one statement, sends one ``XADD <stream> MAXLEN ~ <maxlen> <position>-0
type .. subject .. payload .. createdAt ..`` per event in one pipeline, and advances the cursor
in ``event_relay_cursor``. After a batch of more than one event (and less than ``n``) it lets
the next one gather for ``batch_interval``; after a single event it goes straight to its wait.

Waking up: producers do not NOTIFY on every commit (PostgreSQL serialises notifying commits).
Before it sleeps, the relay takes ``RELAY_IDLE_KEY`` (session, exclusive); every producing
statement tries to take it shared, holding it to its commit, and NOTIFYs
``RELAY_WAKE_CHANNEL`` (which only relays LISTEN) only when it cannot (the relay sleeps). So the
relay cannot take it while a producing transaction is in flight (it then tries again every
``IDLE_RETRY_SECONDS`` for up to ``batch_interval``, then goes back to work), and once it holds
it, it forgets earlier NOTIFYs (its own positioning's), looks once more for work (a producer
that committed just before) and then sleeps until a NOTIFY, or ``poll_interval``.

Fault contract (at-least-once, and no duplicate in the stream): the cursor moves only after
Redis accepted the entries. A relay killed between the XADD and the cursor update leaves the
cursor behind; the next active relay sends those events again, and Redis refuses each one
because the stream already holds an entry with that id or a larger one ("equal or smaller than
the target stream top item"), which counts as relayed. Positions only grow, and every position
a reader sees belongs to a committed event, so the cursor never passes an event that gets a
smaller position later. Consumers still dedupe by position (``consumer.py``): a stream lost with
its Redis server is rebuilt from the cursor on, and what was older is read from Postgres.

Retention: relayed events older than ``retention`` are deleted once every durable consumer has
read them (``event_consumer_cursors``); past ``unread_retention`` they are deleted anyway, and
each consumer that had not read them is told (an error in the log, a skip recorded in
``event_consumer_skips``, counted by ``marketplace_events_consumer_skipped_events``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import asyncpg
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from marketplace.aio import wait_event
from marketplace.config import Settings
from marketplace.outbox.leader import OutboxLeader
from marketplace.storage.repositories import events as repo

log = logging.getLogger(__name__)

SWEEP_INTERVAL_SECONDS = 60.0
SWEEP_BATCH = 10_000
BATCH_INTERVAL_SECONDS = 0.01
# How often the relay tries again for its idle key while producing transactions are in flight.
IDLE_RETRY_SECONDS = 0.002
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
    # Past this age a relayed event is deleted even if a durable consumer has not read it (None:
    # never); the consumer is told (docs/events.md, "Retention").
    unread_retention: timedelta | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> RelayConfig:
        poll = settings.events_relay_poll_interval_ms / 1000
        hours = settings.events_retention_hours
        max_hours = settings.events_retention_max_hours
        return cls(
            stream=settings.events_stream,
            maxlen=settings.events_stream_maxlen,
            poll_interval=poll,
            batch_size=settings.events_relay_batch_size,
            retention=timedelta(hours=hours) if hours else None,
            standby_interval=max(1.0, 10 * poll),
            unread_retention=timedelta(hours=max(max_hours, hours)) if max_hours else None,
        )


def stream_entry(event: repo.StoredEvent, previous: int) -> dict[str, str]:
    """The fields of an event's stream entry (its id is the entry id ``<id>-0``). ``previous``
    is the position of the event before it in the outbox: positions are not contiguous (they
    jump where ids were taken out of commit order), and a follower that sees ``previous`` equal
    to the last position it has knows nothing lies between without asking Postgres."""
    return {
        "type": event.type,
        "subject": event.subject,
        "payload": event.payload_json,
        "createdAt": event.created_at.isoformat(),
        "previous": str(previous),
    }


class EventRelay(OutboxLeader):
    role = "event relay"
    wake_channels = (repo.RELAY_WAKE_CHANNEL, repo.WAKE_CHANNEL)

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
        self.skipped_unread = 0  # unread events this relay's sweeps deleted (all consumers)
        self.sweeps = 0  # retention rounds this relay finished
        self._next_sweep = 0.0
        self._idle = False  # this relay holds RELAY_IDLE_KEY (from its last wait)

    async def try_lock(self, conn: asyncpg.Connection) -> bool:
        self._idle = False  # a new connection holds no idle key
        return await repo.try_relay_lock(conn)

    async def work(self, conn: asyncpg.Connection) -> bool:
        # Others position too (readers of "now", the durable consumers when no relay is active):
        # when one is at work, wait for its commit (one short statement) rather than find nothing
        # and come back a batch interval later, which cost the live stream ~18 ms per event
        # (bench/messaging.py). The same round trip gives back the idle key of the last wait.
        idle, self._idle = self._idle, False
        await repo.position_for_relay(conn, release_idle_lock=idle)
        # Only the active relay moves the cursor: the batch follows it directly (one statement).
        previous, batch = await repo.relay_batch(conn, self.config.batch_size)
        if not batch:
            return False
        await self._relay(conn, batch, previous)
        if len(batch) >= self.config.batch_size:
            return True
        if len(batch) > 1:
            # Commits come faster than rounds: let the next batch gather. A single event (a
            # quiet outbox) goes straight to the wait, whose NOTIFY wakes the relay for the next
            # one at once: gathering there only delayed the next event (bench/README.md).
            await asyncio.sleep(self.config.batch_interval)
        return False

    async def between(self, conn: asyncpg.Connection) -> None:
        loop = asyncio.get_running_loop()
        if self.config.retention is not None and loop.time() >= self._next_sweep:
            await self._sweep(conn, self.config.retention)
            self._next_sweep = loop.time() + SWEEP_INTERVAL_SECONDS

    async def wait_for_work(self, conn: asyncpg.Connection, wake: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.config.batch_interval
        while not await repo.try_idle_lock(conn):
            # A producing transaction is in flight (it holds the key shared to its commit) and
            # will not NOTIFY: try again shortly (one cheap statement), so that its event goes
            # soon after the commit, and go back to work after batch_interval at the latest
            # (under a steady load there is always one in flight: the batch gathers meanwhile).
            if loop.time() >= give_up:
                return
            await asyncio.sleep(IDLE_RETRY_SECONDS)
        # From here on producers NOTIFY; one that committed just before did not, and the check
        # below finds its events. So do earlier NOTIFYs (this relay's own positioning's, which
        # would otherwise cost an empty round), hence the clear: a later one still wakes the wait.
        wake.clear()
        if not await repo.relay_pending(conn):
            with contextlib.suppress(TimeoutError):
                await wait_event(wake, self.poll_interval)
        # The next round's positioning gives the key back in its own round trip (a failure
        # closes the connection, and the key with it). Work waiting: the next round takes it at
        # once; `work` waits for a positioner at work itself, so this cannot spin on events
        # someone else is about to position.
        self._idle = True

    async def _relay(
        self, conn: asyncpg.Connection, batch: Sequence[repo.StoredEvent], previous: int
    ) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for event in batch:
                pipe.xadd(
                    self.config.stream,
                    stream_entry(event, previous),  # type: ignore[arg-type]
                    id=f"{event.id}-0",
                    maxlen=self.config.maxlen,
                    approximate=True,
                )
                previous = event.id
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
            result = await repo.sweep(
                conn, retention, SWEEP_BATCH, unread_older_than=self.config.unread_retention
            )
            deleted = result.deleted
            if deleted:
                log.info("swept %d relayed events older than %s", deleted, retention)
            for skip in result.skips:
                self.skipped_unread += skip.events
                log.error(
                    "retention deleted %d events the %s consumer had not read (positions %d-%d,"
                    " older than %s, MARKETPLACE_EVENTS_RETENTION_MAX_HOURS): it skips them",
                    skip.events,
                    skip.consumer,
                    skip.after_position + 1,
                    skip.through_position,
                    self.config.unread_retention,
                )
        self.sweeps += 1


# How a relay's connection names itself in pg_stat_activity (which host and process holds the
# relay lock).
relay_application_name = EventRelay.application_name
