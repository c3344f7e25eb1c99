"""SQL of project create intents, claims and metadata edits."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from marketplace.events.types import EventType, NewEvent
from marketplace.storage.pool import Conn, Connection, fetch_one
from marketplace.storage.repositories import events

INSERT_INTENT = """
INSERT INTO project_create_intents (intent_id, user_id, intent_nonce, expires_at)
VALUES ($1, $2, $3, $4)
RETURNING intent_id, user_id, intent_nonce, status, created_at, expires_at
"""
SELECT_INTENT_FOR_UPDATE = """
SELECT intent_id, user_id, intent_nonce, status, created_at, expires_at, used_at, project_address
FROM project_create_intents WHERE intent_id = $1
FOR UPDATE
"""
CANCEL_INTENT = """
UPDATE project_create_intents
SET status = 'cancelled', cancelled_at = coalesce(cancelled_at, now())
WHERE intent_id = $1 AND user_id = $2 AND status IN ('pending', 'cancelled')
RETURNING intent_id, status, cancelled_at
"""
SELECT_OWN_INTENT = """
SELECT intent_id, status, cancelled_at FROM project_create_intents
WHERE intent_id = $1 AND user_id = $2
"""
USE_INTENT = """
UPDATE project_create_intents
SET status = 'used', used_at = now(), project_address = $2
WHERE intent_id = $1 AND status = 'pending'
"""
SELECT_METADATA = """
SELECT project_address, owner_address, title, description, repo_url, image_url, project_mode,
       bidding_access, claimed_by, claimed_at, updated_at, claim_mode, hash_version, intent_id,
       tx_hash, config_hash, milestone_policies
FROM project_metadata WHERE project_address = $1
"""
INSERT_METADATA = """
INSERT INTO project_metadata (project_address, owner_address, title, description, repo_url,
                              image_url, project_mode, bidding_access, claimed_by, claim_mode,
                              hash_version, intent_id, tx_hash, config_hash, milestone_policies)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15::jsonb)
"""
# PATCH semantics: a field the client left out keeps its value ($3 / $5 false), null clears it.
UPDATE_METADATA = """
UPDATE project_metadata
SET title = $2,
    description = CASE WHEN $3 THEN $4 ELSE description END,
    image_url = CASE WHEN $5 THEN $6 ELSE image_url END,
    milestone_policies = CASE WHEN $7 THEN $8::jsonb ELSE milestone_policies END,
    updated_at = now()
WHERE project_address = $1
"""
SELECT_INDEXED = """
SELECT project_address, owner_address, status, project_mode, bidding_access, config_hash
FROM projects WHERE project_address = $1
"""
OTHER_PROJECT_WITH_CONFIG = """
SELECT project_address FROM projects WHERE config_hash = $1 AND project_address <> $2 LIMIT 1
"""


async def insert_intent(
    conn: Conn, intent_id: uuid.UUID, user_id: uuid.UUID, nonce: str, expires_at: datetime
) -> asyncpg.Record:
    return await fetch_one(conn, INSERT_INTENT, intent_id, user_id, nonce, expires_at)


async def intent_for_update(conn: Connection, intent_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(SELECT_INTENT_FOR_UPDATE, intent_id)


async def use_intent(conn: Connection, intent_id: uuid.UUID, project: str) -> bool:
    return await conn.execute(USE_INTENT, intent_id, project) == "UPDATE 1"


async def metadata(conn: Conn, project: str) -> asyncpg.Record | None:
    return await conn.fetchrow(SELECT_METADATA, project)


async def insert_metadata(conn: Connection, **values: Any) -> None:
    """Bind the claimed metadata and record ``project.claimed``: the caller's transaction must
    end right after this call (the event is its last statement)."""
    await conn.execute(
        INSERT_METADATA,
        values["project_address"],
        values["owner_address"],
        values["title"],
        values["description"],
        values["repo_url"],
        values["image_url"],
        values["project_mode"],
        values["bidding_access"],
        values["claimed_by"],
        values["claim_mode"],
        values["hash_version"],
        values["intent_id"],
        values["tx_hash"],
        values["config_hash"],
        values.get("milestone_policies") or [],
    )
    payload = {
        "ownerAddress": values["owner_address"],
        "userId": str(values["claimed_by"]),
        "claimMode": values["claim_mode"],
        "configHash": values["config_hash"],
        "txHash": values["tx_hash"],
    }
    await events.append(
        conn, [NewEvent(EventType.PROJECT_CLAIMED, values["project_address"], payload)]
    )


async def update_metadata(
    conn: Connection,
    project: str,
    title: str,
    changes: dict[str, Any],
    user_id: uuid.UUID,
) -> None:
    """``changes`` holds only the optional fields the client sent: description, image_url,
    milestone_policies (a list of ``{"milestoneIndex", "checkPolicyId"}``).
    Records ``project.metadata_updated`` as the last statement of the caller's transaction."""
    await conn.execute(
        UPDATE_METADATA,
        project,
        title,
        "description" in changes,
        changes.get("description"),
        "image_url" in changes,
        changes.get("image_url"),
        "milestone_policies" in changes,
        changes.get("milestone_policies") or [],
    )
    fields: dict[str, Any] = {"title": title}
    if "description" in changes:
        fields["description"] = changes["description"]
    if "image_url" in changes:
        fields["imageUrl"] = changes["image_url"]
    if "milestone_policies" in changes:
        fields["milestonePolicies"] = changes["milestone_policies"] or []
    payload = {"userId": str(user_id), "changes": fields}
    await events.append(conn, [NewEvent(EventType.PROJECT_METADATA_UPDATED, project, payload)])


async def cancel_intent(
    conn: Conn, intent_id: uuid.UUID, user_id: uuid.UUID
) -> asyncpg.Record | None:
    return await conn.fetchrow(CANCEL_INTENT, intent_id, user_id)


async def own_intent(conn: Conn, intent_id: uuid.UUID, user_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(SELECT_OWN_INTENT, intent_id, user_id)


async def indexed_project(conn: Conn, project: str) -> asyncpg.Record | None:
    return await conn.fetchrow(SELECT_INDEXED, project)


async def other_project_with_config(conn: Conn, config_hash: str, project: str) -> str | None:
    return await conn.fetchval(OTHER_PROJECT_WITH_CONFIG, config_hash, project)
