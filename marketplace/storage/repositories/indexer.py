"""SQL of the chain indexer: cursor, recent blocks, and snapshot upserts of the read models."""

from __future__ import annotations

import dataclasses
import json
import operator
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple, TypeAlias

import asyncpg

from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.read_model_rows import MilestoneRow, ProjectCreation, ProjectRow

SELECT_CURSOR = """
SELECT chain_id, registry_address, start_block, last_synced_block, head_block,
       last_synced_block_time, last_successful_sync_at, updated_at
FROM indexer_cursors WHERE chain_id = $1
"""
INIT_CURSOR = """
INSERT INTO indexer_cursors (chain_id, registry_address, start_block, last_synced_block)
VALUES ($1, $2, $3, $4)
ON CONFLICT (chain_id) DO NOTHING
"""
ADVANCE_CURSOR = """
UPDATE indexer_cursors
SET last_synced_block = $2, head_block = $3, last_successful_sync_at = $4,
    last_synced_block_time = coalesce($5, last_synced_block_time), updated_at = now()
WHERE chain_id = $1
"""
RESET_CHAIN = """
WITH cursors AS (DELETE FROM indexer_cursors WHERE chain_id = $1),
     blocks AS (DELETE FROM indexer_blocks WHERE chain_id = $1)
DELETE FROM projects WHERE chain_id = $1
RETURNING project_address
"""
SET_HEAD = "UPDATE indexer_cursors SET head_block = $2, updated_at = now() WHERE chain_id = $1"
RECORD_BLOCK = """
INSERT INTO indexer_blocks (chain_id, block_number, block_hash, touched_projects)
VALUES ($1, $2, $3, $4)
ON CONFLICT (chain_id, block_number)
DO UPDATE SET block_hash = EXCLUDED.block_hash, touched_projects = EXCLUDED.touched_projects
"""
RECENT_BLOCKS = """
SELECT block_number, block_hash FROM indexer_blocks
WHERE chain_id = $1 ORDER BY block_number DESC LIMIT $2
"""
BLOCKS_AFTER = """
DELETE FROM indexer_blocks WHERE chain_id = $1 AND block_number > $2
RETURNING touched_projects
"""
PRUNE_BLOCKS = """
DELETE FROM indexer_blocks
WHERE chain_id = $1 AND block_number < $2
  AND block_number NOT IN (
      SELECT block_number FROM indexer_blocks WHERE chain_id = $1
      ORDER BY block_number DESC LIMIT $3)
"""
KNOWN_PROJECTS = "SELECT project_address FROM projects WHERE chain_id = $1"
DELETE_PROJECTS_CREATED_AFTER = """
DELETE FROM projects WHERE chain_id = $1 AND created_block > $2 RETURNING project_address
"""
EXISTING_CREATIONS = """
SELECT project_address, owner_address, config_hash, created_block, created_log_index
FROM projects WHERE project_address = any($1::text[])
"""

#: One column of a stored ``projects`` or ``milestones`` row as asyncpg gives it (``numeric``
#: as Decimal, ``text[]`` as a list).
ColumnValue: TypeAlias = str | int | bool | Decimal | datetime | list[str] | None
#: A stored row by column name: the columns of :class:`ProjectRow` or :class:`MilestoneRow`.
StoredRow: TypeAlias = dict[str, ColumnValue]

_PROJECT_COLUMNS = [f.name for f in dataclasses.fields(ProjectRow)]
_MILESTONE_COLUMNS = [f.name for f in dataclasses.fields(MilestoneRow)]
# The rows an upsert is about to replace, to tell which fields changed (docs/events.md).
CURRENT_PROJECTS = f"""
SELECT {", ".join(_PROJECT_COLUMNS)} FROM projects WHERE project_address = any($1::text[])
"""
CURRENT_MILESTONES = f"""
SELECT {", ".join(_MILESTONE_COLUMNS)} FROM milestones WHERE project_address = any($1::text[])
"""
_PROJECT_TYPES = {
    "milestone_count": "int",
    "bid_bond_usdc": "numeric",
    "challenge_payout_usdc": "numeric",
    "challenge_submission_count": "int",
    "challenge_submission_window_seconds": "bigint",
    "challenge_owner_response_window_seconds": "bigint",
    "challenge_submission_deadline": "bigint",
    "challenge_owner_response_deadline": "bigint",
    "challenge_selection_phase": "bool",
    "dispute_milestone_index": "int",
    "dispute_opened_at": "bigint",
    "dispute_verdict_submitted_at": "bigint",
    "created_at": "timestamptz",
}
# Many rows per statement: one array per column, unnested. How the values travel is the cheapest
# exact way measured (bench/README.md, "Issue 28", "after the upsert change"): binary arrays,
# except ``numeric`` columns, sent as the numbers' decimal text (asyncpg's binary numeric encoder
# builds a Decimal and its digit tuple for each value: five times the cost of ``str``) and cast
# in SQL, and the allowlist (text[] per row; unnest flattens nested arrays), sent as JSON text.
_UNNESTED = [c for c in _PROJECT_COLUMNS if c != "allowlist"]
_NUMERIC_NAMES = {c for c, t in _PROJECT_TYPES.items() if t == "numeric"}
_NUMERIC = [i for i, c in enumerate(_UNNESTED) if c in _NUMERIC_NAMES]
_SENT_TYPES = {c: "text" if t == "numeric" else t for c, t in _PROJECT_TYPES.items()}
_UPDATABLE = [c for c in _PROJECT_COLUMNS if c not in ("project_address", "created_at")]
_project_values = operator.attrgetter(*_UNNESTED, "allowlist")
_milestone_values = operator.attrgetter(*_MILESTONE_COLUMNS)

