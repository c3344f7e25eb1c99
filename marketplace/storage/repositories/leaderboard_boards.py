"""SQL of the leaderboard boards (docs/leaderboards.md, "Boards"; migration 0017): the
completed-milestone entries, the standings aggregated from them, the boards consumer's lock and
cursor, and the board queries.

Every writer (the consumer's batches, the windows' refresh, the operator's rebuild) first takes
``pg_advisory_xact_lock(WRITE_LOCK_KEY)``, so a rebuild and the consumer never interleave their
deletes and inserts of the same rows.

Sort columns and windows are chosen from fixed tables here (never from request text), so every
statement is one of a few constants.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

import asyncpg

from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection


class StandingRow(NamedTuple):
    """One row of a board page (stored standings or aggregated entries, the same columns)."""

    wallet_address: str
    completed_milestones: int
    total_payout_usdc: Decimal
    projects: int
    categories: list[str]
    last_completed_at: datetime
    user_id: uuid.UUID | None  # the wallet's active holder
    username: str | None
    before: int  # rows ranked ahead of this page


# "mkt_lbcs": one active boards consumer among all frontends (the relay's pattern).
CONSUMER_LOCK_KEY = 0x6D6B745F6C626373
# "mkt_lbwr": one writer of entries and standings at a time (consumer batch, rebuild).
WRITE_LOCK_KEY = 0x6D6B745F6C627772

TRY_CONSUMER_LOCK = "SELECT pg_try_advisory_lock($1)"
TAKE_WRITE_LOCK = "SELECT pg_advisory_xact_lock($1)"
SELECT_CURSOR = """
SELECT coalesce(max(last_event_id), 0) AS last_event_id, max(windows_refreshed_at) AS refreshed
FROM leaderboard_consumer_cursor
"""
ADVANCE_CURSOR = """
INSERT INTO leaderboard_consumer_cursor AS c (singleton, last_event_id) VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE
    SET last_event_id = greatest(c.last_event_id, EXCLUDED.last_event_id), updated_at = now()
"""
SET_WINDOWS_REFRESHED = """
INSERT INTO leaderboard_consumer_cursor AS c (singleton, windows_refreshed_at) VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE SET windows_refreshed_at = EXCLUDED.windows_refreshed_at
"""
SELECT_NOW = "SELECT now()"
# The oldest event of the consumed types the consumer has not applied (its lag).
SELECT_OLDEST_PENDING = """
SELECT min(created_at) FROM (
    (SELECT e.created_at FROM events e
     WHERE e.position > (SELECT coalesce(max(last_event_id), 0) FROM leaderboard_consumer_cursor)
       AND e.type = any($1::text[])
     ORDER BY e.position LIMIT 1)
    UNION ALL
    -- Committed but not positioned yet (the relay positions within milliseconds): pending too.
    (SELECT e.created_at FROM events e
     WHERE e.position IS NULL AND e.type = any($1::text[])
     ORDER BY e.xid, e.id LIMIT 1)
) pending
"""

# --- entries ------------------------------------------------------------------------------------

ENTRY_SOURCE = """
SELECT m.project_address, m.milestone_index, lower(p.selected_builder_address),
       coalesce(m.payout_usdc, 0), coalesce(m.approved_at, m.resolved_at, p.updated_at),
       p.bidding_access = 'invite_only', coalesce(t.categories, '{}')
FROM milestones m
JOIN projects p ON p.project_address = m.project_address
LEFT JOIN milestone_category_tags t
    ON t.project_address = m.project_address AND t.milestone_index = m.milestone_index
WHERE m.status = 'approved' AND p.selected_builder_address IS NOT NULL
"""
ENTRY_COLUMNS = (
    "project_address, milestone_index, worker_wallet, payout_usdc, completed_at, invite_only, "
    "categories"
)
DELETE_PROJECT_ENTRIES = """
DELETE FROM leaderboard_entries WHERE project_address = any($1::text[]) RETURNING worker_wallet
"""
INSERT_PROJECT_ENTRIES = f"""
INSERT INTO leaderboard_entries ({ENTRY_COLUMNS})
{ENTRY_SOURCE.strip()} AND m.project_address = any($1::text[])
RETURNING worker_wallet
"""
DELETE_ALL_ENTRIES = "DELETE FROM leaderboard_entries"
INSERT_ALL_ENTRIES = f"INSERT INTO leaderboard_entries ({ENTRY_COLUMNS})\n{ENTRY_SOURCE.strip()}"

# --- standings ----------------------------------------------------------------------------------

WINDOW_SPANS = "(VALUES ('all', NULL::interval), ('90d', interval '90 days'), " + (
    "('30d', interval '30 days'))"
)


def _aggregate(entry_filter: str) -> str:
    """Standings of the entries passing ``entry_filter`` for every window and category ('*' and
    each tag). ``categories`` is the union of the counted milestones' tags in the categories'
    order."""
    return f"""
