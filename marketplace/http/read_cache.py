"""The per-frontend cache of project read responses (docs/read-models.md, "Response cache").

What it holds: the serialised JSON bodies of viewer-independent read responses (open projects'
detail and milestones, anonymous list pages), keyed by route, normalised path and viewer class.
A hit answers with the stored bytes: no SQL, no model building, no JSON encoding.

Why it is never stale by more than ``max_lag``: a follower task applies every change event
(``project.*``, ``chain.reorg``) from the Redis Stream in id order, dropping the entries each one
affects, and a probe asks PostgreSQL for the newest event position (``events.last_id``, which first
positions whatever committed before it asked), and pings Redis, every ``max_lag / PROBE_DIVISOR``.
Positions (event ids) are commit order (docs/events.md), so once the follower has applied
everything up to the id a probe saw, every change committed before that probe started has been
applied. The cache serves only while that was true at most ``max_lag`` ago; a lagging or
disconnected follower (Redis down, relay stuck, event loop starved) turns every read into a bypass
to PostgreSQL until it has caught up again. Every change to a cached read carries an event
(verifier results too: ``verifier_job.completed``); the entry lifetime ``max_age`` is only a safety
net against one written without.

A fill races with invalidations: a response computed from rows read before a change but stored
after the change's event was applied would outlive it. Every invalidation bumps ``generation``;
a fill stores only if the generation it saw before its query is still current.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Hashable, Iterable
from dataclasses import dataclass

import asyncpg
import redis.asyncio as aioredis
from aiohttp import web

from marketplace.aio import raise_if_cancelling, wait_finished
from marketplace.config import Settings
from marketplace.events.types import EVENT_MODELS
from marketplace.http import keys
from marketplace.metrics import (
    READ_CACHE_BYTES,
    READ_CACHE_ENTRIES,
    READ_CACHE_FOLLOWER_LAG,
    READ_CACHE_INVALIDATIONS,
)
from marketplace.outbox.consumer import EventHead, EventStream
from marketplace.storage.pool import ServerState
from marketplace.storage.pool import connect as pg_connect
from marketplace.storage.repositories import events as events_repo

log = logging.getLogger(__name__)

# Events that change what a cached read returns, and for which project (the subject).
PROJECT_TYPES = frozenset(
    {
        "project.created",
        "project.changed",
        "project.removed",
        "project.claimed",
        "project.metadata_updated",
        # the milestone's latestVerifierJobId / latestVerifierPasses
        "verifier_job.completed",
    }
)
# Events after which nothing cached can be trusted.
CLEAR_TYPES = frozenset({"chain.reorg"})
CONSUMED_TYPES = PROJECT_TYPES | CLEAR_TYPES

# Probes per max_lag: a missed or slow probe or two does not yet stop the cache from serving.
PROBE_DIVISOR = 5
# XREAD BLOCK of the follower (ms); only bounds how often an idle follower wakes up.
FOLLOW_BLOCK_MS = 1_000
MAX_BACKOFF_SECONDS = 2.0
# Bytes counted per entry beyond its body: key, entry object and LRU links (measured roughly
# with sys.getsizeof of a detail entry).
ENTRY_OVERHEAD_BYTES = 400


@dataclass(frozen=True)
class ReadCacheConfig:
    enabled: bool
    max_age: float  # seconds an entry lives at most
    max_lag: float  # seconds the follower may be unconfirmed before the cache stops serving
    max_entries: int
    max_bytes: int
    stream: str
    database_url: str

    @classmethod
    def from_settings(cls, settings: Settings) -> ReadCacheConfig:
        return cls(
            enabled=settings.read_cache_enabled,
            max_age=settings.read_cache_max_age_ms / 1000,
            max_lag=settings.read_cache_max_lag_ms / 1000,
            max_entries=settings.read_cache_max_entries,
            max_bytes=settings.read_cache_max_bytes,
            stream=settings.events_stream,
            database_url=settings.database_url,
        )


@dataclass(frozen=True)
class Cacheable:
    """What a handler tells the adapter about its response: which projects it shows (an event
    for any of them drops it; ``lists``: any project event drops it) and the wall-clock time
    (Unix seconds) at which a field derived from the clock could change (None: never)."""

    projects: frozenset[str] = frozenset()
    lists: bool = False
    until: float | None = None


@dataclass
class _Entry:
    body: bytes
    projects: frozenset[str]
    lists: bool
    expires_mono: float
    expires_wall: float | None
    size: int


class ReadCache:
    """An LRU of response bodies with event-driven invalidation (see the module docstring)."""

    def __init__(self, pool: asyncpg.Pool, redis: aioredis.Redis, config: ReadCacheConfig) -> None:
        self.pool = pool
        self.redis = redis
        self.config = config
        self.events = EventStream(redis, pool, stream=config.stream, block_ms=FOLLOW_BLOCK_MS)
        self.entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self.by_project: dict[str, set[Hashable]] = {}
        self.list_keys: set[Hashable] = set()
        self.bytes = 0
        self.generation = 0
        # The last event id the follower applied, and when (monotonic) the follower was last
        # known to have applied every event committed before that moment.
        self.position = 0
        self.confirmed_at = float("-inf")
        self.following = False
        # Probes not yet confirmed: (newest committed id the probe saw, when it started).
        self._pending: list[tuple[int, float]] = []
        # Fills under way, by key: requests that miss meanwhile wait for the body instead of
        # running the same query (None: the fill stored nothing; they run it themselves).
        self.filling: dict[Hashable, asyncio.Future[bytes | None]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        started = time.perf_counter()
        self.position = await events_repo.last_id(self.pool)
        self._pending = [(self.position, started)]
        self._confirm()
        self._tasks = [
            asyncio.create_task(self._follow(), name="read-cache-follow"),
            asyncio.create_task(self._probe(), name="read-cache-probe"),
        ]

    async def stop(self) -> None:
        self.following = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            await wait_finished(task)
        self._tasks = []
        self.clear("stopped")

    # --- serving --------------------------------------------------------------------------------

    def serving(self, received: float | None = None) -> bool:
        """May the cache answer a request received at ``received`` (``time.perf_counter()``;
        default now): the follower runs and was confirmed up to date with the outbox at most
        ``max_lag`` before that. Measured from the request's arrival, like the database path,
        whose answer reflects the state at some moment after the arrival: on a starved event
        loop the probe is as late as the requests, and the cache keeps serving what is fresh
        relative to them."""
        if received is None:
            received = time.perf_counter()
        if getattr(self.pool, "server_state", ServerState.OK).refuses:
            # PostgreSQL is shutting down: reads answer 503 like every other read, and nothing
            # can confirm the follower is current any more.
            return False
        return self.following and received - self.confirmed_at <= self.config.max_lag

    def get(self, key: Hashable) -> bytes | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        if time.perf_counter() >= entry.expires_mono or (
            entry.expires_wall is not None and time.time() >= entry.expires_wall
        ):
            self._drop(key)
            return None
        self.entries.move_to_end(key)
        return entry.body

    def put(self, key: Hashable, body: bytes, cacheable: Cacheable, generation: int) -> bool:
        """Store ``body`` unless an invalidation happened since ``generation`` was read (the
        body may predate it) or it does not fit. (A body read while the follower lags is fresh
        when stored; only ``serving`` decides whether it may be served later.)"""
        if generation != self.generation:
            return False
        size = len(body) + ENTRY_OVERHEAD_BYTES
        if size > self.config.max_bytes // 8:
            return False
        if key in self.entries:
            self._drop(key)
        self.entries[key] = _Entry(
            body=body,
            projects=cacheable.projects,
            lists=cacheable.lists,
            expires_mono=time.perf_counter() + self.config.max_age,
            expires_wall=cacheable.until,
            size=size,
        )
        self.bytes += size
        for project in cacheable.projects:
            self.by_project.setdefault(project, set()).add(key)
        if cacheable.lists:
            self.list_keys.add(key)
        while len(self.entries) > self.config.max_entries or self.bytes > self.config.max_bytes:
            oldest = next(iter(self.entries))
            self._drop(oldest)
        self._gauge()
        return True

    def begin_fill(self, key: Hashable) -> asyncio.Future[bytes | None] | None:
        """Announce a fill of ``key`` (None: another one is announced already)."""
        if key in self.filling:
            return None
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self.filling[key] = future
        return future

    def end_fill(
        self, key: Hashable, future: asyncio.Future[bytes | None] | None, body: bytes | None
    ) -> None:
        """Hand the stored ``body`` (None: nothing was stored) to the requests waiting."""
        if future is None:
            return
        if self.filling.get(key) is future:
            del self.filling[key]
        if not future.done():
            future.set_result(body)

    # --- invalidation ---------------------------------------------------------------------------

    def invalidate_project(self, project: str, reason: str) -> None:
        """Drop every entry that shows ``project`` (lower-case address) and every list page (a
        project's change can move it into, out of or within any page, or change a count)."""
        self.generation += 1
        keys = self.by_project.pop(project, set()) | self.list_keys
        for key in keys:
            self._drop(key)
        READ_CACHE_INVALIDATIONS.labels(reason).inc()
        self._gauge()

    def clear(self, reason: str) -> None:
        self.generation += 1
        self.entries.clear()
        self.by_project.clear()
        self.list_keys.clear()
        self.bytes = 0
        READ_CACHE_INVALIDATIONS.labels(reason).inc()
        self._gauge()

    def apply(self, event: EventHead) -> None:
        """Apply one change event (any type; those that change no read are ignored). The type
        and subject say everything the cache needs: it never reads a payload."""
        if event.type in PROJECT_TYPES:
            self.invalidate_project(event.subject.lower(), event.type)
        elif event.type in CLEAR_TYPES or event.type not in EVENT_MODELS:
            # Unknown: a type newer than this code may change a read; be safe.
            self.clear(event.type if event.type in CLEAR_TYPES else "unknown_event")

    def _drop(self, key: Hashable) -> None:
        entry = self.entries.pop(key, None)
        if entry is None:
            return
        self.bytes -= entry.size
        for project in entry.projects:
            keys = self.by_project.get(project)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.by_project[project]
        if entry.lists:
            self.list_keys.discard(key)

    def _gauge(self) -> None:
        READ_CACHE_ENTRIES.set(len(self.entries))
        READ_CACHE_BYTES.set(self.bytes)

    # --- following the outbox -------------------------------------------------------------------

    def _confirm(self) -> None:
        """Move ``confirmed_at`` to the newest probe whose id the follower has reached."""
        reached = [started for newest, started in self._pending if newest <= self.position]
        if not reached:
            return
        self.confirmed_at = max(self.confirmed_at, max(reached))
        self._pending = [(n, s) for n, s in self._pending if n > self.position]
        READ_CACHE_FOLLOWER_LAG.set(0)

    async def _follow(self) -> None:
        """Apply every event after the position, in id order, forever; after a failure, stop
        serving, and resume from the position (nothing is skipped: ``subscribe`` reads what the
        stream lacks from PostgreSQL)."""
        backoff = 0.1
        while True:
            try:
                followed = self.events.subscribe_heads(self.position)
                async with contextlib.aclosing(followed) as events:
                    self.following = True
                    async for event in events:
                        self.apply(event)
                        self.position = event.id
                        self._confirm()
                        backoff = 0.1
            except asyncio.CancelledError:
                raise
            except Exception:
                raise_if_cancelling()
                self.following = False
                log.warning(
                    "read cache lost the event stream at %d; bypassing, retrying in %.1fs",
                    self.position,
                    backoff,
                    exc_info=True,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def _probe(self) -> None:
        """Every ``max_lag / PROBE_DIVISOR``: the newest committed event id, on a connection of
        its own (behind a busy pool's queue the probe would be late exactly when misses pile
        up, switching the cache off under the load it sheds)."""
        interval = self.config.max_lag / PROBE_DIVISOR
        conn: asyncpg.Connection | None = None
        try:
            while True:
                await asyncio.sleep(interval)
                started = time.perf_counter()
                try:
                    if conn is None or conn.is_closed():
                        # Dedicated, so the pool's server watch terminates it when the server
                        # starts refusing connections (a smart shutdown waits for it otherwise).
                        conn = await pg_connect(
                            self.config.database_url, application_name="marketplace-read-cache"
                        )
                    newest = await events_repo.last_id(conn)
                    # The follower reads Redis: a server that does not answer cannot be followed.
                    await self.redis.ping()
                except Exception:
                    raise_if_cancelling()
                    log.warning("read cache probe failed; not serving until one succeeds")
                    if conn is not None:
                        conn.terminate()
                        conn = None
                    continue
                self._record_probe(newest, started)
        finally:
            if conn is not None:
                conn.terminate()

    def _record_probe(self, newest: int, started: float) -> None:
        self._pending.append((newest, started))
        # Only the newest unconfirmed probes matter; an old one never confirms later ones.
        del self._pending[: -PROBE_DIVISOR * 4]
        self._confirm()
        READ_CACHE_FOLLOWER_LAG.set(max(0.0, time.perf_counter() - self.confirmed_at))


def next_change(deadlines: Iterable[int | None], now: float) -> float | None:
    """The first wall-clock time after ``now`` at which ``now > deadline`` flips for one of
    ``deadlines`` (Unix seconds): ``deadline + 1``, as the rules compare whole seconds."""
    future = [d + 1 for d in deadlines if d is not None and d + 1 > now]
    return min(future) if future else None


READ_CACHE: web.AppKey[ReadCache] = web.AppKey("read_cache", ReadCache)


async def read_cache(app: web.Application) -> AsyncIterator[None]:
    """The frontend's read cache (a context, started after Postgres and Redis); absent when
    ``MARKETPLACE_READ_CACHE_ENABLED`` is off, and every read then goes to PostgreSQL."""
    config = ReadCacheConfig.from_settings(app[keys.SETTINGS])
    if not config.enabled:
        yield
        return
    cache = ReadCache(app[keys.PG_POOL], app[keys.REDIS], config)
    await cache.start()
    app[READ_CACHE] = cache
    yield
    await cache.stop()  # not serving from here on: reads during shutdown go to PostgreSQL


def invalidate_local_write(app: web.Application, project: str) -> None:
    """A write through this frontend changed ``project``'s reads: drop them now, so the writer's
    next read here sees its write (its event would do it too, a few milliseconds later)."""
    cache = app.get(READ_CACHE)
    if cache is not None:
        cache.invalidate_project(project.lower(), "local_write")
