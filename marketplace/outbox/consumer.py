"""The consumer API: ``subscribe`` to committed events, ``read_since`` a position
(docs/events.md).

An event's ``id`` is its position (``storage/repositories/events.py``): positions follow commit
order, every position a reader sees belongs to a committed event with every smaller one, and
they are not contiguous (holes and jumps), so "after position N" is a complete cursor. A
consumer remembers the position of the last event it applied and passes it back after a
restart.

``subscribe`` reads the Redis Stream the relay fills (``XREAD BLOCK``). Whatever the stream does
not hold is read from Postgres, the source of truth:

- at the start, when the stream is empty or begins after ``after_id + 1`` (it was trimmed past
  the consumer, or lost with its Redis server);
- while reading, whenever the next entry's position skips positions and its ``previous`` field
  (the position the relay sent before it) is not the last one read: the skipped ones are looked
  up in Postgres (after trimming or a Redis restart, the events the stream lost). Holes the
  relay vouches for (``previous`` equal to the last position) cost nothing: positions jump
  often, wherever ids were taken out of commit order.

Events come out in position order, each once: entries at or below the last yielded position are
dropped, so an entry relayed twice or read both from Postgres and from the stream is yielded
once. Events the Postgres retention deleted are gone for good (retention waits for the durable
consumers, not for ``subscribe``'s callers).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import asyncpg
import redis.asyncio as aioredis
from pydantic import ValidationError

from marketplace.events.types import Event, UnknownEvent, parse_event
from marketplace.storage.repositories import events as repo

log = logging.getLogger(__name__)

DEFAULT_STREAM = "marketplace:events"
PAGE = 500
T = TypeVar("T")
# (entry id, fields) as redis-py returns them: bytes or str, depending on the client.
StreamEntries = list[tuple[bytes | str, dict[Any, Any]]]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _entry_id(entry_id: bytes | str) -> int:
    return int(_text(entry_id).split("-", 1)[0])


def _parsed(event_id: int, type: str, subject: str, created_at: object, payload: object) -> Event:
    try:
        return parse_event(event_id, type, subject, created_at, payload)
    except ValidationError:
        # A payload its type's model refuses is a producer bug; raising here would stop every
        # consumer at this event for good (each restart reads it again), so it is handed on as
        # an UnknownEvent, with its raw payload, and logged.
        log.warning("event %d (%s) does not match its payload model", event_id, type)
        return UnknownEvent.model_validate(
            {
                "id": event_id,
                "type": type,
                "subject": subject,
                "createdAt": created_at,
                "payload": payload,
            }
        )


def event_from_entry(event_id: int, fields: Mapping[str, str]) -> Event:
    return _parsed(
        event_id,
        fields["type"],
        fields["subject"],
        fields["createdAt"],  # ISO text, parsed by pydantic
        json.loads(fields["payload"]),
    )


def event_from_row(row: repo.StoredEvent) -> Event:
    return _parsed(row.id, row.type, row.subject, row.created_at, row.payload)


@dataclass(frozen=True, slots=True)
class EventHead:
    """An event's id, type and subject, without its payload (``subscribe_heads``)."""

    id: int
    type: str
    subject: str


def _follows(fields: Mapping[str, str], last: int) -> bool:
    """Whether the relay wrote this entry right after position ``last`` (its ``previous``): the
    positions between are holes, not events the stream lost, so Postgres need not be asked."""
    return fields.get("previous") == str(last)


def head_from_entry(event_id: int, fields: Mapping[str, str]) -> EventHead:
    return EventHead(event_id, fields["type"], fields["subject"])


def head_from_row(row: repo.StoredEvent) -> EventHead:
    return EventHead(row.id, row.type, row.subject)