UPSERT_PROJECTS = f"""
INSERT INTO projects ({", ".join(_UNNESTED)}, allowlist, chain_id, created_block, created_log_index,
                      updated_at, snapshot_block)
SELECT {", ".join(f"u.{c}::numeric" if c in _NUMERIC_NAMES else f"u.{c}" for c in _UNNESTED)},
       ARRAY(SELECT jsonb_array_elements_text(u.allowlist::jsonb)),
       $%(chain)d, u.created_block, u.created_log_index, $%(updated)d, $%(block)d
FROM unnest({
    ", ".join(f"${i + 1}::{_SENT_TYPES.get(c, 'text')}[]" for i, c in enumerate(_UNNESTED))
},
            ${len(_UNNESTED) + 1}::text[], ${len(_UNNESTED) + 2}::bigint[],
            ${len(_UNNESTED) + 3}::int[])
     AS u({", ".join(_UNNESTED)}, allowlist, created_block, created_log_index)
ON CONFLICT (project_address) DO UPDATE SET
    {", ".join(f"{c} = EXCLUDED.{c}" for c in _UPDATABLE)},
    updated_at = EXCLUDED.updated_at, snapshot_block = EXCLUDED.snapshot_block
WHERE projects.snapshot_block <= EXCLUDED.snapshot_block
RETURNING project_address
""" % {
    "chain": len(_UNNESTED) + 4,
    "updated": len(_UNNESTED) + 5,
    "block": len(_UNNESTED) + 6,
}

UPSERT_MILESTONES = """
INSERT INTO milestones (project_address, milestone_index, status, payout_usdc, deadline_at,
                        submitted_at, approved_at, resolved_at, delivery_ref_hash,
                        latest_evidence_hash, attested_on_chain)
SELECT u.project_address, u.milestone_index, u.status, u.payout_usdc::numeric, u.deadline_at,
       u.submitted_at, u.approved_at, u.resolved_at, u.delivery_ref_hash, u.latest_evidence_hash,
       u.attested_on_chain
FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::timestamptz[],
            $6::timestamptz[], $7::timestamptz[], $8::timestamptz[], $9::text[],
            $10::text[], $11::bool[])
     AS u(project_address, milestone_index, status, payout_usdc, deadline_at, submitted_at,
          approved_at, resolved_at, delivery_ref_hash, latest_evidence_hash, attested_on_chain)
ON CONFLICT (project_address, milestone_index) DO UPDATE SET
    status = EXCLUDED.status, payout_usdc = EXCLUDED.payout_usdc,
    deadline_at = EXCLUDED.deadline_at, submitted_at = EXCLUDED.submitted_at,
    approved_at = EXCLUDED.approved_at, resolved_at = EXCLUDED.resolved_at,
    delivery_ref_hash = EXCLUDED.delivery_ref_hash,
    latest_evidence_hash = EXCLUDED.latest_evidence_hash,
    attested_on_chain = EXCLUDED.attested_on_chain
"""


class CursorRow(NamedTuple):
    """The indexer's progress on one chain (SELECT_CURSOR)."""

    chain_id: int
    registry_address: str
    start_block: int
    last_synced_block: int
    head_block: int
    last_synced_block_time: datetime | None
    last_successful_sync_at: datetime | None
    updated_at: datetime


async def get_cursor(conn: Conn, chain_id: int) -> CursorRow | None:
    return rows.maybe(CursorRow, await conn.fetchrow(SELECT_CURSOR, chain_id))


async def init_cursor(conn: Conn, chain_id: int, registry: str, start_block: int) -> None:
    await conn.execute(INIT_CURSOR, chain_id, registry.lower(), start_block, start_block - 1)


