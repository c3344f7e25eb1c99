"""Many outbox rows at once, for the replay-bound tests: one INSERT ... generate_series, with the
relay cursor moved past them in the same transaction (so the relay does not copy them to Redis;
what the stream's catch-up reads is then PostgreSQL, as after a long outage)."""

from __future__ import annotations

import asyncpg

from marketplace.storage.repositories import events as events_repo

BULK_PROJECT_CHANGES = """
WITH ordered AS MATERIALIZED (SELECT pg_advisory_xact_lock($1) AS locked),
inserted AS (
    INSERT INTO events (type, subject, payload)
    SELECT 'project.changed', $2,
           jsonb_build_object('block', n, 'changes', jsonb_build_object('title', 't' || n),
                              'milestones', '[]'::jsonb)
    FROM ordered CROSS JOIN generate_series(1, $3::int) AS n
    ORDER BY n
    RETURNING id
)
SELECT min(id), max(id) FROM inserted
"""


async def bulk_project_changes(conn: asyncpg.Connection, project: str, count: int) -> range:
    """``count`` ``project.changed`` events of ``project`` in one statement; their ids."""
    async with conn.transaction():
        row = await conn.fetchrow(BULK_PROJECT_CHANGES, events_repo.EVENTS_LOCK_KEY, project, count)
        assert row is not None
        first, last = row[0], row[1]
        await conn.execute(events_repo.ADVANCE_RELAY_CURSOR, last)
    return range(first, last + 1)
