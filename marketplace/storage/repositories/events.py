"""SQL of the change events (transactional outbox, docs/events.md).

Ordering rule (migration 0022): producers insert their events without any lock, so producing
transactions never wait for each other. ``id`` is then only an insertion key; what consumers see
as an event's id is its **position**, which a positioner (``position_committed``: the active
relay, or a durable consumer about to read; one at a time) gives committed events in one
statement, whole transactions at a time, in (transaction id, id) order. A transaction that
committed before another one began has the smaller transaction id, so positions follow commit
order as far as it is observable; positions only grow, and a reader only ever sees positions of
committed events, every smaller position included: "after position N" is a complete cursor, as
"after id N" was when ids were handed out under a lock. Events of one transaction get
consecutive positions, in the order given. A position is ``max(id, previous position + 1)``, so
it equals the id whenever events commit in id order (and every id handed out before 0022).

Positions are not contiguous either: a transaction rolled back after its ``append`` leaves a
hole in the ids, and an out-of-order commit a jump.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from marketplace.events.types import NewEvent
from marketplace.storage.pool import Conn, Connection

# Arbitrary but fixed keys (same key space as the migration lock, different values).
POSITION_LOCK_KEY = 0x6D6B745F65766E74  # "mkt_evnt": one positioner at a time (xact lock)
# The key producers serialised on before issue 28; what benches of that time look for.
EVENTS_LOCK_KEY = POSITION_LOCK_KEY
RELAY_LOCK_KEY = 0x6D6B745F72656C79  # "mkt_rely": one active relay among all frontends
# Held (session, exclusive) by the active relay only while it sleeps; a producer that cannot take
# it shared wakes the relay with a NOTIFY, one that can holds it to its commit (so the relay can
# tell that commits are on their way and does not go to sleep). Producers never wait for it.
RELAY_IDLE_KEY = 0x6D6B745F69646C65  # "mkt_idle"
# NOTIFY'd by every positioner that positioned events (delivered at commit); LISTENed by the
# durable consumers and the relay.
WAKE_CHANNEL = "marketplace_events"
# NOTIFY'd by a producing transaction that found the relay asleep; LISTENed by the relay only:
# the consumers cannot read an event before it has a position, and each wake-up costs them a
# round (on WAKE_CHANNEL they woke twice per event, beside the relay, on its path).
RELAY_WAKE_CHANNEL = "marketplace_events_relay"
# Transactions one positioning statement takes at most (whole transactions only).
POSITION_BATCH = 1_000

# One statement, no lock to wait for. Rows are inserted in the order given (their ids follow it;
# the column default records the transaction id). The CTE asks whether the relay sleeps: a
# producer that holds RELAY_IDLE_KEY shared until its commit keeps it awake, one that cannot
# take it (the relay sleeps) sends a NOTIFY, delivered at commit. NOTIFY is rare on purpose:
# PostgreSQL serialises the commits of notifying transactions (a database-wide lock held through
# the commit's WAL flush), which would cost what the order lock did.
APPEND = """
WITH awake AS MATERIALIZED (
    SELECT CASE WHEN pg_try_advisory_xact_lock_shared($1) THEN true
                ELSE pg_notify($2, '') IS NULL END AS checked
)
INSERT INTO events (type, subject, payload)
SELECT e.type, e.subject, e.payload::jsonb
FROM awake
CROSS JOIN unnest($3::text[], $4::text[], $5::text[])
    WITH ORDINALITY AS e(type, subject, payload, n)
ORDER BY e.n
RETURNING id
"""
# What consumers see: the position is the event's id.
COLUMNS = "position AS id, type, subject, payload::text AS payload, created_at"


def with_events(change: str, change_parameters: int) -> str:
    """One statement: ``change`` (an ``INSERT``/``UPDATE`` ... ``RETURNING`` with a text column
    ``event_key``, parameters ``$1..$change_parameters``) and the events of the rows it returned.

    Run it outside a transaction and it commits by itself. The events come as four arrays (key,
    type, subject, payload), see :func:`event_arguments`; an event is written when a returned
    row's ``event_key`` equals its key, so a change that returns nothing (``ON CONFLICT DO
    NOTHING``) writes no event and wakes nobody. Rows are inserted in the order of the arrays
    (as in ``append``).
    """
    k = change_parameters
    return f"""
