"""SQL of agent profiles (docs/leaderboards.md, "Agent profiles"): who a uuid or a wallet is,
the projects where its wallets are owner or selected worker (as a viewer may see them), its
statistics over every project (invite-only ones count, unnamed), and its category rankings read
from the board standings.

Completed milestones are the `approved` ones; payouts are the milestones' gross `payout_usdc`.
A dispute is a milestone that was in one (`disputed`, `attested`, or resolved: `resolved_at`
set); the worker lost it when the milestone was `rejected`, the owner when it ended `approved`
after a dispute.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import NamedTuple

from marketplace.storage import rows
from marketplace.storage.pool import Conn, fetch_one
from marketplace.storage.repositories.projects import VISIBLE_TO_VIEWER

SELECT_USER = """
SELECT u.user_id, n.username,
       coalesce(ARRAY(SELECT w.wallet_address FROM wallet_links w
                      WHERE w.user_id = u.user_id AND w.revoked_at IS NULL
                      ORDER BY w.wallet_address), '{}') AS wallets
FROM users u LEFT JOIN usernames n ON n.user_id = u.user_id
WHERE u.user_id = $1
"""

# The wallet's active holder, if any; else whether the wallet was ever linked or is a party of
# an indexed project (a profile without a user).
SELECT_WALLET = """
SELECT (SELECT w.user_id FROM wallet_links w
        WHERE w.wallet_address = $1 AND w.revoked_at IS NULL) AS user_id,
       EXISTS (SELECT 1 FROM wallet_links w WHERE w.wallet_address = $1)
       OR EXISTS (SELECT 1 FROM projects p WHERE p.owner_address = $1)
       OR EXISTS (SELECT 1 FROM projects p WHERE p.selected_builder_address = $1) AS known
"""

# The projects where one of $1 is owner or selected worker, visible to the viewer's wallets $2.
SELECT_PROJECTS = f"""
SELECT p.project_address, md.title, p.status,
       CASE WHEN p.owner_address = any($1::text[]) THEN 'owner' ELSE 'worker' END AS role,
       count(m.milestone_index) FILTER (WHERE m.status = 'approved') AS completed,
       coalesce(sum(m.payout_usdc) FILTER (WHERE m.status = 'approved'), 0) AS payout
FROM projects p
CROSS JOIN (SELECT $2::text[] AS wallets) v
LEFT JOIN project_metadata md
    ON md.project_address = p.project_address AND md.owner_address = p.owner_address
LEFT JOIN milestones m ON m.project_address = p.project_address
WHERE (p.owner_address = any($1::text[]) OR p.selected_builder_address = any($1::text[]))
  AND {VISIBLE_TO_VIEWER}
GROUP BY p.project_address, md.title, p.status, p.owner_address
ORDER BY max(p.created_block) DESC, p.project_address
LIMIT $3
"""

SELECT_STATS = """
WITH mine AS (
    SELECT p.project_address,
           p.owner_address = any($1::text[]) AS as_owner,
           p.selected_builder_address = any($1::text[]) AS as_worker
    FROM projects p
    WHERE p.owner_address = any($1::text[]) OR p.selected_builder_address = any($1::text[])
), disputed AS (
    SELECT mine.as_owner, mine.as_worker, m.status
    FROM mine JOIN milestones m ON m.project_address = mine.project_address
    WHERE m.status IN ('disputed', 'attested') OR m.resolved_at IS NOT NULL
)
SELECT
    (SELECT count(*) FROM mine) AS projects,
    (SELECT count(*) FROM mine JOIN milestones m ON m.project_address = mine.project_address
     WHERE mine.as_worker AND m.status = 'approved') AS completed,
    (SELECT coalesce(sum(m.payout_usdc), 0) FROM mine
     JOIN milestones m ON m.project_address = mine.project_address
     WHERE mine.as_worker AND m.status = 'approved') AS payout,
    (SELECT count(*) FROM disputed) AS disputes,
    (SELECT count(*) FROM disputed
     WHERE (as_worker AND status = 'rejected') OR (as_owner AND status = 'approved'))
        AS disputes_lost
"""

# Rank of each of the wallets in each category's all-time board by payout (ties: wallet
# address), as GET /v1/leaderboards?categories=<one>&sort=payout&window=all ranks them.
SELECT_RANKINGS = """
SELECT s.category, s.wallet_address, s.completed_milestones, s.total_payout_usdc,
       1 + (SELECT count(*) FROM leaderboard_standings o
            WHERE o.category = s.category AND o.time_window = 'all'
              AND (o.total_payout_usdc > s.total_payout_usdc
                   OR (o.total_payout_usdc = s.total_payout_usdc
                       AND o.wallet_address < s.wallet_address))) AS rank,
       c.sort_order
FROM leaderboard_standings s
JOIN leaderboard_categories c ON c.slug = s.category
WHERE s.time_window = 'all' AND s.category <> '*' AND s.wallet_address = any($1::text[])
ORDER BY c.sort_order, s.category, rank
"""


class AgentUserRow(NamedTuple):
    user_id: uuid.UUID
    username: str | None
    wallets: list[str]  # active, lower-case, sorted


class WalletRow(NamedTuple):
    user_id: uuid.UUID | None  # the wallet's active holder
    known: bool  # ever linked, or a party of an indexed project


class AgentProjectRow(NamedTuple):
    project_address: str
    title: str | None
    status: str
    role: str  # owner | worker
    completed: int
    payout: Decimal


class AgentStatsRow(NamedTuple):
    projects: int
    completed: int
    payout: Decimal
    disputes: int
    disputes_lost: int


class RankingRow(NamedTuple):
    category: str
    wallet_address: str
    completed_milestones: int
    total_payout_usdc: Decimal
    rank: int
    sort_order: int


async def user(conn: Conn, user_id: uuid.UUID) -> AgentUserRow | None:
    return rows.maybe(AgentUserRow, await conn.fetchrow(SELECT_USER, user_id))


async def wallet(conn: Conn, address: str) -> WalletRow:
    return rows.one(WalletRow, await fetch_one(conn, SELECT_WALLET, address.lower()))


async def projects(
    conn: Conn, wallets: Sequence[str], viewer_wallets: Sequence[str], limit: int
) -> list[AgentProjectRow]:
    records = await conn.fetch(SELECT_PROJECTS, list(wallets), list(viewer_wallets), limit)
    return rows.many(AgentProjectRow, records)


async def stats(conn: Conn, wallets: Sequence[str]) -> AgentStatsRow:
    return rows.one(AgentStatsRow, await fetch_one(conn, SELECT_STATS, list(wallets)))


async def rankings(conn: Conn, wallets: Sequence[str]) -> list[RankingRow]:
    return rows.many(RankingRow, await conn.fetch(SELECT_RANKINGS, list(wallets)))
