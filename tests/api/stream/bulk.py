"""Many outbox rows at once, for the replay-bound tests: one INSERT ... generate_series, with the
relay cursor moved past them in the same transaction (so the relay does not copy them to Redis;
what the stream's catch-up reads is then PostgreSQL, as after a long outage).

The rows are written with their positions, under the positioning lock, as a positioner would
give them: left to the positioner, 100,000 events of one transaction would be one positioning
statement, which on a loaded machine outlasted the app's start-up (its read cache asks for the
newest position) and failed the test."""

from __future__ import annotations

import asyncpg

from marketplace.storage.repositories import events as events_repo

BULK_PROJECT_CHANGES = """
WITH ordered AS MATERIALIZED (
    SELECT pg_advisory_xact_lock($1) AS locked,
           (SELECT coalesce(max(last_position), 0) FROM event_positions) AS base
),
inserted AS (
    INSERT INTO events (type, subject, payload, position)
    SELECT 'project.changed', $2,
           jsonb_build_object('block', n, 'changes', jsonb_build_object('title', 't' || n),
                              'milestones', '[]'::jsonb),
           ordered.base + n
    FROM ordered CROSS JOIN generate_series(1, $3::int) AS n
    ORDER BY n
    RETURNING position
)
SELECT min(position), max(position) FROM inserted
"""
SET_LAST_POSITION = """
INSERT INTO event_positions AS p (singleton, last_position) VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE SET last_position = EXCLUDED.last_position, updated_at = now()
"""


async def bulk_project_changes(conn: asyncpg.Connection, project: str, count: int) -> range:
    """``count`` ``project.changed`` events of ``project`` in one statement; their positions."""
    async with conn.transaction():
        row = await conn.fetchrow(
            BULK_PROJECT_CHANGES, events_repo.POSITION_LOCK_KEY, project, count
        )
        assert row is not None
        first, last = row[0], row[1]
        await conn.execute(SET_LAST_POSITION, last)
        await conn.execute(events_repo.ADVANCE_RELAY_CURSOR, last)
    return range(first, last + 1)