WITH change AS (
{change}
),
awake AS MATERIALIZED (
    SELECT CASE WHEN pg_try_advisory_xact_lock_shared(${k + 1}) THEN true
                ELSE pg_notify(${k + 2}, '') IS NULL END AS checked
    WHERE EXISTS (SELECT FROM change)
),
appended AS (
    INSERT INTO events (type, subject, payload)
    SELECT e.type, e.subject, e.payload::jsonb
    FROM awake
    CROSS JOIN unnest(${k + 3}::text[], ${k + 4}::text[], ${k + 5}::text[], ${k + 6}::text[])
        WITH ORDINALITY AS e(key, type, subject, payload, n)
    WHERE e.key IN (SELECT event_key FROM change)
    ORDER BY e.n
    RETURNING id
)
SELECT * FROM change
"""


def event_arguments(keyed: Sequence[tuple[str, NewEvent]]) -> list[object]:
    """The arguments that follow a :func:`with_events` change's own."""
    return [
        RELAY_IDLE_KEY,
        RELAY_WAKE_CHANNEL,
        [key for key, _ in keyed],
        [str(e.type) for _, e in keyed],
        [e.subject for _, e in keyed],
        [e.payload_json() for _, e in keyed],
    ]


POSITION = "SELECT events_position($1, $2, $3, $4)"
AWAIT_POSITIONER = "SELECT events_await_positioner($1)"
SELECT_AFTER = f"""
SELECT {COLUMNS} FROM events
WHERE position > $1 AND ($2::bigint IS NULL OR position < $2)
  AND ($3::text[] IS NULL OR type = any($3))
ORDER BY position LIMIT $4
"""
# A consumer's next batch of its types, with how far it has looked: the newest position (every
# smaller one belongs to a committed event, or to none) when the batch did not fill up. Both
# come from one statement, hence one snapshot.
SELECT_CONSUMED = f"""
WITH newest AS (SELECT coalesce(max(last_position), 0) AS id FROM event_positions),
batch AS (
    SELECT {COLUMNS} FROM events
    WHERE position > $1 AND position <= (SELECT id FROM newest) AND type = any($2::text[])
    ORDER BY position LIMIT $3
)
SELECT b.*, n.id AS newest FROM newest n LEFT JOIN batch b ON true ORDER BY b.id
"""
SELECT_UNRELAYED = f"""
SELECT {COLUMNS} FROM events
WHERE position > (SELECT coalesce(max(last_relayed_id), 0) FROM event_relay_cursor)
ORDER BY position LIMIT $1
"""
# The relay's next batch and its cursor, from one statement (one snapshot, one round trip).
SELECT_RELAY_BATCH = f"""
WITH relayed AS (SELECT coalesce(max(last_relayed_id), 0) AS id FROM event_relay_cursor),
batch AS (
    SELECT {COLUMNS} FROM events
    WHERE position > (SELECT id FROM relayed)
    ORDER BY position LIMIT $1
)
SELECT b.*, r.id AS relayed FROM relayed r LEFT JOIN batch b ON true ORDER BY b.id
"""
# The relay's positioning, giving back the idle key it held while it slept ($5) in the same
# round trip (the unlock comes first in the select list).
POSITION_RELAY = """
SELECT CASE WHEN $5 THEN pg_advisory_unlock($6) END AS released,
       events_position($1, $2, $3, $4) AS positioned
"""
# Something for the relay to do: committed events without a position, or positioned ones it has
# not relayed.
SELECT_RELAY_PENDING = """
SELECT EXISTS (SELECT FROM events WHERE position IS NULL)
    OR EXISTS (
        SELECT FROM events
        WHERE position > (SELECT coalesce(max(last_relayed_id), 0) FROM event_relay_cursor)
    )
"""
SELECT_LAST_ID = "SELECT coalesce(max(last_position), 0) FROM event_positions"
SELECT_FIRST_ID = "SELECT min(position) FROM events"
SELECT_RELAY_CURSOR = "SELECT coalesce(max(last_relayed_id), 0) FROM event_relay_cursor"
ADVANCE_RELAY_CURSOR = """
INSERT INTO event_relay_cursor AS c (singleton, last_relayed_id) VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE
    SET last_relayed_id = greatest(c.last_relayed_id, EXCLUDED.last_relayed_id),
        updated_at = now()
"""
TRY_RELAY_LOCK = "SELECT pg_try_advisory_lock($1)"
TRY_IDLE_LOCK = "SELECT pg_try_advisory_lock($1)"
RELEASE_IDLE_LOCK = "SELECT pg_advisory_unlock($1)"
# Relayed events past the retention age that every durable consumer has read (the view
# event_consumer_cursors), and, past the hard bound ($2, NULL: none), relayed events whether read
# or not; oldest first, a bounded number per statement. An unread event deleted under the hard
# bound is recorded, per consumer, in event_consumer_skips (returned, for the log and metrics).
SWEEP = """
WITH doomed AS (
    SELECT position FROM events
    WHERE position <= (SELECT coalesce(max(last_relayed_id), 0) FROM event_relay_cursor)
      AND (
        (created_at < now() - $1::interval
         AND position <= (SELECT coalesce(min(position), 9223372036854775807)
                          FROM event_consumer_cursors))
        OR ($2::interval IS NOT NULL AND created_at < now() - $2::interval)
      )
    ORDER BY position LIMIT $3
),
deleted AS (
    DELETE FROM events e USING doomed d WHERE e.position = d.position RETURNING e.position
),
skipped AS (
    INSERT INTO event_consumer_skips (consumer, after_position, through_position, events)
    SELECT c.consumer, c.position, max(d.position), count(*)
    FROM event_consumer_cursors c JOIN deleted d ON d.position > c.position
    GROUP BY c.consumer, c.position
    RETURNING consumer, after_position, through_position, events
)
SELECT (SELECT count(*) FROM deleted) AS deleted,
       (SELECT coalesce(jsonb_agg(to_jsonb(s) ORDER BY s.consumer), '[]'::jsonb)::text
        FROM skipped s) AS skipped
"""
# Per durable consumer: its cursor, how many stored events are past it, and the age (seconds)
# of the oldest of those (0: caught up); plus the unread events retention deleted from under it.
SELECT_CONSUMER_LAG = """
SELECT c.consumer, c.position,
       (SELECT count(*) FROM (SELECT FROM events e WHERE e.position > c.position
                              LIMIT 10000000) past) AS lag_events,
       coalesce(extract(epoch FROM now() - (
           SELECT e.created_at FROM events e WHERE e.position > c.position
           ORDER BY e.position LIMIT 1)), 0)::float8 AS lag_seconds,
       (SELECT coalesce(sum(s.events), 0) FROM event_consumer_skips s
        WHERE s.consumer = c.consumer) AS skipped_events
FROM event_consumer_cursors c
ORDER BY c.consumer
"""
SELECT_SKIPS = """
SELECT consumer, after_position, through_position, events, recorded_at
FROM event_consumer_skips WHERE consumer = $1 AND id > $2 ORDER BY id
"""