WITH w(time_window, span) AS {WINDOW_SPANS},
ew AS (
    SELECT w.time_window, e.worker_wallet, e.project_address, e.payout_usdc, e.completed_at,
           e.categories
    FROM leaderboard_entries e
    JOIN w ON w.span IS NULL OR e.completed_at >= now() - w.span
    WHERE {entry_filter}
),
ec AS (
    SELECT '*'::text AS category, ew.* FROM ew
    UNION ALL
    SELECT c.slug, ew.* FROM ew CROSS JOIN unnest(ew.categories) AS c(slug)
),
cu AS (
    SELECT d.category, d.time_window, d.worker_wallet,
           array_agg(d.slug ORDER BY lc.sort_order NULLS LAST, d.slug) AS categories
    FROM (SELECT DISTINCT ec.category, ec.time_window, ec.worker_wallet, t.slug
          FROM ec CROSS JOIN unnest(ec.categories) AS t(slug)) d
    LEFT JOIN leaderboard_categories lc ON lc.slug = d.slug
    GROUP BY d.category, d.time_window, d.worker_wallet
)
INSERT INTO leaderboard_standings
    (category, time_window, wallet_address, completed_milestones, total_payout_usdc, projects,
     categories, last_completed_at)
SELECT ec.category, ec.time_window, ec.worker_wallet, count(*), sum(ec.payout_usdc),
       count(DISTINCT ec.project_address), coalesce(cu.categories, '{{}}'), max(ec.completed_at)
FROM ec
LEFT JOIN cu USING (category, time_window, worker_wallet)
GROUP BY ec.category, ec.time_window, ec.worker_wallet, cu.categories
"""


DELETE_WALLET_STANDINGS = "DELETE FROM leaderboard_standings WHERE wallet_address = any($1::text[])"
INSERT_WALLET_STANDINGS = _aggregate("e.worker_wallet = any($1::text[])")
DELETE_ALL_STANDINGS = "DELETE FROM leaderboard_standings"
INSERT_ALL_STANDINGS = _aggregate("true")
# Wallets with an entry that left the 90d or 30d window between two refreshes ($1, $2).
SELECT_DECAYED_WALLETS = """
SELECT DISTINCT worker_wallet FROM leaderboard_entries
WHERE (completed_at >= $1::timestamptz - interval '90 days'
       AND completed_at < $2::timestamptz - interval '90 days')
   OR (completed_at >= $1::timestamptz - interval '30 days'
       AND completed_at < $2::timestamptz - interval '30 days')
"""

# --- board queries ------------------------------------------------------------------------------

# sort name -> (standings column, SQL type of its cursor value)
SORT_COLUMNS: dict[str, tuple[str, str]] = {
    "payout": ("total_payout_usdc", "numeric"),
    "milestones": ("completed_milestones", "integer"),
    "recent": ("last_completed_at", "timestamptz"),
}
ROW_COLUMNS = (
    "s.wallet_address, s.completed_milestones, s.total_payout_usdc, s.projects, s.categories, "
    "s.last_completed_at"
)
# The active link of each row's wallet and its user's username.
IDENTITY_JOIN = """
LEFT JOIN wallet_links w ON w.wallet_address = s.wallet_address AND w.revoked_at IS NULL
LEFT JOIN usernames u ON u.user_id = w.user_id
"""


def _standings_page(column: str, sql_type: str, *, after: bool) -> str:
    """One page of a stored board ($1 category, $2 window, $3 limit; after a cursor also
    $4 value, $5 wallet), each row with ``before``: the rows ranked ahead of the page. The
    keyset condition's first half bounds the index range; the second drops the tie rows up to
    the cursor's wallet."""
    keyset = (
        f"AND s.{column} <= $4::{sql_type} AND (s.{column} < $4::{sql_type} "
        "OR s.wallet_address > $5)"
        if after
        else ""
    )
    before = (
        f"""(SELECT count(*) FROM leaderboard_standings b
           WHERE b.category = $1 AND b.time_window = $2 AND b.{column} >= $4::{sql_type}
             AND (b.{column} > $4::{sql_type} OR b.wallet_address <= $5))"""
        if after
        else "0"
    )
    return f"""
SELECT {ROW_COLUMNS}, w.user_id, u.username, {before} AS before
FROM (SELECT {ROW_COLUMNS}
      FROM leaderboard_standings s
      WHERE s.category = $1 AND s.time_window = $2 {keyset}
      ORDER BY s.{column} DESC, s.wallet_address
      LIMIT $3) s
{IDENTITY_JOIN.strip()}
ORDER BY s.{column} DESC, s.wallet_address
"""


