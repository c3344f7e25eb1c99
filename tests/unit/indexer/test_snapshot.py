"""Snapshot rows: a project's decoded ``getProjectState()`` turned into read-model rows, as plain
function calls on literal structs (the indexer against a real chain is tests/integration/indexer).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast, get_args

import pytest

from marketplace.chain.enums import (
    BiddingAccess,
    DisputePhase,
    DisputeReason,
    MilestoneStatus,
    ProjectMode,
    ProjectStatus,
)
from marketplace.chain.project_state import ProjectState
from marketplace.indexer.snapshot import (
    BIDDING_ACCESS,
    DISPUTE_PHASES,
    MILESTONE_STATUSES,
    PROJECT_STATUSES,
    project_rows,
    usdc_display,
)
from marketplace.projects import models
from marketplace.types import ZERO_ADDRESS, ZERO_BYTES32

PROJECT = "0xAbCdEf0123456789aBcDeF0123456789ABCDEF01"
OWNER = "0x1111111111111111111111111111111111AaAaAa"
BUILDER = "0x2222222222222222222222222222222222BbBbBb"
WINNER = "0x3333333333333333333333333333333333CcCcCc"
HASH = "0x" + "Ab" * 32
CREATED = 1_700_000_000


def milestone(**values: Any) -> dict[str, Any]:
    m: dict[str, Any] = {
        "status": MilestoneStatus.PENDING,
        "payout": 0,
        "deadline": 0,
        "submittedAt": 0,
        "approvedAt": 0,
        "resolvedAt": 0,
        "deliveryRefHash": ZERO_BYTES32,
        "latestEvidenceHash": ZERO_BYTES32,
        "attested": False,
    }
    m.update(values)
    return m


def state(**values: Any) -> ProjectState:
    """A standard, open draft with every optional value at its zero."""
    s: dict[str, Any] = {
        "owner": OWNER,
        "status": ProjectStatus.DRAFT,
        "mode": ProjectMode.STANDARD,
        "biddingAccess": BiddingAccess.OPEN,
        "configHash": HASH,
        "selectedBuilder": ZERO_ADDRESS,
        "challengeWinner": ZERO_ADDRESS,
        "milestoneCount": 0,
        "bidBond": 0,
        "challengePayout": 0,
        "challengeSubmissionCount": 0,
        "challengeSubmissionWindowSeconds": 0,
        "challengeOwnerResponseWindowSeconds": 0,
        "challengeSubmissionDeadline": 0,
        "challengeOwnerResponseDeadline": 0,
        "challengeSelectionPhase": False,
        "disputePhase": DisputePhase.NONE,
        "disputeReason": DisputeReason.DEADLINE_MISSED,
        "disputeRaisedBy": ZERO_ADDRESS,
        "disputeMilestoneIndex": 0,
        "disputeOpenedAt": 0,
        "disputeVerdictSubmittedAt": 0,
        "disputeOwnerEvidenceHash": ZERO_BYTES32,
        "disputeWorkerEvidenceHash": ZERO_BYTES32,
        "createdAt": CREATED,
        "milestones": [],
    }
    s.update(values)
    # Only the members project_rows reads: the rest of the struct does not matter here.
    return cast(ProjectState, s)


def test_enum_labels_are_the_api_spellings() -> None:
    assert PROJECT_STATUSES == models.PROJECT_STATUSES
    assert set(MILESTONE_STATUSES) == set(get_args(models.MilestoneStatus))
    assert BIDDING_ACCESS == ("invite_only", "open")
    # Only the two active phases have a read-model value; a resolved dispute has none.
    assert DISPUTE_PHASES == (None, "challenged", "verifier_verdict", None, None)


@pytest.mark.parametrize(
    ("base_units", "display"), [(0, 0), (999_999, 0), (1_000_000, 1), (2_999_999, 2)]
)
def test_usdc_display_is_whole_tokens_rounded_down(base_units: int, display: int) -> None:
    assert usdc_display(base_units) == display


def test_standard_project_row() -> None:
    project, milestones = project_rows(
        PROJECT,
        state(
            status=ProjectStatus.BUILDING,
            biddingAccess=BiddingAccess.INVITE_ONLY,
            selectedBuilder=BUILDER,
            challengeWinner=WINNER,  # ignored outside challenge mode
            bidBond=2_500_000,
            challengePayout=9_000_000,  # ignored outside challenge mode
            challengeSubmissionCount=4,
            challengeSubmissionDeadline=CREATED + 10,
            milestoneCount=2,
        ),
        allowlist=[WINNER, BUILDER],
    )
    assert milestones == []
    assert project.project_address == PROJECT.lower()
    assert project.owner_address == OWNER.lower()
    assert project.config_hash == HASH.lower()
    assert (project.status, project.project_mode, project.bidding_access) == (
        "building",
        "standard",
        "invite_only",
    )
    assert project.selected_builder_address == BUILDER.lower()
    assert project.milestone_count == 2
    assert project.bid_bond_usdc == 2
    assert project.challenge_payout_usdc is None
    assert project.challenge_submission_count is None
    assert project.challenge_submission_deadline is None
    assert project.allowlist == sorted([WINNER.lower(), BUILDER.lower()])
    assert project.created_at == datetime.fromtimestamp(CREATED, UTC)
    assert project.dispute_phase is None


def test_zero_builder_means_none_selected() -> None:
    project, _ = project_rows(PROJECT, state(), allowlist=[])
    assert project.selected_builder_address is None
    assert project.allowlist == []
    assert project.bid_bond_usdc == 0  # a standard project's bond is a value, even when zero


def test_challenge_project_row() -> None:
    project, _ = project_rows(
        PROJECT,
        state(
            mode=ProjectMode.CHALLENGE,
            status=ProjectStatus.BUILDING,
            challengeWinner=WINNER,
            bidBond=5_000_000,  # ignored in challenge mode
            challengePayout=7_250_000,
            challengeSubmissionCount=0,
            challengeSubmissionWindowSeconds=604_800,
            challengeOwnerResponseWindowSeconds=0,
            challengeSubmissionDeadline=CREATED + 604_800,
            challengeOwnerResponseDeadline=0,
            challengeSelectionPhase=True,
        ),
        allowlist=[],
    )
    assert project.project_mode == "challenge"
    assert project.selected_builder_address == WINNER.lower()  # the winner is the worker
    assert project.bid_bond_usdc is None
    assert project.challenge_payout_usdc == 7
    assert project.challenge_submission_count == 0  # a count, not an optional value
    assert project.challenge_submission_window_seconds == 604_800
    assert project.challenge_owner_response_window_seconds is None
    assert project.challenge_submission_deadline == CREATED + 604_800
    assert project.challenge_owner_response_deadline is None
    assert project.challenge_selection_phase is True


def test_selected_builder_wins_over_challenge_winner() -> None:
    project, _ = project_rows(
        PROJECT,
        state(mode=ProjectMode.CHALLENGE, selectedBuilder=BUILDER, challengeWinner=WINNER),
        allowlist=[],
    )
    assert project.selected_builder_address == BUILDER.lower()


@pytest.mark.parametrize("phase", [DisputePhase.CHALLENGED, DisputePhase.VERIFIER_VERDICT])
def test_active_dispute_fields(phase: DisputePhase) -> None:
    project, _ = project_rows(
        PROJECT,
        state(
            status=ProjectStatus.DISPUTE,
            disputePhase=phase,
            disputeReason=DisputeReason.LOW_QUALITY,
            disputeRaisedBy=OWNER,
            disputeMilestoneIndex=1,
            disputeOpenedAt=CREATED + 5,
            disputeVerdictSubmittedAt=0,
            disputeOwnerEvidenceHash=HASH,
            disputeWorkerEvidenceHash=ZERO_BYTES32,
        ),
        allowlist=[],
    )
    assert project.dispute_phase == phase.name.lower()
    assert project.dispute_reason == "low_quality"
    assert project.dispute_raised_by == OWNER.lower()
    assert project.dispute_milestone_index == 1
    assert project.dispute_opened_at == CREATED + 5
    assert project.dispute_verdict_submitted_at is None
    assert project.dispute_owner_evidence_hash == HASH.lower()
    assert project.dispute_worker_evidence_hash is None


@pytest.mark.parametrize(
    "phase", [DisputePhase.NONE, DisputePhase.MULTISIG_OVERRIDE, DisputePhase.FINALIZED]
)
def test_no_active_dispute_clears_every_dispute_field(phase: DisputePhase) -> None:
    """What a resolved dispute leaves in the contract's storage does not reach the read model."""
    project, _ = project_rows(
        PROJECT,
        state(
            disputePhase=phase,
            disputeReason=DisputeReason.OWNER_INACTION,
            disputeRaisedBy=BUILDER,
            disputeMilestoneIndex=3,
            disputeOpenedAt=CREATED,
            disputeVerdictSubmittedAt=CREATED + 1,
            disputeOwnerEvidenceHash=HASH,
            disputeWorkerEvidenceHash=HASH,
        ),
        allowlist=[],
    )
    assert (
        project.dispute_phase,
        project.dispute_reason,
        project.dispute_raised_by,
        project.dispute_milestone_index,
        project.dispute_opened_at,
        project.dispute_verdict_submitted_at,
        project.dispute_owner_evidence_hash,
        project.dispute_worker_evidence_hash,
    ) == (None,) * 8


