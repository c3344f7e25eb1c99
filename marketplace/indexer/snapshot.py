"""Turns a project's on-chain state (``getProjectState()``) into read-model rows.

Pure functions: the indexer actor feeds them decoded structs; tests feed them literals.
USDC amounts become whole-token display units (base units // 10**6, as the spec's `usdc`
convention is an integer string); addresses and hashes are stored lower-case; zero values of
optional fields (a zero address, a zero hash, a zero timestamp) mean "absent".
"""

from __future__ import annotations

from datetime import UTC, datetime

from marketplace.chain.enums import (
    BiddingAccess,
    DisputePhase,
    DisputeReason,
    MilestoneStatus,
    ProjectMode,
    ProjectStatus,
    label,
)
from marketplace.chain.project_state import ProjectState

# Re-exported: the unit rule is the read model's (marketplace/projects/bids.py).
from marketplace.projects.bids import USDC_UNIT as USDC_UNIT
from marketplace.projects.bids import usdc_display as usdc_display
from marketplace.storage.read_model_rows import MilestoneRow, ProjectRow
from marketplace.types import ZERO_ADDRESS, ZERO_BYTES32

PROJECT_STATUSES = tuple(label(m) for m in ProjectStatus)
MILESTONE_STATUSES = tuple(label(m) for m in MilestoneStatus)
PROJECT_MODES = tuple(label(m) for m in ProjectMode)
BIDDING_ACCESS = tuple(label(m) for m in BiddingAccess)
DISPUTE_REASONS = tuple(label(m) for m in DisputeReason)
# The read model only knows the two active dispute phases; a resolved dispute has no phase.
ACTIVE_DISPUTE_PHASES = (DisputePhase.CHALLENGED, DisputePhase.VERIFIER_VERDICT)
DISPUTE_PHASES = tuple(label(m) if m in ACTIVE_DISPUTE_PHASES else None for m in DisputePhase)


def _address(value: str) -> str | None:
    lowered = value.lower()
    return None if lowered == ZERO_ADDRESS else lowered


def _hash(value: str) -> str | None:
    lowered = value.lower()
    return None if lowered == ZERO_BYTES32 else lowered


def _time(unix: int) -> datetime | None:
    return datetime.fromtimestamp(unix, UTC) if unix else None


def project_rows(
    project_address: str, state: ProjectState, allowlist: list[str]
) -> tuple[ProjectRow, list[MilestoneRow]]:
    address = project_address.lower()
    challenge = state["mode"] == 1
    phase = DISPUTE_PHASES[state["disputePhase"]]
    in_dispute = phase is not None
    selected = _address(state["selectedBuilder"]) or (
        _address(state["challengeWinner"]) if challenge else None
    )
    project = ProjectRow(
        project_address=address,
        owner_address=state["owner"].lower(),
        status=PROJECT_STATUSES[state["status"]],
        project_mode=PROJECT_MODES[state["mode"]],
        bidding_access=BIDDING_ACCESS[state["biddingAccess"]],
        config_hash=state["configHash"].lower(),
        selected_builder_address=selected,
        milestone_count=state["milestoneCount"],
        bid_bond_usdc=None if challenge else usdc_display(state["bidBond"]),
        challenge_payout_usdc=usdc_display(state["challengePayout"]) if challenge else None,
        challenge_submission_count=state["challengeSubmissionCount"] if challenge else None,
        challenge_submission_window_seconds=(
            state["challengeSubmissionWindowSeconds"] or None if challenge else None
        ),
        challenge_owner_response_window_seconds=(
            state["challengeOwnerResponseWindowSeconds"] or None if challenge else None
        ),
        challenge_submission_deadline=(
            state["challengeSubmissionDeadline"] or None if challenge else None
        ),
        challenge_owner_response_deadline=(
            state["challengeOwnerResponseDeadline"] or None if challenge else None
        ),
        challenge_selection_phase=bool(state["challengeSelectionPhase"]),
        dispute_phase=phase,
        dispute_reason=DISPUTE_REASONS[state["disputeReason"]] if in_dispute else None,
        dispute_raised_by=_address(state["disputeRaisedBy"]) if in_dispute else None,
        dispute_milestone_index=state["disputeMilestoneIndex"] if in_dispute else None,
        dispute_opened_at=state["disputeOpenedAt"] or None if in_dispute else None,
        dispute_verdict_submitted_at=(
            state["disputeVerdictSubmittedAt"] or None if in_dispute else None
        ),
        dispute_owner_evidence_hash=(
            _hash(state["disputeOwnerEvidenceHash"]) if in_dispute else None
        ),
        dispute_worker_evidence_hash=(
            _hash(state["disputeWorkerEvidenceHash"]) if in_dispute else None
        ),
        allowlist=sorted(a.lower() for a in allowlist),
        created_at=datetime.fromtimestamp(state["createdAt"], UTC),
    )
    milestones = [
        MilestoneRow(
            project_address=address,
            milestone_index=index,
            status=MILESTONE_STATUSES[m["status"]],
            payout_usdc=usdc_display(m["payout"]) if m["payout"] else None,
            deadline_at=_time(m["deadline"]),
            submitted_at=_time(m["submittedAt"]),
            approved_at=_time(m["approvedAt"]),
            resolved_at=_time(m["resolvedAt"]),
            delivery_ref_hash=_hash(m["deliveryRefHash"]),
            latest_evidence_hash=_hash(m["latestEvidenceHash"]),
            attested_on_chain=bool(m["attested"]),
        )
        for index, m in enumerate(state["milestones"])
    ]
    return project, milestones
