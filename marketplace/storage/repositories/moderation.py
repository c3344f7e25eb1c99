"""SQL of offenses and suspensions (docs/messaging.md, "Offenses and suspensions").

Writes run in the user shard's transaction (``marketplace.moderation.counter``) after
:func:`lock_user`; the reads here also serve the offense list and the send check straight from
PostgreSQL (never through the actor).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal, NamedTuple

from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection, fetch_one

# Where the refused message was sent (CHECK-constrained).
OffenseContext = Literal["project_chat", "direct"]


class OffenseRow(NamedTuple):
    """An offense with the suspension it started (``suspension_id`` None if none)."""

    id: uuid.UUID
    user_id: uuid.UUID
    term: str
    context: OffenseContext
    created_at: datetime
    suspension_id: uuid.UUID | None
    suspension_ends_at: datetime | None


class SuspensionStateRow(NamedTuple):
    active_until: datetime | None  # None: not suspended at the time asked
    counting_since: datetime | None  # None: never suspended


class LiftedRow(NamedTuple):
    id: uuid.UUID
    offense_id: uuid.UUID
    starts_at: datetime
    ends_at: datetime
    lifted_at: datetime


class OffenseSummaryRow(NamedTuple):
    now: datetime
    total: int
    active_until: datetime | None
    counting_since: datetime | None


class OffenseListRow(NamedTuple):
    id: uuid.UUID
    seq: int
    term: str
    context: OffenseContext
    created_at: datetime


# First key of the two-key advisory locks (a space of its own: one-key locks such as the events
# order lock never meet these). "mkmo" in ASCII.
USER_LOCK_CLASS = 0x6D6B6D6F

# The transaction's own clock reading after the lock, so an offense's time is never earlier than
# that of an offense committed before it took the lock. The MATERIALIZED CTE is evaluated first.
LOCK_USER = """
WITH locked AS MATERIALIZED (SELECT pg_advisory_xact_lock($1, hashtext($2::text)))
SELECT clock_timestamp() FROM locked
"""
SELECT_OFFENSE = """
SELECT o.id, o.user_id, o.term, o.context, o.created_at,
       s.id AS suspension_id, s.ends_at AS suspension_ends_at
FROM moderation_offenses o
LEFT JOIN moderation_suspensions s ON s.offense_id = o.id
WHERE o.id = $1
"""
# The end of the user's active suspension (if any) at $2, and since when offenses count: the
# latest suspension start or lift (offenses behind a suspension never count again).
SUSPENSION_STATE = """
SELECT max(ends_at) FILTER (WHERE lifted_at IS NULL AND ends_at > $2) AS active_until,
       max(coalesce(lifted_at, starts_at)) AS counting_since