def test_milestone_rows() -> None:
    _, milestones = project_rows(
        PROJECT,
        state(
            milestoneCount=2,
            milestones=[
                milestone(),
                milestone(
                    status=MilestoneStatus.ATTESTED,
                    payout=1_500_000,
                    deadline=CREATED + 1,
                    submittedAt=CREATED + 2,
                    approvedAt=CREATED + 3,
                    resolvedAt=CREATED + 4,
                    deliveryRefHash=HASH,
                    latestEvidenceHash=HASH,
                    attested=True,
                ),
            ],
        ),
        allowlist=[],
    )
    first, second = milestones
    assert (first.project_address, first.milestone_index, first.status) == (
        PROJECT.lower(),
        0,
        "pending",
    )
    # Zero values are absent.
    assert first.payout_usdc is None
    assert (first.deadline_at, first.submitted_at, first.approved_at, first.resolved_at) == (
        None,
    ) * 4
    assert first.delivery_ref_hash is None and first.latest_evidence_hash is None
    assert first.attested_on_chain is False

    def at(offset: int) -> datetime:
        return datetime.fromtimestamp(CREATED + offset, UTC)

    assert second.milestone_index == 1
    assert second.status == "attested"
    assert second.payout_usdc == 1
    assert (second.deadline_at, second.submitted_at, second.approved_at, second.resolved_at) == (
        at(1),
        at(2),
        at(3),
        at(4),
    )
    assert second.delivery_ref_hash == second.latest_evidence_hash == HASH.lower()
    assert second.attested_on_chain is True
