"""SQL of the change events (transactional outbox, docs/events.md).

Ordering rule: ``append`` takes ``pg_advisory_xact_lock(EVENTS_LOCK_KEY)`` before its rows get
their ids, and the lock is held until the producing transaction ends. Whoever takes an id next
therefore waits until every smaller id is committed (or rolled back): id order is commit order,
and a reader that saw id N never later finds a committed id below N. That is what lets the relay
and every consumer keep their position as one number. The price is that producing transactions
serialise from their ``append`` to their commit, so ``append`` must be the last statement
before the commit (bench/events_lock.py measures it).

Ids are not contiguous: a transaction rolled back after its ``append`` leaves a hole.
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
EVENTS_LOCK_KEY = 0x6D6B745F65766E74  # "mkt_evnt": id order = commit order
RELAY_LOCK_KEY = 0x6D6B745F72656C79  # "mkt_rely": one active relay among all frontends
# NOTIFY'd by every producing transaction (delivered at commit), LISTENed by the active relay.
WAKE_CHANNEL = "marketplace_events"

# One statement, so the order lock is held for one round trip less before the commit. Every
# row comes out of a join with the materialised CTE, so the CTE (the lock, and the wake-up that
# is sent only if the transaction commits) is evaluated before the first row exists, and ids come
# from the column default, evaluated per joined row: after the lock, whatever the join order.
APPEND = """
WITH ordered AS MATERIALIZED (
    SELECT pg_advisory_xact_lock($1) AS locked, pg_notify($2, '') AS woken
)
INSERT INTO events (type, subject, payload)
SELECT e.type, e.subject, e.payload::jsonb
FROM ordered
CROSS JOIN unnest($3::text[], $4::text[], $5::text[])
    WITH ORDINALITY AS e(type, subject, payload, n)
ORDER BY e.n
RETURNING id
"""
COLUMNS = "id, type, subject, payload::text AS payload, created_at"


def with_events(change: str, change_parameters: int) -> str:
    """One statement: ``change`` (an ``INSERT``/``UPDATE`` ... ``RETURNING`` with a text column
    ``event_key``, parameters ``$1..$change_parameters``) and the events of the rows it returned.

    Run it outside a transaction and it commits by itself, so the order lock is held only while
    the server finishes the statement and commits: no client round trip (and no scheduling delay
    of a busy client) between taking the lock and committing, as there is with ``append`` after
    a change. The events come as four arrays (key, type, subject, payload), see
    :func:`event_arguments`; an event is written when a returned row's ``event_key`` equals its
    key, so a change that returns nothing (``ON CONFLICT DO NOTHING``) writes no event, takes no
    lock and wakes nobody. Ids follow the order of the arrays, after the lock (as in ``append``).
    """
    k = change_parameters
    return f"""
WITH change AS (
{change}
),
ordered AS MATERIALIZED (
    SELECT pg_advisory_xact_lock(${k + 1}) AS locked, pg_notify(${k + 2}, '') AS woken
    WHERE EXISTS (SELECT FROM change)
),
appended AS (
    INSERT INTO events (type, subject, payload)
    SELECT e.type, e.subject, e.payload::jsonb
    FROM ordered
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
        EVENTS_LOCK_KEY,
        WAKE_CHANNEL,
        [key for key, _ in keyed],
        [str(e.type) for _, e in keyed],
        [e.subject for _, e in keyed],
        [e.payload_json() for _, e in keyed],
    ]