def _entries_page(column: str, sql_type: str, *, after: bool) -> str:
    """One page of a board of several categories aggregated from the entries ($1 categories,
    $2 window span or NULL, $3 limit; after a cursor also $4 value, $5 wallet): a milestone
    tagged with several of them counts once. Every wallet is aggregated (the rank needs them
    all); the categories' union only for the page's rows."""
    keyset = (
        f"WHERE s.{column} < $4::{sql_type} "
        f"OR (s.{column} = $4::{sql_type} AND s.wallet_address > $5)"
        if after
        else ""
    )
    return f"""
WITH agg AS (
    SELECT worker_wallet AS wallet_address, count(*)::integer AS completed_milestones,
           sum(payout_usdc) AS total_payout_usdc,
           count(DISTINCT project_address)::integer AS projects,
           max(completed_at) AS last_completed_at
    FROM leaderboard_entries
    WHERE categories && $1::text[] AND completed_at >= coalesce(now() - $2::interval, '-infinity')
    GROUP BY worker_wallet
),
ranked AS (
    SELECT agg.*, row_number() OVER (ORDER BY agg.{column} DESC, agg.wallet_address) - 1
               AS before
    FROM agg
),
page AS (SELECT * FROM ranked s {keyset} ORDER BY s.before LIMIT $3)
SELECT s.wallet_address, s.completed_milestones, s.total_payout_usdc, s.projects,
       coalesce(cu.categories, '{{}}') AS categories, s.last_completed_at, w.user_id, u.username,
       s.before
FROM page s
LEFT JOIN LATERAL (
    SELECT array_agg(d.slug ORDER BY lc.sort_order NULLS LAST, d.slug) AS categories
    FROM (SELECT DISTINCT t.slug
          FROM leaderboard_entries e CROSS JOIN unnest(e.categories) AS t(slug)
          WHERE e.worker_wallet = s.wallet_address AND e.categories && $1::text[]
            AND e.completed_at >= coalesce(now() - $2::interval, '-infinity')) d
    LEFT JOIN leaderboard_categories lc ON lc.slug = d.slug
) cu ON true
{IDENTITY_JOIN.strip()}
ORDER BY s.before
"""


STANDINGS_PAGES = {
    (sort, after): _standings_page(column, sql_type, after=after)
    for sort, (column, sql_type) in SORT_COLUMNS.items()
    for after in (False, True)
}
ENTRIES_PAGES = {
    (sort, after): _entries_page(column, sql_type, after=after)
    for sort, (column, sql_type) in SORT_COLUMNS.items()
    for after in (False, True)
}
WINDOW_INTERVALS: dict[str, timedelta | None] = {
    "all": None,
    "90d": timedelta(days=90),
    "30d": timedelta(days=30),
}
FORCE_CUSTOM_PLAN = "SET LOCAL plan_cache_mode = force_custom_plan"
SELECT_COUNTS = """
SELECT (SELECT count(*) FROM leaderboard_entries) AS entries,
       (SELECT count(*) FROM leaderboard_standings) AS standings
"""
SELECT_KNOWN_CATEGORIES = "SELECT slug FROM leaderboard_categories WHERE slug = any($1::text[])"


# --- consumer lock and cursor -------------------------------------------------------------------


async def try_consumer_lock(conn: Connection) -> bool:
    """Session-level: held until ``conn`` closes. Never call it on a pooled connection."""
    return bool(await conn.fetchval(TRY_CONSUMER_LOCK, CONSUMER_LOCK_KEY))


async def take_write_lock(conn: Connection) -> None:
    """Transaction-level: serialises every writer of entries and standings."""
    await conn.execute(TAKE_WRITE_LOCK, WRITE_LOCK_KEY)


async def consumer_cursor(conn: Conn) -> tuple[int, datetime | None]:
    """The last applied event id (0: none) and when the windows were last refreshed."""
    row = await conn.fetchrow(SELECT_CURSOR)
    assert row is not None
    return int(row["last_event_id"]), row["refreshed"]


async def advance_consumer_cursor(conn: Connection, last_event_id: int) -> None:
    await conn.execute(ADVANCE_CURSOR, last_event_id)


async def set_windows_refreshed(conn: Connection, at: datetime) -> None:
    await conn.execute(SET_WINDOWS_REFRESHED, at)


