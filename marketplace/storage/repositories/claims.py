"""SQL of project create intents, claims and metadata edits."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, TypedDict

from pydantic import JsonValue

from marketplace.events.types import (
    NewEvent,
    ProjectClaimedPayload,
    ProjectMetadataUpdatedPayload,
)
from marketplace.storage import rows
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


class StoredMilestonePolicy(TypedDict):
    """One element of ``project_metadata.milestone_policies`` (JSON, ordered by index)."""

    milestoneIndex: int
    checkPolicyId: str


@dataclass(frozen=True)
class NewMetadata:
    """The claimed metadata :func:`insert_metadata` binds to a project."""

    project_address: str
    owner_address: str
    title: str
    description: str | None
    repo_url: str | None
    image_url: str | None
    project_mode: str
    bidding_access: str
    claimed_by: uuid.UUID
    claim_mode: str
    hash_version: str
    intent_id: uuid.UUID | None
    tx_hash: str
    config_hash: str
    milestone_policies: list[StoredMilestonePolicy]


@dataclass(frozen=True)
class MetadataChanges:
    """The optional fields a metadata edit sent (PATCH semantics: a field not sent keeps its
    value; a sent None clears it)."""

    description: str | None = None
    description_sent: bool = False
    image_url: str | None = None
    image_url_sent: bool = False
    milestone_policies: list[StoredMilestonePolicy] | None = None  # None: not sent


class NewIntentRow(NamedTuple):
    intent_id: uuid.UUID
    user_id: uuid.UUID
    intent_nonce: str
    status: str
    created_at: datetime
    expires_at: datetime


class IntentRow(NamedTuple):
    intent_id: uuid.UUID
    user_id: uuid.UUID
    intent_nonce: str
    status: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None
    project_address: str | None


class IntentStateRow(NamedTuple):
    intent_id: uuid.UUID
    status: str
    cancelled_at: datetime | None


class CancelledIntentRow(NamedTuple):
    intent_id: uuid.UUID
    status: str
    cancelled_at: datetime


class MetadataRow(NamedTuple):
    project_address: str
    owner_address: str
    title: str
    description: str | None
    repo_url: str | None
    image_url: str | None
    project_mode: str
    bidding_access: str
    claimed_by: uuid.UUID
    claimed_at: datetime
    updated_at: datetime
    claim_mode: str
    hash_version: str
    intent_id: uuid.UUID | None
    tx_hash: str
    config_hash: str
    milestone_policies: list[StoredMilestonePolicy]


class IndexedProjectRow(NamedTuple):
    project_address: str
    owner_address: str
    status: str
    project_mode: str
    bidding_access: str
    config_hash: str


async def insert_intent(
    conn: Conn, intent_id: uuid.UUID, user_id: uuid.UUID, nonce: str, expires_at: datetime
) -> NewIntentRow:
    record = await fetch_one(conn, INSERT_INTENT, intent_id, user_id, nonce, expires_at)
    return rows.one(NewIntentRow, record)


async def intent_for_update(conn: Connection, intent_id: uuid.UUID) -> IntentRow | None:
    return rows.maybe(IntentRow, await conn.fetchrow(SELECT_INTENT_FOR_UPDATE, intent_id))


async def use_intent(conn: Connection, intent_id: uuid.UUID, project: str) -> bool:
    return await conn.execute(USE_INTENT, intent_id, project) == "UPDATE 1"


async def metadata(conn: Conn, project: str) -> MetadataRow | None:
    return rows.maybe(MetadataRow, await conn.fetchrow(SELECT_METADATA, project))


async def insert_metadata(conn: Connection, values: NewMetadata) -> None:
    """Bind the claimed metadata and record ``project.claimed``: the caller's transaction must
    end right after this call (the event is its last statement)."""
    await conn.execute(
        INSERT_METADATA,
        values.project_address,
        values.owner_address,
        values.title,
        values.description,
        values.repo_url,
        values.image_url,
        values.project_mode,
        values.bidding_access,
        values.claimed_by,
        values.claim_mode,
        values.hash_version,
        values.intent_id,
        values.tx_hash,
        values.config_hash,
        values.milestone_policies,
    )
    payload = ProjectClaimedPayload(
        ownerAddress=values.owner_address,
        userId=str(values.claimed_by),
        claimMode=values.claim_mode,
        configHash=values.config_hash,
        txHash=values.tx_hash,
    )
    await events.append(conn, [NewEvent(values.project_address, payload)])


async def update_metadata(
    conn: Connection,
    project: str,
    title: str,
    changes: MetadataChanges,
    user_id: uuid.UUID,
) -> None:
    """Set the title and the optional fields the client sent (``changes``).
    Records ``project.metadata_updated`` as the last statement of the caller's transaction."""
    await conn.execute(
        UPDATE_METADATA,
        project,
        title,
        changes.description_sent,
        changes.description,
        changes.image_url_sent,
        changes.image_url,
        changes.milestone_policies is not None,
        changes.milestone_policies or [],
    )
    # The edited fields by their read-API names: title always, the optional ones when sent.
    sent: dict[str, JsonValue] = {"title": title}
    if changes.description_sent:
        sent["description"] = changes.description
    if changes.image_url_sent:
        sent["imageUrl"] = changes.image_url
    if changes.milestone_policies is not None:
        sent["milestonePolicies"] = [
            {"milestoneIndex": p["milestoneIndex"], "checkPolicyId": p["checkPolicyId"]}
            for p in changes.milestone_policies
        ]
    payload = ProjectMetadataUpdatedPayload(userId=str(user_id), changes=sent)
    await events.append(conn, [NewEvent(project, payload)])


async def cancel_intent(
    conn: Conn, intent_id: uuid.UUID, user_id: uuid.UUID
) -> CancelledIntentRow | None:
    return rows.maybe(CancelledIntentRow, await conn.fetchrow(CANCEL_INTENT, intent_id, user_id))


async def own_intent(conn: Conn, intent_id: uuid.UUID, user_id: uuid.UUID) -> IntentStateRow | None:
    return rows.maybe(IntentStateRow, await conn.fetchrow(SELECT_OWN_INTENT, intent_id, user_id))


async def indexed_project(conn: Conn, project: str) -> IndexedProjectRow | None:
    return rows.maybe(IndexedProjectRow, await conn.fetchrow(SELECT_INDEXED, project))


async def other_project_with_config(conn: Conn, config_hash: str, project: str) -> str | None:
    return await conn.fetchval(OTHER_PROJECT_WITH_CONFIG, config_hash, project)