SELECT_AFTER = f"""
SELECT {COLUMNS} FROM events
WHERE id > $1 AND ($2::bigint IS NULL OR id < $2) AND ($3::text[] IS NULL OR type = any($3))
ORDER BY id LIMIT $4
"""
# A consumer's next batch of its types, with how far it has looked: the newest committed id
# (every smaller one is committed or abandoned) when the batch did not fill up. Both come from
# one statement, hence one snapshot.
SELECT_CONSUMED = f"""
WITH newest AS (SELECT coalesce(max(id), 0) AS id FROM events),
batch AS (
    SELECT {COLUMNS} FROM events
    WHERE id > $1 AND id <= (SELECT id FROM newest) AND type = any($2::text[])
    ORDER BY id LIMIT $3
)
SELECT b.*, n.id AS newest FROM newest n LEFT JOIN batch b ON true ORDER BY b.id
"""
SELECT_UNRELAYED = f"""
SELECT {COLUMNS} FROM events
WHERE id > (SELECT coalesce(max(last_relayed_id), 0) FROM event_relay_cursor)
ORDER BY id LIMIT $1
"""
SELECT_LAST_ID = "SELECT coalesce(max(id), 0) FROM events"
SELECT_FIRST_ID = "SELECT min(id) FROM events"
SELECT_RELAY_CURSOR = "SELECT coalesce(max(last_relayed_id), 0) FROM event_relay_cursor"
ADVANCE_RELAY_CURSOR = """
INSERT INTO event_relay_cursor AS c (singleton, last_relayed_id) VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE
    SET last_relayed_id = greatest(c.last_relayed_id, EXCLUDED.last_relayed_id),
        updated_at = now()
"""
TRY_RELAY_LOCK = "SELECT pg_try_advisory_lock($1)"
# Relayed rows past the retention age, oldest first, a bounded number per statement.
SWEEP = """
DELETE FROM events WHERE id IN (
    SELECT id FROM events
    WHERE id <= (SELECT coalesce(max(last_relayed_id), 0) FROM event_relay_cursor)
      AND created_at < now() - $1::interval
    ORDER BY id LIMIT $2
)
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
    """Write ``events`` in the caller's transaction, as its LAST statement; returns their ids.

    The transaction is then serialised with every other producer until it commits (see the
    module docstring), so nothing slow may follow this call.
    """
    if not events:
        return []
    if not conn.is_in_transaction():
        raise RuntimeError("events are written inside the transaction of the change they describe")
    rows = await conn.fetch(
        APPEND,
        EVENTS_LOCK_KEY,
        WAKE_CHANNEL,
        [str(e.type) for e in events],
        [e.subject for e in events],
        [e.payload_json() for e in events],
    )
    return [row["id"] for row in rows]


async def read_after(
    conn: Conn,
    after_id: int,
    limit: int,
    *,
    before_id: int | None = None,
    types: Sequence[str] | None = None,
) -> list[StoredEvent]:
    """Committed events with ``after_id < id < before_id`` (of ``types``), in id order."""
    rows = await conn.fetch(
        SELECT_AFTER, after_id, before_id, list(types) if types is not None else None, limit
    )
    return _stored(rows)


async def read_consumed(
    conn: Conn, after_id: int, limit: int, types: Sequence[str]
) -> tuple[list[StoredEvent], int]:
    """The next events of ``types`` after ``after_id`` (at most ``limit``, in id order), and the
    position a consumer of only those types may move its cursor to: the last one's id when the
    batch is full, else the newest committed id. A consumer whose types are rare therefore does
    not scan the same run of other events again on every wake-up (the leaderboards consumer
    under a flood of chat messages did, and the run only grew)."""
    rows = await conn.fetch(SELECT_CONSUMED, after_id, list(types), limit)
    events = [row for row in rows if row["id"] is not None]  # none: one row of NULLs
    if len(events) == limit:
        return _stored(events), int(events[-1]["id"])
    return _stored(events), max(after_id, int(rows[0]["newest"]))


async def unrelayed(conn: Connection, limit: int) -> list[StoredEvent]:
    """The next committed events after the relay cursor, in id order."""
    return _stored(await conn.fetch(SELECT_UNRELAYED, limit))


async def last_id(conn: Conn) -> int:
    """The newest committed event id (0: none). Every smaller id is committed or abandoned."""
    return int(await conn.fetchval(SELECT_LAST_ID))


async def first_id(conn: Conn) -> int | None:
    """The oldest event id still stored (None: none is); older ones were swept (retention)."""
    value = await conn.fetchval(SELECT_FIRST_ID)
    return None if value is None else int(value)


async def relay_cursor(conn: Conn) -> int:
    return int(await conn.fetchval(SELECT_RELAY_CURSOR))


async def advance_relay_cursor(conn: Connection, last_relayed_id: int) -> None:
    """Move the cursor forward (never back: a stale relay cannot undo a newer one's work)."""
    await conn.execute(ADVANCE_RELAY_CURSOR, last_relayed_id)


async def try_relay_lock(conn: Connection) -> bool:
    """Session-level: held until ``conn`` closes. Never call it on a pooled connection."""
    return bool(await conn.fetchval(TRY_RELAY_LOCK, RELAY_LOCK_KEY))


async def sweep(conn: Conn, older_than: timedelta, limit: int) -> int:
    """Delete up to ``limit`` relayed events older than ``older_than``; returns how many."""
    status = await conn.execute(SWEEP, older_than, limit)
    return int(status.split()[-1])
