"""Rows for the project read API, inserted straight into the tables the indexer fills.

Values mirror what the indexer writes (repositories/indexer.py): addresses and hashes lower-case,
USDC in whole-token units, optional on-chain values NULL when absent.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg

_positions = itertools.count(1)
_addresses = itertools.count(1)

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def address(n: int | None = None) -> str:
    """A distinct lower-case address with letters in it (so checksumming changes its case)."""
    n = next(_addresses) if n is None else n
    return "0x" + f"{n:08x}".rjust(40, "a")


def bytes32(n: int) -> str:
    return "0x" + f"{n:x}".rjust(64, "c")


PROJECT_COLUMNS = (
    "project_address",
    "chain_id",
    "owner_address",
    "status",
    "project_mode",
    "bidding_access",
    "config_hash",
    "selected_builder_address",
    "milestone_count",
    "bid_bond_usdc",
    "challenge_payout_usdc",
    "challenge_submission_count",
    "challenge_submission_window_seconds",
    "challenge_owner_response_window_seconds",
    "challenge_submission_deadline",
    "challenge_owner_response_deadline",
    "dispute_phase",
    "dispute_reason",
    "dispute_raised_by",
    "dispute_milestone_index",
    "dispute_opened_at",
    "dispute_verdict_submitted_at",
    "dispute_owner_evidence_hash",
    "dispute_worker_evidence_hash",
    "allowlist",
    "created_block",
    "created_log_index",
    "created_at",
    "updated_at",
    "snapshot_block",
)
INSERT_PROJECT = f"""
INSERT INTO projects ({", ".join(PROJECT_COLUMNS)})
VALUES ({", ".join(f"${i + 1}" for i in range(len(PROJECT_COLUMNS)))})
"""
MILESTONE_COLUMNS = (
    "project_address",
    "milestone_index",
    "status",
    "payout_usdc",
    "deadline_at",
    "submitted_at",
    "approved_at",
    "resolved_at",
    "delivery_ref_hash",
    "latest_evidence_hash",
    "attested_on_chain",
    "latest_verifier_job_id",
    "latest_verifier_passes",
)
INSERT_MILESTONE = f"""
INSERT INTO milestones ({", ".join(MILESTONE_COLUMNS)})
VALUES ({", ".join(f"${i + 1}" for i in range(len(MILESTONE_COLUMNS)))})
"""


async def project(conn: asyncpg.Connection, **values: Any) -> dict[str, Any]:
    """Insert a standard-mode open draft (override any column); return the row's values.

    Each call takes the next listing position unless ``created_block`` is given, so later
    inserts list first.
    """
    position = next(_positions)
    row: dict[str, Any] = {
        "project_address": address(),
        "chain_id": 31337,
        "owner_address": address(),
        "status": "draft",
        "project_mode": "standard",
        "bidding_access": "open",
        "config_hash": bytes32(position),
        "milestone_count": 0,
        "allowlist": [],
        "created_block": 1000 + position,
        "created_log_index": 0,
        "created_at": T0,
        "updated_at": T0,
        "snapshot_block": 1000 + position,
    }
    row.update(values)
    await conn.execute(INSERT_PROJECT, *(row.get(c) for c in PROJECT_COLUMNS))
    return row


async def milestone(
    conn: asyncpg.Connection, project_address: str, index: int, **values: Any
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "project_address": project_address,
        "milestone_index": index,
        "status": "pending",
        "attested_on_chain": False,
    }
    row.update(values)
    await conn.execute(INSERT_MILESTONE, *(row.get(c) for c in MILESTONE_COLUMNS))
    return row


async def user(conn: asyncpg.Connection, user_id: uuid.UUID) -> None:
    await conn.execute(
        "INSERT INTO users (user_id, email_verified) VALUES ($1, true) ON CONFLICT DO NOTHING",
        user_id,
    )


async def metadata(
    conn: asyncpg.Connection,
    project_address: str,
    owner_address: str,
    *,
    title: str = "A project",
    description: str | None = None,
    image_url: str | None = None,
    project_mode: str = "standard",
    bidding_access: str = "open",
) -> None:
    claimer = uuid.uuid4()
    await user(conn, claimer)
    await conn.execute(
        """
        INSERT INTO project_metadata (project_address, owner_address, title, description,
                                      image_url, project_mode, bidding_access, claimed_by,
                                      claim_mode, hash_version, tx_hash, config_hash)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'direct', 'v1_direct', $9, $10)
        """,
        project_address,
        owner_address,
        title,
        description,
        image_url,
        project_mode,
        bidding_access,
        claimer,
        bytes32(0xDEAD),
        bytes32(0xBEEF),
    )


async def link(
    conn: asyncpg.Connection, user_id: uuid.UUID, wallet: str, *, revoked: bool = False
) -> None:
    """Link ``wallet`` to ``user_id`` (active unless ``revoked``)."""
    await user(conn, user_id)
    await conn.execute(
        """
        INSERT INTO wallet_links (user_id, wallet_address, chain_id, verification_method,
                                  revoked_at, revoked_reason)
        VALUES ($1, $2, 31337, 'eip191_sign_message', $3, $4)
        """,
        user_id,
        wallet,
        datetime.now(UTC) if revoked else None,
        "user" if revoked else None,
    )


async def revoke(conn: asyncpg.Connection, user_id: uuid.UUID, wallet: str) -> None:
    await conn.execute(
        "UPDATE wallet_links SET revoked_at = now(), revoked_reason = 'user'"
        " WHERE user_id = $1 AND wallet_address = $2 AND revoked_at IS NULL",
        user_id,
        wallet,
    )
