"""The stream hub: one per frontend process, between the change events and the open streams.

One task follows the Redis Stream (``EventStream.subscribe``, streamed types only). For each
event it asks the type's audience rule ONCE which users may see it now (one SQL query, skipped
while no stream is open here), then puts the event on the bounded queue of each open stream of
those users. Each stream's handler writes its queue to its socket. So the cost per event is one
query plus one queue put per receiving stream, whatever the number of open streams, and no
client can slow down another: a stream whose queue is full is disconnected (the client resumes
with ``Last-Event-ID``).

Gap-free hand-over from catch-up to live: registering a stream is synchronous and records the
hub's ``position`` (the last event fanned out) as the stream's ``live_from``; every later event
reaches its queue through the fan-out, every earlier one is replayed from the stream/Postgres
(``after < id <= live_from``) before the queue is read. The queue buffers live events meanwhile;
the stream writes ids in increasing order and drops any it has passed, so nothing comes twice.

A second task sends heartbeats (queued like events, so they carry a position that is complete
for the stream), renews the streams' slot leases in Redis and notices clients that went away.

Fault contract: if Redis or Postgres fails, the follower logs, waits (backing off to 5 s) and
resubscribes from its position; streams stay open and receive the delayed events in order. The
hub keeps no state that outlives the process; a client's position is its last event id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple

import asyncpg
import redis.asyncio as aioredis

from marketplace.aio import raise_if_cancelling
from marketplace.config import Settings
from marketplace.errors import ServiceUnavailable
from marketplace.events.types import Event
from marketplace.metrics import (
    STREAM_DELIVERY_LATENCY,
    STREAM_EVENTS_DELIVERED,
    STREAM_HUB_POSITION,
    STREAM_RESETS,
    STREAMS_CLOSED,
    STREAMS_OPEN,
)
from marketplace.outbox.consumer import EventStream
from marketplace.storage.repositories import api_keys as api_keys_repo
from marketplace.storage.repositories import events as events_repo
from marketplace.stream import sse
from marketplace.stream.audience import streamed_types
from marketplace.stream.slots import StreamSlots
from marketplace.stream.views import frames_for

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 5.0
# XREAD BLOCK of the follower: a wake-up per second when idle, well inside the client's socket
# timeout (5 s by default in redis-py).
FOLLOW_BLOCK_MS = 1_000
# Cancelling a task: attempts, and how long each waits for it to end.
STOP_ATTEMPTS = 3
STOP_WAIT_SECONDS = 2.0
# Events whose audience queries run ahead of the fan-out (each holds a pool connection briefly).
AUDIENCE_WINDOW = 8
# How often the hub looks for streams whose client went away (aiohttp does not tell a handler).
LIVENESS_INTERVAL_SECONDS = 1.0
# A slot lease outlives this many missed heartbeats.
LEASE_HEARTBEATS = 3
# After Redis lost the slots, opening a stream waits this long (three of the hubs' one-second
# checks of the slots' epoch) for every hub to re-register its streams.
SLOTS_RECOVERY_SECONDS = 3 * LIVENESS_INTERVAL_SECONDS

Send = Callable[[bytes], Awaitable[None]]


@dataclass(frozen=True)
class HubConfig:
    stream: str
    heartbeat: float
    max_per_user: int
    queue_size: int
    # A resume position more than this many ids behind the stream's is not replayed.
    replay_max_events: int = 1_000

    @property
    def lease_seconds(self) -> float:
        return LEASE_HEARTBEATS * self.heartbeat

    @classmethod
    def from_settings(cls, settings: Settings) -> HubConfig:
        return cls(
            stream=settings.events_stream,
            heartbeat=settings.stream_heartbeat_seconds,
            max_per_user=settings.stream_max_per_user,
            queue_size=settings.stream_queue_size,
            replay_max_events=settings.stream_replay_max_events,
        )


class Heartbeat(NamedTuple):
    # Every event up to here that the stream may see is queued before this heartbeat.
    position: int


class Close(NamedTuple):
    reason: str


class Frame(NamedTuple):
    """An event as one stream writes it: the SSE message of the recipient's view
    (``views.frames_for``), shared by the streams of the recipients with the same view."""

    id: int
    type: str
    created_at: float  # Unix seconds
    data: bytes


Item = Frame | Heartbeat | Close
# Each recipient's SSE message of one event.
Frames = dict[uuid.UUID, bytes]


# An event read ahead with its audience and view query (None: not started), or the reader's
# failure.
Ahead = tuple[Event, "asyncio.Future[Frames] | None"] | Exception


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it, bounded: a cancellation a library swallowed is sent
    again, and a task that still runs is reported rather than waited for forever (it would hold
    up the app's shutdown)."""
    for _ in range(STOP_ATTEMPTS):
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=STOP_WAIT_SECONDS)
        if done:
            if not task.cancelled() and task.exception() is not None:
                log.warning("%s failed", task.get_name(), exc_info=task.exception())
            return
    log.error("%s did not stop when cancelled", task.get_name())


