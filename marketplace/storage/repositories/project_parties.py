"""The project facts the off-chain records' rules need, read from the indexed read model.

Read-only: the `projects` table belongs to the indexer (marketplace/indexer). Addresses are
lower-case, as the indexer stores them.
"""

from __future__ import annotations

import asyncpg

from marketplace.storage.pool import Conn

SELECT_PROJECT_PARTIES = """
SELECT project_address, owner_address, status, project_mode, bidding_access,
       selected_builder_address, allowlist, challenge_submission_count,
       dispute_phase, dispute_milestone_index, dispute_opened_at
FROM projects WHERE project_address = $1
"""


async def get(conn: Conn, project_address: str) -> asyncpg.Record | None:
    return await conn.fetchrow(SELECT_PROJECT_PARTIES, project_address.lower())