@dataclass(frozen=True)
class StoredEvent:
    id: int
    type: str
    subject: str
    payload_json: str  # the payload as JSON text, as stored
    created_at: datetime

    @property
    def payload(self) -> dict[str, Any]:
        """The stored JSON, decoded; consumers read it through the payload models instead
        (``marketplace.outbox.consumer.event_from_row``)."""
        value = json.loads(self.payload_json)
        assert isinstance(value, dict)
        return value


def _stored(rows: Sequence[asyncpg.Record]) -> list[StoredEvent]:
    return [
        StoredEvent(r["id"], r["type"], r["subject"], r["payload"], r["created_at"]) for r in rows
    ]


async def append(conn: Connection, events: Sequence[NewEvent]) -> list[int]:
    """Write ``events`` in the caller's transaction; returns their ids (insertion keys, in the
    order given; not positions, which exist only once the transaction committed and a
    positioner ran). Takes no lock anyone waits for, so it may come anywhere in the transaction
    (docs/events.md, "Ordering and delivery")."""
    if not events:
        return []
    if not conn.is_in_transaction():
        raise RuntimeError("events are written inside the transaction of the change they describe")
    return await append_rows(
        conn,
        [str(e.type) for e in events],
        [e.subject for e in events],
        [e.payload_json() for e in events],
    )


async def append_rows(
    conn: Connection, types: Sequence[str], subjects: Sequence[str], payloads: Sequence[str]
) -> list[int]:
    """``append`` of rows given as text (payloads as JSON): for tests of how consumers take what
    no payload model lets a producer write. Production code calls ``append``."""
    rows = await conn.fetch(
        APPEND, RELAY_IDLE_KEY, RELAY_WAKE_CHANNEL, list(types), list(subjects), list(payloads)
    )
    return [row["id"] for row in rows]


