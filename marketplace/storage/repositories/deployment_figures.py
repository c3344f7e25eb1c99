"""SQL of the deployment-wide figures ``/metrics`` exports (docs/metrics.md): one statement
reads them all, so a scrape costs one round trip however many families it fills.

Everything here is a count over the tables as they are now, so every frontend reads the same
values. Grouped counts come back as JSON arrays (through the pool's JSON codec).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from marketplace.storage import rows
from marketplace.storage.pool import Conn, fetch_one

# Verifier job status as the repository shows it (marketplace/storage/repositories/
# verifier_jobs.py): its queue job's. Outbox lag is the newest event id less each consumer's
# cursor (a missing cursor row means 0, as the consumers read it).
SNAPSHOT = """
SELECT
  (SELECT coalesce(jsonb_agg(jsonb_build_array(policy, status, jobs)), '[]'::jsonb)
   FROM (SELECT v.check_policy_id AS policy,
                j.status, count(*) AS jobs
         FROM verifier_jobs v JOIN jobs j ON j.id = v.job_id
         GROUP BY 1, 2) s) AS verifier_jobs,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(policy, passes, jobs)), '[]'::jsonb)
   FROM (SELECT check_policy_id AS policy, passes, count(*) AS jobs
         FROM verifier_jobs WHERE completed_at IS NOT NULL
         GROUP BY 1, 2) s) AS verifier_results,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(status, deliveries)), '[]'::jsonb)
   FROM (SELECT status, count(*) AS deliveries FROM notification_deliveries
         GROUP BY 1) s) AS deliveries,
  (SELECT count(*) FROM moderation_offenses) AS offenses_recorded,
  (SELECT count(*) FROM moderation_offenses
   WHERE created_at > now() - make_interval(secs => $1)) AS offenses_window,
  (SELECT count(*) FROM moderation_suspensions
   WHERE lifted_at IS NULL AND starts_at <= now() AND ends_at > now()) AS suspensions_active,
  -- Consumers' cursors are positions (migration 0022), so the newest is the newest position.
  (SELECT coalesce(max(last_position), 0) FROM event_positions) AS newest_event_id,
  (SELECT coalesce(max(last_event_id), 0) FROM leaderboard_consumer_cursor)
      AS leaderboard_cursor,
  (SELECT coalesce(max(last_event_id), 0) FROM notification_consumer_cursor)
      AS notification_cursor
"""


class SnapshotRow(NamedTuple):
    """The row of :data:`SNAPSHOT`."""

    verifier_jobs: list[list[Any]]
    verifier_results: list[list[Any]]
    deliveries: list[list[Any]]
    offenses_recorded: int
    offenses_window: int
    suspensions_active: int
    newest_event_id: int
    leaderboard_cursor: int
    notification_cursor: int


async def snapshot(conn: Conn, *, moderation_window_seconds: float) -> SnapshotRow:
    """One row: ``verifier_jobs`` ([policy, status, jobs], ...), ``verifier_results``
    ([policy, passes, jobs], ...), ``deliveries`` ([status, deliveries], ...), the moderation
    counts, ``newest_event_id`` and the two consumers' cursors."""
    return rows.one(SnapshotRow, await fetch_one(conn, SNAPSHOT, float(moderation_window_seconds)))