FROM moderation_suspensions
WHERE user_id = $1
"""
SELECT_OFFENSE_TIMES = """
SELECT created_at FROM moderation_offenses WHERE user_id = $1 AND created_at > $2
"""
INSERT_OFFENSE = """
INSERT INTO moderation_offenses (id, user_id, term, context, created_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO NOTHING
RETURNING id
"""
INSERT_SUSPENSION = """
INSERT INTO moderation_suspensions (user_id, offense_id, starts_at, ends_at)
VALUES ($1, $2, $3, $4)
RETURNING id
"""
LIFT_ACTIVE = """
UPDATE moderation_suspensions
SET lifted_at = $3, lifted_by_user_id = $2
WHERE user_id = $1 AND lifted_at IS NULL AND ends_at > $3
RETURNING id, offense_id, starts_at, ends_at, lifted_at
"""
# The send check: served by moderation_suspensions_unlifted.
ACTIVE_UNTIL = """
SELECT max(ends_at) FROM moderation_suspensions
WHERE user_id = $1 AND lifted_at IS NULL AND ends_at > now()
"""
# The figures of the offense list, at one moment (the statement's now()).
OFFENSE_SUMMARY = """
SELECT now() AS now,
       (SELECT count(*) FROM moderation_offenses WHERE user_id = $1) AS total,
       (SELECT max(ends_at) FROM moderation_suspensions
        WHERE user_id = $1 AND lifted_at IS NULL AND ends_at > now()) AS active_until,
       (SELECT max(coalesce(lifted_at, starts_at)) FROM moderation_suspensions
        WHERE user_id = $1) AS counting_since
"""
SELECT_OFFENSE_PAGE = """
SELECT id, seq, term, context, created_at FROM moderation_offenses
WHERE user_id = $1 AND ($2::bigint IS NULL OR seq < $2)
ORDER BY seq DESC
LIMIT $3
"""


async def lock_user(conn: Connection, user_id: uuid.UUID) -> datetime:
    """Serialise this transaction with every other moderation write of ``user_id`` (held to the
    end of the transaction); returns the clock after the lock was granted.

    The user's shard already runs one command at a time per user: the lock also covers the
    moments when two processes could write for one user (a shard killed while its transaction
    has not yet ended, and its restarted successor), so a count is never taken beside an
    uncommitted offense.
    """
    if not conn.is_in_transaction():
        raise RuntimeError("lock_user is held until the end of a transaction; start one first")
    at: datetime = await conn.fetchval(LOCK_USER, USER_LOCK_CLASS, str(user_id))
    return at


async def get_offense(conn: Conn, offense_id: uuid.UUID) -> OffenseRow | None:
    """The offense with the suspension it started (``suspension_id`` None if none)."""
    return rows.maybe(OffenseRow, await conn.fetchrow(SELECT_OFFENSE, offense_id))


async def suspension_state(conn: Conn, user_id: uuid.UUID, at: datetime) -> SuspensionStateRow:
    """``active_until`` (None: not suspended at ``at``) and ``counting_since`` (None: never
    suspended)."""
    return rows.one(SuspensionStateRow, await fetch_one(conn, SUSPENSION_STATE, user_id, at))


async def offense_times(conn: Conn, user_id: uuid.UUID, after: datetime) -> list[datetime]:
    return [created_at for (created_at,) in await conn.fetch(SELECT_OFFENSE_TIMES, user_id, after)]


async def insert_offense(
    conn: Connection,
    *,
    offense_id: uuid.UUID,
    user_id: uuid.UUID,
    term: str,
    context: str,
    created_at: datetime,
) -> bool:
    """False when an offense with this id is already stored (nothing written)."""
    inserted = await conn.fetchval(INSERT_OFFENSE, offense_id, user_id, term, context, created_at)
    return inserted is not None


async def insert_suspension(
    conn: Connection,
    *,
    user_id: uuid.UUID,
    offense_id: uuid.UUID,
    starts_at: datetime,
    ends_at: datetime,
) -> uuid.UUID:
    suspension_id: uuid.UUID = await conn.fetchval(
        INSERT_SUSPENSION, user_id, offense_id, starts_at, ends_at
    )
    return suspension_id


async def lift_active(
    conn: Connection, user_id: uuid.UUID, lifted_by: uuid.UUID, at: datetime
) -> list[LiftedRow]:
    """Lift every suspension of ``user_id`` active at ``at``; the lifted rows (none: nothing
    was active)."""
    return rows.many(LiftedRow, await conn.fetch(LIFT_ACTIVE, user_id, lifted_by, at))


async def active_until(conn: Conn, user_id: uuid.UUID) -> datetime | None:
    """When the user's active suspension ends, or None when sending is allowed now."""
    until: datetime | None = await conn.fetchval(ACTIVE_UNTIL, user_id)
    return until


async def offense_summary(conn: Conn, user_id: uuid.UUID) -> OffenseSummaryRow:
    """``now``, ``total``, ``active_until`` and ``counting_since`` of one user."""
    return rows.one(OffenseSummaryRow, await fetch_one(conn, OFFENSE_SUMMARY, user_id))


async def offense_page(
    conn: Conn, user_id: uuid.UUID, *, before_seq: int | None, limit: int
) -> list[OffenseListRow]:
    """Up to ``limit`` offenses of ``user_id`` older than ``before_seq``, newest first."""
    records = await conn.fetch(SELECT_OFFENSE_PAGE, user_id, before_seq, limit)
    return rows.many(OffenseListRow, records)


# --- the suspensions list (GET /v1/moderation/suspensions) ---------------------------------------


class SuspendedUserRow(NamedTuple):
    """One account of the suspensions list: its latest (or active) suspension and its offenses
    in the window. ``position`` is ``suspended_at`` in microseconds since the epoch, the list's
    sort key with ``user_id``."""

    user_id: uuid.UUID
    suspended_until: datetime | None  # None: not suspended now (listing every account only)
    suspended_at: datetime
    position: int
    offenses: int


# Per account: the end of its active suspension (None: none now) and the start of that one, else
# of its latest. Active only: the unlifted suspensions still running (the partial index
# moderation_suspensions_unlifted), so the scan is as small as the set of suspended accounts.
_SUSPENDED_ACTIVE = """
    SELECT user_id, max(ends_at) AS suspended_until, max(starts_at) AS suspended_at
    FROM moderation_suspensions
    WHERE lifted_at IS NULL AND ends_at > now()
    GROUP BY user_id"""
_SUSPENDED_EVER = """
    SELECT user_id,
           max(ends_at) FILTER (WHERE lifted_at IS NULL AND ends_at > now()) AS suspended_until,
           coalesce(max(starts_at) FILTER (WHERE lifted_at IS NULL AND ends_at > now()),
                    max(starts_at)) AS suspended_at
    FROM moderation_suspensions
    GROUP BY user_id"""
# Newest suspension first; keyset on (microseconds of suspended_at, user_id). $1 window seconds,
# $2/$3 the cursor position (NULL: first page), $4 the page size.
_SUSPENDED_PAGE = """
WITH per_user AS ({per_user}
), listed AS (
    SELECT user_id, suspended_until, suspended_at,
           (extract(epoch FROM suspended_at) * 1000000)::bigint AS position
    FROM per_user
)
SELECT l.user_id, l.suspended_until, l.suspended_at, l.position,
       (SELECT count(*) FROM moderation_offenses o
        WHERE o.user_id = l.user_id
          AND o.created_at > now() - make_interval(secs => $1::bigint)) AS offenses
FROM listed l
WHERE $2::bigint IS NULL OR (l.position, l.user_id) < ($2::bigint, $3::uuid)
ORDER BY l.position DESC, l.user_id DESC
LIMIT $4
"""
SELECT_SUSPENDED_ACTIVE_PAGE = _SUSPENDED_PAGE.format(per_user=_SUSPENDED_ACTIVE)
SELECT_SUSPENDED_EVER_PAGE = _SUSPENDED_PAGE.format(per_user=_SUSPENDED_EVER)


async def suspended_page(
    conn: Conn,
    *,
    active_only: bool,
    window_seconds: int,
    after: tuple[int, uuid.UUID] | None,
    limit: int,
) -> list[SuspendedUserRow]:
    """Up to ``limit`` accounts after the position ``after`` (None: from the start), newest
    suspension first: those suspended now (``active_only``), else every account ever suspended.
    ``offenses`` counts each account's offenses of the last ``window_seconds``."""
    sql = SELECT_SUSPENDED_ACTIVE_PAGE if active_only else SELECT_SUSPENDED_EVER_PAGE
    position, user_id = after if after is not None else (None, None)
    records = await conn.fetch(sql, window_seconds, position, user_id, limit)
    return rows.many(SuspendedUserRow, records)
