"""The rows the indexer writes into the read-model tables (``projects``, ``milestones``).

They describe the tables' columns, so they live with the SQL that writes them; the indexer's
snapshot rules (``marketplace/indexer/snapshot.py``) build them from chain state.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class ProjectCreation:
    """Where and how the registry announced a project (its ProjectCreated log)."""

    project_address: str
    owner_address: str
    config_hash: str
    block_number: int
    log_index: int


@dataclass(frozen=True)
class ProjectRow:
    project_address: str
    owner_address: str
    status: str
    project_mode: str
    bidding_access: str
    config_hash: str
    selected_builder_address: str | None
    milestone_count: int
    bid_bond_usdc: int | None
    challenge_payout_usdc: int | None
    challenge_submission_count: int | None
    challenge_submission_window_seconds: int | None
    challenge_owner_response_window_seconds: int | None
    challenge_submission_deadline: int | None
    challenge_owner_response_deadline: int | None
    challenge_selection_phase: bool
    dispute_phase: str | None
    dispute_reason: str | None
    dispute_raised_by: str | None
    dispute_milestone_index: int | None
    dispute_opened_at: int | None
    dispute_verdict_submitted_at: int | None
    dispute_owner_evidence_hash: str | None
    dispute_worker_evidence_hash: str | None
    allowlist: list[str]
    created_at: datetime


@dataclass(frozen=True)
class MilestoneRow:
    project_address: str
    milestone_index: int
    status: str
    payout_usdc: int | None
    deadline_at: datetime | None
    submitted_at: datetime | None
    approved_at: datetime | None
    resolved_at: datetime | None
    delivery_ref_hash: str | None
    latest_evidence_hash: str | None
    attested_on_chain: bool