async def advance_cursor(
    conn: Conn,
    chain_id: int,
    synced: int,
    head: int,
    synced_at: datetime,
    synced_block_time: datetime | None = None,
) -> None:
    await conn.execute(ADVANCE_CURSOR, chain_id, synced, head, synced_at, synced_block_time)


async def reset_chain(conn: Conn, chain_id: int) -> set[str]:
    """Forget everything indexed from ``chain_id`` (the registry there was replaced); returns
    the projects deleted."""
    return {row["project_address"] for row in await conn.fetch(RESET_CHAIN, chain_id)}


async def set_head(conn: Conn, chain_id: int, head: int) -> None:
    await conn.execute(SET_HEAD, chain_id, head)


async def record_block(
    conn: Conn, chain_id: int, number: int, block_hash: str, touched: Iterable[str]
) -> None:
    await conn.execute(RECORD_BLOCK, chain_id, number, block_hash, sorted(touched))


async def recent_blocks(conn: Conn, chain_id: int, limit: int) -> list[asyncpg.Record]:
    return await conn.fetch(RECENT_BLOCKS, chain_id, limit)


async def drop_blocks_after(conn: Conn, chain_id: int, block: int) -> set[str]:
    rows = await conn.fetch(BLOCKS_AFTER, chain_id, block)
    return {address for row in rows for address in row["touched_projects"]}


async def prune_blocks(conn: Conn, chain_id: int, below: int, keep_latest: int) -> None:
    await conn.execute(PRUNE_BLOCKS, chain_id, below, keep_latest)


async def known_projects(conn: Conn, chain_id: int) -> set[str]:
    return {row["project_address"] for row in await conn.fetch(KNOWN_PROJECTS, chain_id)}


async def delete_projects_created_after(conn: Conn, chain_id: int, block: int) -> set[str]:
    rows = await conn.fetch(DELETE_PROJECTS_CREATED_AFTER, chain_id, block)
    return {row["project_address"] for row in rows}


async def current_state(
    conn: Conn, addresses: Sequence[str]
) -> tuple[dict[str, StoredRow], dict[tuple[str, int], StoredRow]]:
    """The stored project rows and milestone rows of ``addresses`` (absent ones left out)."""
    addresses = list(addresses)
    if not addresses:
        return {}, {}
    projects = await conn.fetch(CURRENT_PROJECTS, addresses)
    milestones = await conn.fetch(CURRENT_MILESTONES, addresses)
    return (
        {row["project_address"]: dict(row) for row in projects},
        {(row["project_address"], row["milestone_index"]): dict(row) for row in milestones},
    )


async def existing_creations(conn: Conn, addresses: Sequence[str]) -> dict[str, ProjectCreation]:
    rows = await conn.fetch(EXISTING_CREATIONS, list(addresses))
    return {
        r["project_address"]: ProjectCreation(
            r["project_address"],
            r["owner_address"],
            r["config_hash"],
            r["created_block"],
            r["created_log_index"],
        )
        for r in rows
    }


async def upsert_snapshots(
    conn: Connection,
    chain_id: int,
    snapshots: Sequence[tuple[ProjectRow, list[MilestoneRow], ProjectCreation]],
    *,
    block: int,
    block_time: datetime,
) -> set[str]:
    """Upsert projects and their milestones as of ``block``; return the projects written.

    A project already snapshotted at a later block is left alone (a retried or overlapping
    batch never moves the read model backwards).
    """
    if not snapshots:
        return set()
    # Rows to columns in C (attrgetter, zip): no Python statement per value.
    projects = [_project_values(project) for project, _, _ in snapshots]
    *columns, allowlists = (list(column) for column in zip(*projects, strict=True))
    for i in _NUMERIC:
        columns[i] = _numbers_as_text(columns[i])
    written_rows = await conn.fetch(
        UPSERT_PROJECTS,
        *columns,
        list(map(json.dumps, allowlists)),
        [creation.block_number for _, _, creation in snapshots],
        [creation.log_index for _, _, creation in snapshots],
        chain_id,
        block_time,
        block,
    )
    written = {row["project_address"] for row in written_rows}
    rows = [
        _milestone_values(m)
        for project, milestones, _ in snapshots
        if project.project_address in written
        for m in milestones
    ]
    if rows:
        milestone_columns = [list(c) for c in zip(*rows, strict=True)]
        milestone_columns[3] = _numbers_as_text(milestone_columns[3])  # payout_usdc
        await conn.execute(UPSERT_MILESTONES, *milestone_columns)
    return written


def _numbers_as_text(values: list[Any]) -> list[str | None]:
    """A ``numeric`` column's values (int or Decimal) as their exact decimal text."""
    return [None if v is None else str(v) for v in values]