async def position_committed(
    conn: Conn, max_transactions: int = POSITION_BATCH, *, wait: bool = False
) -> int:
    """Give committed events their positions (at most ``max_transactions`` transactions' worth);
    how many were positioned, 0 when none waited, -1 when another positioner was at work (it
    NOTIFYs ``WAKE_CHANNEL`` when it commits; ``wait``: wait for it to commit instead, then
    position what is left). Call it outside a transaction, or in a short one: the positioning
    lock is held until the calling transaction ends."""
    return int(
        await conn.fetchval(POSITION, max_transactions, POSITION_LOCK_KEY, WAKE_CHANNEL, wait)
    )


async def _position_before_reading(conn: Conn) -> None:
    """Position what committed before this call, or let the positioner at work finish first (a
    reader then sees what was committed before it asked, as with ids under the old lock)."""
    for _ in range(3):
        if await position_committed(conn) != -1:
            return
        await conn.fetchval(AWAIT_POSITIONER, POSITION_LOCK_KEY)


async def read_after(
    conn: Conn,
    after_id: int,
    limit: int,
    *,
    before_id: int | None = None,
    types: Sequence[str] | None = None,
) -> list[StoredEvent]:
    """Committed events with ``after_id < position < before_id`` (of ``types``), in order.
    Committed events nobody positioned yet are positioned first (as in ``read_consumed``), so a
    reader does not depend on a running relay."""
    await _position_before_reading(conn)
    rows = await conn.fetch(
        SELECT_AFTER, after_id, before_id, list(types) if types is not None else None, limit
    )
    return _stored(rows)


async def read_consumed(
    conn: Conn, after_id: int, limit: int, types: Sequence[str], *, position_first: bool = True
) -> tuple[list[StoredEvent], int]:
    """The next events of ``types`` after position ``after_id`` (at most ``limit``, in order),
    and the position a consumer of only those types may move its cursor to: the last one's when
    the batch is full, else the newest position. A consumer whose types are rare therefore does
    not scan the same run of other events again on every wake-up (the leaderboards consumer
    under a flood of chat messages did, and the run only grew).

    Committed events nobody has positioned yet are positioned first (when no other positioner
    is at work), so a consumer does not depend on a running relay; in the caller's transaction
    this would hold the positioning lock to its end (and the relay, waiting for it, would hold
    the live stream back for the whole batch: ~20 ms per chat message in bench/messaging.py),
    which is why consumers call :func:`position_committed` before their transaction and pass
    ``position_first=False`` inside it: what commits meanwhile waits for the next batch."""
    if position_first:
        await _position_before_reading(conn)
    rows = await conn.fetch(SELECT_CONSUMED, after_id, list(types), limit)
    events = [row for row in rows if row["id"] is not None]  # none: one row of NULLs
    if len(events) == limit:
        return _stored(events), int(events[-1]["id"])
    return _stored(events), max(after_id, int(rows[0]["newest"]))


async def unrelayed(conn: Connection, limit: int) -> list[StoredEvent]:
    """The next positioned events after the relay cursor, in order."""
    return _stored(await conn.fetch(SELECT_UNRELAYED, limit))


async def relay_batch(conn: Connection, limit: int) -> tuple[int, list[StoredEvent]]:
    """The relay cursor and the next positioned events after it, in order (one statement)."""
    rows = await conn.fetch(SELECT_RELAY_BATCH, limit)
    return int(rows[0]["relayed"]), _stored([row for row in rows if row["id"] is not None])


async def position_for_relay(conn: Connection, *, release_idle_lock: bool) -> int:
    """``position_committed(conn, wait=True)`` for the active relay, which first gives back
    ``RELAY_IDLE_KEY`` (``release_idle_lock``: it holds it, from :func:`try_idle_lock`) in the
    same round trip."""
    row = await conn.fetchrow(
        POSITION_RELAY,
        POSITION_BATCH,
        POSITION_LOCK_KEY,
        WAKE_CHANNEL,
        True,
        release_idle_lock,
        RELAY_IDLE_KEY,
    )
    assert row is not None
    return int(row["positioned"])


async def relay_pending(conn: Connection) -> bool:
    """Whether there are committed events to position or positioned ones to relay."""
    return bool(await conn.fetchval(SELECT_RELAY_PENDING))


async def last_id(conn: Conn) -> int:
    """The newest position (0: none), once every event committed before the call has one (it
    positions them, up to a batch, or waits for the positioner at work): "now" for a stream that
    starts now,
    the read cache's freshness probe, a replay's bound. Every smaller position belongs to a
    committed event or to none. Not in a transaction (the positioning lock would be held to its
    end)."""
    await position_committed(conn, wait=True)
    return int(await conn.fetchval(SELECT_LAST_ID))