def _discard(window: asyncio.Queue[Ahead]) -> None:
    """Drop what was read ahead, cancelling its queries (the follower restarts from its
    position and reads those events again)."""
    while not window.empty():
        item = window.get_nowait()
        if isinstance(item, tuple) and item[1] is not None:
            pending = item[1]
            if pending.done():
                if not pending.cancelled():
                    pending.exception()  # retrieved, so it is not reported as lost
            else:
                pending.cancel()


class Subscriber:
    """One open stream: its user, its queue and the hooks its HTTP connection provides."""

    def __init__(
        self,
        user_id: uuid.UUID,
        queue_size: int,
        *,
        expires_at: float | None = None,
        api_key_id: uuid.UUID | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex
        self.user_id = user_id
        # The credentials the stream was opened with: it ends when the session token expires
        # (Unix seconds) or the agent key is revoked.
        self.expires_at = expires_at
        self.api_key_id = api_key_id
        self.queue: asyncio.Queue[Item] = asyncio.Queue(queue_size)
        self.live_from = 0
        self.closed_reason: str | None = None
        # Set by the transport layer: is the client still connected; drop the connection now.
        self.connected: Callable[[], bool] = lambda: True
        self.abort: Callable[[], None] = lambda: None


class StreamHub:
    def __init__(self, pool: asyncpg.Pool, redis: aioredis.Redis, config: HubConfig) -> None:
        self.pool = pool
        self.config = config
        self.events = EventStream(redis, pool, stream=config.stream, block_ms=FOLLOW_BLOCK_MS)
        self.slots = StreamSlots(
            redis,
            limit=config.max_per_user,
            lease_seconds=config.lease_seconds,
            recovery_seconds=SLOTS_RECOVERY_SECONDS,
        )
        self.types = streamed_types()
        self.position = 0
        self.subscribers: set[Subscriber] = set()
        self.by_user: dict[uuid.UUID, set[Subscriber]] = {}
        self.closing = False
        self._tasks: list[asyncio.Task[None]] = []
        # The slot epoch this hub's leases were registered under (slots.py); None: unknown.
        self.slots_epoch: str | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        self.position = await events_repo.last_id(self.pool)
        STREAM_HUB_POSITION.set(self.position)
        try:
            self.slots_epoch = await self.slots.start_epoch()
        except Exception:
            # The tick notes the epoch once Redis answers (and re-registers, with no stream yet).
            log.warning("could not read the event stream slots' epoch", exc_info=True)
        self._tasks = [
            asyncio.create_task(self._follow(), name="stream-hub-follow"),
            asyncio.create_task(self._tick(), name="stream-hub-tick"),
        ]

    def shutdown(self) -> None:
        """Refuse new streams and end the open ones (their clients reconnect elsewhere)."""
        self.closing = True
        for subscriber in tuple(self.subscribers):
            self._end(subscriber, "shutdown", abort=False)

    async def stop(self) -> None:
        self.shutdown()
        for task in self._tasks:
            await _stop(task)

    # --- streams --------------------------------------------------------------------------------

    async def open(
        self,
        user_id: uuid.UUID,
        *,
        expires_at: float | None = None,
        api_key_id: uuid.UUID | None = None,
    ) -> Subscriber:
        """Take one of the user's slots (429 beyond) and start queueing the user's events until
        ``expires_at`` (Unix seconds) passes or the agent key ``api_key_id`` is revoked."""
        if self.closing:
            raise ServiceUnavailable("this frontend is shutting down; reconnect", retry_after=1)
        subscriber = Subscriber(
            user_id, self.config.queue_size, expires_at=expires_at, api_key_id=api_key_id
        )
        await self.slots.acquire(user_id, subscriber.id)
        if self.closing:
            await self._release(subscriber)
            raise ServiceUnavailable("this frontend is shutting down; reconnect", retry_after=1)
        # No await from here to the end: live_from and the registration are one step.
        subscriber.live_from = self.position
        self.subscribers.add(subscriber)
        self.by_user.setdefault(user_id, set()).add(subscriber)
        STREAMS_OPEN.inc()
        return subscriber

    async def close(self, subscriber: Subscriber, reason: str = "client_gone") -> None:
        if subscriber.closed_reason is None:
            subscriber.closed_reason = reason
        if self._unregister(subscriber):
            STREAMS_OPEN.dec()
            STREAMS_CLOSED.labels(subscriber.closed_reason).inc()
        await self._release(subscriber)

    async def serve(self, subscriber: Subscriber, after: int, send: Send) -> str:
        """Write the stream until it ends; returns why it ended.

        ``after``: the client's position; the events after it up to ``live_from`` are replayed
        first (each checked against its audience rule now), then the queue is written.
        """
        last = after
        try:
            reset = await self._reset_reason(after, subscriber.live_from)
            if reset is not None:
                # Too far behind to replay: the client starts again from the stream's position.
                last = subscriber.live_from
                await send(sse.reset_message(last, after, reset))
                STREAM_RESETS.labels(reset).inc()
            else:
                await send(sse.position_message(after))
            if last < subscriber.live_from:
                replayed = self.events.replay(last, subscriber.live_from, self.types)
                async with contextlib.aclosing(replayed) as events:
                    async for event in events:
                        if subscriber.closed_reason is not None:
                            return subscriber.closed_reason
                        mine = await frames_for(self.pool, event, subscriber.user_id)
                        frame = mine.get(subscriber.user_id)
                        if frame is not None:
                            await send(frame)
                            STREAM_EVENTS_DELIVERED.labels(event.type, "catchup").inc()
                        last = event.id
            while True:
                item = await subscriber.queue.get()
                if isinstance(item, Close):
                    return item.reason
                if isinstance(item, Heartbeat):
                    last = max(last, item.position)
                    await send(sse.heartbeat_message(last))
                    continue
                if item.id <= last:
                    continue
                await send(item.data)
                last = item.id
                STREAM_EVENTS_DELIVERED.labels(item.type, "live").inc()
                STREAM_DELIVERY_LATENCY.observe(time.time() - item.created_at)
        except ConnectionError:
            return subscriber.closed_reason or "client_gone"

    async def _reset_reason(self, after: int, live_from: int) -> str | None:
        """Why the events after ``after`` up to ``live_from`` are not replayed, or None: more
        than ``replay_max_events`` ids (``replay_limit``; ids are not contiguous, so at most that
        many events would be read), or some of them swept from PostgreSQL (``retention``). So
        the cost of opening a stream is bounded whatever id the client sends."""
        if after >= live_from:
            return None
        if live_from - after > self.config.replay_max_events:
            return "replay_limit"
        oldest = await events_repo.first_id(self.pool)
        if oldest is None or after < oldest - 1:
            return "retention"
        return None

    # --- internals ------------------------------------------------------------------------------

    def _unregister(self, subscriber: Subscriber) -> bool:
        if subscriber not in self.subscribers:
            return False
        self.subscribers.discard(subscriber)
        mine = self.by_user.get(subscriber.user_id)
        if mine is not None:
            mine.discard(subscriber)
            if not mine:
                del self.by_user[subscriber.user_id]
        return True

    def _end(self, subscriber: Subscriber, reason: str, *, abort: bool) -> None:
        """Stop feeding a stream and tell its writer to finish (synchronous: callable from the
        fan-out). ``abort`` also drops the connection, so a writer stuck on a client that does
        not read fails at once instead of waiting for it."""
        if subscriber.closed_reason is None:
            subscriber.closed_reason = reason
        if self._unregister(subscriber):
            STREAMS_OPEN.dec()
            STREAMS_CLOSED.labels(reason).inc()
        while not subscriber.queue.empty():
            subscriber.queue.get_nowait()
        subscriber.queue.put_nowait(Close(reason))
        if abort:
            subscriber.abort()

    def _offer(self, subscriber: Subscriber, item: Item) -> None:
        try:
            subscriber.queue.put_nowait(item)
        except asyncio.QueueFull:
            log.info("event stream of user %s fell behind; disconnected", subscriber.user_id)
            self._end(subscriber, "overflow", abort=True)

    def _fan_out(self, event: Event, frames: Frames) -> None:
        created_at = event.createdAt.timestamp()
        shared: dict[int, Frame] = {}
        for user_id, data in frames.items():
            subscribers = self.by_user.get(user_id)
            if not subscribers:
                continue
            item = shared.get(id(data))
            if item is None:
                item = shared[id(data)] = Frame(event.id, event.type, created_at, data)
            for subscriber in tuple(subscribers):
                self._offer(subscriber, item)
        self._advance(event.id)

    def _advance(self, position: int) -> None:
        self.position = position
        STREAM_HUB_POSITION.set(position)

    async def _follow(self) -> None:
        """Fan out every streamed event in id order, forever; restart from the position after a
        failure. Audience queries of the next few events run while earlier ones are fanned out,
        so a burst (an indexer batch touching many projects) costs about one query's latency
        per window rather than per event."""
        backoff = 0.1
        while True:
            window: asyncio.Queue[Ahead] = asyncio.Queue(AUDIENCE_WINDOW)
            reader = asyncio.create_task(self._read_ahead(window), name="stream-hub-read")
            try:
                while True:
                    item = await window.get()
                    if isinstance(item, BaseException):
                        raise item
                    event, pending = item
                    if pending is None:
                        if not self.by_user:
                            # Nobody to tell here; no await between the check and the advance,
                            # so no stream can register in between and miss the event.
                            self._advance(event.id)
                            continue
                        # A stream opened since the event was read: ask now.
                        pending = asyncio.ensure_future(frames_for(self.pool, event))
                    self._fan_out(event, await pending)
                    backoff = 0.1
            except asyncio.CancelledError:
                raise
            except Exception:
                raise_if_cancelling()
                log.warning(
                    "stream hub lost the event stream at %d; retrying in %.1fs",
                    self.position,
                    backoff,
                    exc_info=True,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            finally:
                _discard(window)  # so a reader waiting to put can see its cancellation
                await _stop(reader)
                _discard(window)

    async def _read_ahead(self, window: asyncio.Queue[Ahead]) -> None:
        """Events after the position, each with its audience query already started (none while
        no stream is open here); a failure is handed to the fan-out as the last item."""
        try:
            followed = self.events.subscribe(self.types, self.position)
            async with contextlib.aclosing(followed) as events:
                async for event in events:
                    pending = None
                    if self.by_user:
                        pending = asyncio.ensure_future(frames_for(self.pool, event))
                    try:
                        await window.put((event, pending))
                    except asyncio.CancelledError:
                        if pending is not None:
                            pending.cancel()
                        raise
        except Exception as exc:
            raise_if_cancelling()
            await window.put(exc)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        interval = min(LIVENESS_INTERVAL_SECONDS, self.config.heartbeat)
        next_beat = loop.time() + self.config.heartbeat
        while True:
            await asyncio.sleep(interval)
            now = time.time()
            for subscriber in tuple(self.subscribers):
                if not subscriber.connected():
                    self._end(subscriber, "client_gone", abort=False)
                elif subscriber.expires_at is not None and subscriber.expires_at <= now:
                    self._end(subscriber, "credentials_expired", abort=False)
            await self._check_slots_epoch()
            if loop.time() < next_beat:
                continue
            next_beat = loop.time() + self.config.heartbeat
            await self._end_revoked_keys()
            beat = Heartbeat(self.position)
            for subscriber in tuple(self.subscribers):
                self._offer(subscriber, beat)
            try:
                await self.slots.renew([(s.user_id, s.id) for s in self.subscribers])
            except Exception:
                raise_if_cancelling()
                # Leases outlive three heartbeats: one failed renewal loses no slot.
                log.warning("could not renew event stream slots", exc_info=True)

    async def _check_slots_epoch(self) -> None:
        """Once a second: when Redis lost the slots (restart, flush; slots.py), re-register the
        leases of every stream open here at once rather than at the next heartbeat, so the
        per-user limit holds again within the recovery window."""
        try:
            epoch = await self.slots.epoch()
            if epoch is not None and epoch == self.slots_epoch:
                return
            streams = [(s.user_id, s.id) for s in self.subscribers]
            self.slots_epoch = await self.slots.reregister(streams)
        except Exception:
            raise_if_cancelling()
            log.warning("could not check the event stream slots in Redis", exc_info=True)
            return
        log.warning(
            "the event stream slots' epoch changed (Redis restarted or lost its data); "
            "re-registered the %d streams open here",
            len(streams),
        )

    async def _end_revoked_keys(self) -> None:
        """End the streams whose agent key was revoked (checked once per heartbeat)."""
        keyed = [s for s in self.subscribers if s.api_key_id is not None]
        if not keyed:
            return
        try:
            revoked = await api_keys_repo.revoked_among(
                self.pool, sorted({s.api_key_id for s in keyed if s.api_key_id is not None})
            )
        except Exception:
            raise_if_cancelling()
            log.warning("could not check the agent keys of open streams", exc_info=True)
            return
        for subscriber in keyed:
            if subscriber.api_key_id in revoked:
                self._end(subscriber, "credentials_revoked", abort=False)

    async def _release(self, subscriber: Subscriber) -> None:
        try:
            await self.slots.release(subscriber.user_id, subscriber.id)
        except Exception:
            # The lease expires on its own within three heartbeats.
            log.warning("could not release an event stream slot", exc_info=True)
