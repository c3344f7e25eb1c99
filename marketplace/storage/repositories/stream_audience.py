"""SQL of the live event stream's audience rules (marketplace/stream/audience.py).

Each query answers "which users may see this event now" from the current state, so it runs once
per event and frontend, when the event is fanned out (and once per replayed event when a client
catches up): a wallet link revoked or a worker deselected a moment ago already counts.
"""

from __future__ import annotations

import uuid

from marketplace.storage.pool import Conn

# Users with an ACTIVE wallet link to the project's owner wallet or its selected worker's wallet
# (``wallet_links_one_active_per_wallet`` finds each in one index probe).
SELECT_PROJECT_PARTY_USERS = """
SELECT DISTINCT w.user_id
FROM projects p
JOIN wallet_links w
    ON w.revoked_at IS NULL
   AND w.wallet_address = any(ARRAY[p.owner_address, p.selected_builder_address])
WHERE p.project_address = $1
"""


async def project_party_users(conn: Conn, project_address: str) -> set[uuid.UUID]:
    """Users linked now to the project's owner or selected worker (empty: unknown project)."""
    rows = await conn.fetch(SELECT_PROJECT_PARTY_USERS, project_address.lower())
    return {row["user_id"] for row in rows}


SELECT_BLOCKS = """
SELECT EXISTS (SELECT 1 FROM user_blocks WHERE user_id = $1 AND blocked_user_id = $2)
"""


async def blocks(conn: Conn, user_id: uuid.UUID, other_user_id: uuid.UUID) -> bool:
    """Whether ``user_id`` blocks ``other_user_id`` now (blocks are directed)."""
    return bool(await conn.fetchval(SELECT_BLOCKS, user_id, other_user_id))