async def first_id(conn: Conn) -> int | None:
    """The oldest position still stored (None: none is); older ones were swept (retention)."""
    value = await conn.fetchval(SELECT_FIRST_ID)
    return None if value is None else int(value)


async def relay_cursor(conn: Conn) -> int:
    return int(await conn.fetchval(SELECT_RELAY_CURSOR))


async def advance_relay_cursor(conn: Connection, last_relayed_id: int) -> None:
    """Move the cursor forward (never back: a stale relay cannot undo a newer one's work)."""
    await conn.execute(ADVANCE_RELAY_CURSOR, last_relayed_id)


# Whether some relay is active: it holds RELAY_LOCK_KEY (a bigint advisory key is stored as
# classid = high 32 bits, objid = low 32 bits, objsubid = 1).
SELECT_RELAY_ACTIVE = """
SELECT EXISTS (
    SELECT FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 1
      AND classid = ($1::bigint >> 32)::oid AND objid = ($1::bigint & 4294967295)::oid
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
)
"""


async def relay_active(conn: Conn) -> bool:
    return bool(await conn.fetchval(SELECT_RELAY_ACTIVE, RELAY_LOCK_KEY))


async def position_unless_relayed(conn: Conn) -> None:
    """What a durable consumer does before its batch: position committed events itself only
    when no relay is active (a deployment with the relay off, tests). With one active, more
    positioners only contend with it for the positioning lock and wake each other with their
    NOTIFYs: with both consumers positioning, the live stream's delay grew from ~10 to ~25 ms
    per chat message (bench/messaging.py); the relay positions within milliseconds anyway."""
    if not await relay_active(conn):
        await position_committed(conn)


async def try_relay_lock(conn: Connection) -> bool:
    """Session-level: held until ``conn`` closes. Never call it on a pooled connection."""
    return bool(await conn.fetchval(TRY_RELAY_LOCK, RELAY_LOCK_KEY))


async def try_idle_lock(conn: Connection) -> bool:
    """The relay is about to sleep: False while a producing transaction is in flight (it holds
    the key shared until it commits). Session-level; release with :func:`release_idle_lock`."""
    return bool(await conn.fetchval(TRY_IDLE_LOCK, RELAY_IDLE_KEY))


async def release_idle_lock(conn: Connection) -> None:
    await conn.fetchval(RELEASE_IDLE_LOCK, RELAY_IDLE_KEY)


@dataclass(frozen=True)
class ConsumerSkip:
    """Unread events of a durable consumer that retention deleted (the hard bound)."""

    consumer: str
    after_position: int  # the consumer's cursor then
    through_position: int
    events: int


@dataclass(frozen=True)
class SweepResult:
    deleted: int
    skips: list[ConsumerSkip]


async def sweep(
    conn: Conn, older_than: timedelta, limit: int, *, unread_older_than: timedelta | None = None
) -> SweepResult:
    """Delete up to ``limit`` relayed events older than ``older_than`` that every durable
    consumer has read, and (``unread_older_than``) older ones whether read or not, recording
    those a consumer had not read."""
    row = await conn.fetchrow(SWEEP, older_than, unread_older_than, limit)
    assert row is not None
    skips = [
        ConsumerSkip(
            str(s["consumer"]),
            int(s["after_position"]),
            int(s["through_position"]),
            int(s["events"]),
        )
        for s in json.loads(row["skipped"])
    ]
    return SweepResult(int(row["deleted"]), skips)


@dataclass(frozen=True)
class ConsumerLag:
    consumer: str
    position: int
    lag_events: int
    lag_seconds: float
    skipped_events: int


async def consumer_lag(conn: Conn) -> list[ConsumerLag]:
    """Every durable consumer's cursor, lag (events stored past it, at most 10 million counted;
    the oldest one's age) and the unread events retention deleted from under it."""
    rows = await conn.fetch(SELECT_CONSUMER_LAG)
    return [
        ConsumerLag(
            str(r["consumer"]),
            int(r["position"]),
            int(r["lag_events"]),
            float(r["lag_seconds"]),
            int(r["skipped_events"]),
        )
        for r in rows
    ]


async def consumer_skips(conn: Conn, consumer: str, after_skip_id: int = 0) -> list[ConsumerSkip]:
    rows = await conn.fetch(SELECT_SKIPS, consumer, after_skip_id)
    return [
        ConsumerSkip(
            str(r["consumer"]),
            int(r["after_position"]),
            int(r["through_position"]),
            int(r["events"]),
        )
        for r in rows
    ]