class EventStream:
    """Subscribe to, and read back, the change events of one deployment."""

    def __init__(
        self,
        redis: aioredis.Redis,
        pool: asyncpg.Pool,
        *,
        stream: str = DEFAULT_STREAM,
        # Well below the Redis client's socket timeout (redis-py's default is 5 s): a server-side
        # block as long as that makes the client give up on the reply and reconnect.
        block_ms: int = 1_000,
        page: int = PAGE,
    ) -> None:
        self.redis = redis
        self.pool = pool
        self.stream = stream
        self.block_ms = block_ms
        self.page = page

    async def read_since(
        self,
        after_id: int,
        *,
        types: Collection[str] | None = None,
        limit: int = PAGE,
        before_id: int | None = None,
    ) -> list[Event]:
        """Up to ``limit`` committed events with ``id > after_id`` (and ``< before_id``), of
        ``types`` if given, from Postgres, in id order. Call again from the last id for more."""
        rows = await repo.read_after(
            self.pool,
            after_id,
            limit,
            before_id=before_id,
            types=sorted(types) if types is not None else None,
        )
        return [event_from_row(row) for row in rows]

    async def subscribe(
        self, types: Collection[str] | None = None, after_id: int = 0
    ) -> AsyncGenerator[Event, None]:
        """Every committed event with ``id > after_id`` (of ``types`` if given), in id order,
        then new ones as they are relayed; runs until the caller stops iterating."""
        wanted = frozenset(types) if types is not None else None
        async for event in self._follow(wanted, after_id, event_from_entry, event_from_row):
            yield event

    async def subscribe_heads(self, after_id: int = 0) -> AsyncGenerator[EventHead, None]:
        """:meth:`subscribe` to every type, without the payloads: for a consumer that acts on
        an event's type and subject alone and must see every id (to know how far it is), so
        that it does not decode and validate each payload only to drop it."""
        async for head in self._follow(None, after_id, head_from_entry, head_from_row):
            yield head

    async def _follow(
        self,
        wanted: frozenset[str] | None,
        after_id: int,
        from_entry: Callable[[int, Mapping[str, str]], T],
        from_row: Callable[[repo.StoredEvent], T],
    ) -> AsyncGenerator[T, None]:
        last = after_id
        first = await self._first_stream_id()
        if first is None or first > last + 1:
            # The stream lacks what follows ``last``: read it from Postgres up to the stream's
            # first entry, or (empty stream) up to the newest event now; commit order makes
            # that bound final (no smaller position can appear later).
            bound = first if first is not None else await repo.last_id(self.pool) + 1
            async for row in self._rows_from_postgres(last, bound, wanted):
                yield from_row(row)
            last = max(last, bound - 1)
        while True:
            reply = cast(
                list[tuple[Any, StreamEntries]] | None,
                await self.redis.xread(
                    {self.stream: f"{last}-0"}, count=self.page, block=self.block_ms
                ),
            )
            for _, entries in reply or ():
                for entry_id, raw in entries:
                    event_id = _entry_id(entry_id)
                    if event_id <= last:
                        continue
                    fields = {_text(k): _text(v) for k, v in raw.items()}
                    if event_id > last + 1 and not _follows(fields, last):
                        async for row in self._rows_from_postgres(last, event_id, wanted):
                            yield from_row(row)
                    last = event_id
                    if wanted is None or fields["type"] in wanted:
                        yield from_entry(event_id, fields)

    async def replay(
        self, after_id: int, through_id: int, types: Collection[str] | None = None
    ) -> AsyncGenerator[Event, None]:
        """Every committed event with ``after_id < id <= through_id`` (of ``types`` if given), in
        id order, each once, then stop: from the stream, and from Postgres for whatever the
        stream lacks there (trimmed, lost, or not relayed yet). For a bounded catch-up, where
        ``subscribe`` would go on waiting for new events."""
        wanted = frozenset(types) if types is not None else None
        last = after_id
        while last < through_id:
            entries = cast(
                StreamEntries,
                await self.redis.xrange(
                    self.stream, f"{last + 1}-0", f"{through_id}-0", count=self.page
                ),
            )
            for entry_id, raw in entries:
                event_id = _entry_id(entry_id)
                if event_id <= last:
                    continue
                fields = {_text(k): _text(v) for k, v in raw.items()}
                if event_id > last + 1 and not _follows(fields, last):
                    async for event in self._from_postgres(last, event_id, wanted):
                        yield event
                last = event_id
                if wanted is None or fields["type"] in wanted:
                    yield event_from_entry(event_id, fields)
            if len(entries) < self.page:
                break
        if last < through_id:
            async for event in self._from_postgres(last, through_id + 1, wanted):
                yield event

    async def _first_stream_id(self) -> int | None:
        head = cast(StreamEntries, await self.redis.xrange(self.stream, "-", "+", count=1))
        return _entry_id(head[0][0]) if head else None

    async def _from_postgres(
        self, after_id: int, before_id: int | None, wanted: frozenset[str] | None
    ) -> AsyncIterator[Event]:
        """Every committed event strictly between the two ids (of ``wanted``), page by page."""
        async for row in self._rows_from_postgres(after_id, before_id, wanted):
            yield event_from_row(row)

    async def _rows_from_postgres(
        self, after_id: int, before_id: int | None, wanted: frozenset[str] | None
    ) -> AsyncIterator[repo.StoredEvent]:
        cursor = after_id
        while True:
            rows = await repo.read_after(
                self.pool,
                cursor,
                self.page,
                before_id=before_id,
                types=sorted(wanted) if wanted is not None else None,
            )
            for row in rows:
                yield row
            if len(rows) < self.page:
                return
            cursor = rows[-1].id