async def transaction_time(conn: Conn) -> datetime:
    value: datetime = await conn.fetchval(SELECT_NOW)
    return value


async def oldest_pending_event(conn: Conn, types: Sequence[str]) -> datetime | None:
    """When the oldest event of ``types`` the consumer has not applied was written."""
    value: datetime | None = await conn.fetchval(SELECT_OLDEST_PENDING, list(types))
    return value


# --- maintenance --------------------------------------------------------------------------------


async def rebuild_project_entries(conn: Connection, projects: Sequence[str]) -> set[str]:
    """Replace the entries of ``projects`` with what the read model says now; the wallets whose
    standings that may change (the workers before and after)."""
    old = await conn.fetch(DELETE_PROJECT_ENTRIES, list(projects))
    new = await conn.fetch(INSERT_PROJECT_ENTRIES, list(projects))
    return {row["worker_wallet"] for row in old} | {row["worker_wallet"] for row in new}


async def reaggregate_wallets(conn: Connection, wallets: Sequence[str]) -> None:
    """Recompute every standing (all categories and windows) of ``wallets``."""
    await conn.execute(DELETE_WALLET_STANDINGS, list(wallets))
    await conn.execute(INSERT_WALLET_STANDINGS, list(wallets))


async def decayed_wallets(conn: Conn, since: datetime, until: datetime) -> list[str]:
    """Wallets with a milestone that left the 90d or 30d window between ``since`` and
    ``until`` (uses the ``completed_at`` index)."""
    rows = await conn.fetch(SELECT_DECAYED_WALLETS, since, until)
    return [row["worker_wallet"] for row in rows]


async def rebuild_all(conn: Connection) -> None:
    """Every entry and standing from the read model and the tags (the caller's transaction)."""
    await conn.execute(DELETE_ALL_ENTRIES)
    await conn.execute(INSERT_ALL_ENTRIES)
    await conn.execute(DELETE_ALL_STANDINGS)
    await conn.execute(INSERT_ALL_STANDINGS)


async def counts(conn: Conn) -> tuple[int, int]:
    """How many entries and standings are stored."""
    row = await conn.fetchrow(SELECT_COUNTS)
    assert row is not None
    return int(row["entries"]), int(row["standings"])


# --- queries ------------------------------------------------------------------------------------


async def known_categories(conn: Conn, slugs: Sequence[str]) -> set[str]:
    """Those of ``slugs`` that are categories, active or not."""
    rows = await conn.fetch(SELECT_KNOWN_CATEGORIES, list(slugs))
    return {row["slug"] for row in rows}


async def standings_page(
    conn: Conn,
    *,
    category: str,
    window: str,
    sort: str,
    limit: int,
    after: tuple[object, str] | None,
) -> list[StandingRow]:
    """Up to ``limit`` rows of a stored board (``category``: a slug or ``'*'``) after the
    keyset position ``after`` (sort value, wallet); each row has ``before``."""
    if after is None:
        records = await conn.fetch(STANDINGS_PAGES[(sort, False)], category, window, limit)
    else:
        records = await conn.fetch(
            STANDINGS_PAGES[(sort, True)], category, window, limit, after[0], after[1]
        )
    return rows.many(StandingRow, records)


async def entries_page(
    conn: Conn,
    *,
    categories: Sequence[str],
    window: str,
    sort: str,
    limit: int,
    after: tuple[object, str] | None,
) -> list[StandingRow]:
    """As :func:`standings_page` for a board of several categories, from the entries.

    Planned for its parameters every time (``plan_cache_mode``, for this transaction only): the
    generic plan PostgreSQL switches a prepared statement to after five executions cannot see
    how many entries ``categories && $1`` selects and runs about five times slower
    (bench/leaderboards.py)."""
    span = WINDOW_INTERVALS[window]
    sql = ENTRIES_PAGES[(sort, after is not None)]
    arguments: list[object] = [list(categories), span, limit]
    if after is not None:
        arguments += [after[0], after[1]]
    if isinstance(conn, asyncpg.Pool):
        async with conn.acquire() as acquired:
            return rows.many(StandingRow, await _custom_plan_fetch(acquired, sql, arguments))
    return rows.many(StandingRow, await _custom_plan_fetch(conn, sql, arguments))


async def _custom_plan_fetch(
    conn: Connection, sql: str, arguments: Sequence[object]
) -> list[asyncpg.Record]:
    async with conn.transaction(readonly=True):
        await conn.execute(FORCE_CUSTOM_PLAN)
        return await conn.fetch(sql, *arguments)
