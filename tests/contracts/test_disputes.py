"""Dispute flow (spec section 3 "Dispute flow" table), one test group per row, plus the 48 h
and 5 day windows on both sides of each boundary and the verifier signature checks."""

from __future__ import annotations

from typing import Any

import pytest
from web3.contract import Contract

from marketplace_devstack.devnet.deploy import ANVIL_PRIVATE_KEYS, DEV_VERIFIER_PRIVATE_KEY
from tests.contracts.helpers import (
    ANONYMOUS,
    DAY,
    HOUR,
    USDC,
    ZERO_HASH,
    Chain,
    DisputeOutcome,
    DisputePhase,
    DisputeReason,
    MilestoneStatus,
    ProjectStatus,
    h,
    sign_attestation,
)

BOND = 50 * USDC
P0, P1 = 300 * USDC, 700 * USDC
OVERRIDE_WINDOW = 48 * HOUR
ESCAPE_TIMEOUT = 5 * DAY
LOW_QUALITY = int(DisputeReason.LOW_QUALITY)
DEADLINE_MISSED = int(DisputeReason.DEADLINE_MISSED)
OWNER_INACTION = int(DisputeReason.OWNER_INACTION)
APPROVE, REJECT = int(DisputeOutcome.APPROVE), int(DisputeOutcome.REJECT)


def _fee(amount: int) -> int:
    return amount * 250 // 10_000


def _who(chain: Chain, caller: str) -> str:
    return ANONYMOUS if caller == "anonymous" else getattr(chain.a, caller)


def _attest_fn(
    chain: Chain,
    project: Contract,
    *,
    index: int = 0,
    passes: bool = True,
    key: str = DEV_VERIFIER_PRIVATE_KEY,
    deadline: int | None = None,
    nonce: int | None = None,
    chain_id: int | None = None,
    signed_chain_id: int | None = None,
    signed_project: str | None = None,
    signed_passes: bool | None = None,
    signature: bytes | None = None,
) -> Any:
    deadline = deadline if deadline is not None else chain.now() + HOUR
    nonce = nonce if nonce is not None else chain.nonce()
    chain_id = chain_id if chain_id is not None else chain.chain_id
    if signature is None:
        signature = sign_attestation(
            key,
            chain_id=chain.chain_id,
            registry=chain.registry.address,
            project=signed_project or project.address,
            milestone_index=index,
            passes=passes if signed_passes is None else signed_passes,
            evidence_hash=h("verifier-evidence"),
            deadline=deadline,
            nonce=nonce,
            signed_chain_id=signed_chain_id if signed_chain_id is not None else chain_id,
        )
    return project.functions.attestMilestone(
        index, passes, h("verifier-evidence"), deadline, nonce, chain_id, signature
    )


@pytest.fixture
def submitted(chain: Chain) -> Contract:
    """Building project, milestone 0 submitted by the worker."""
    project = chain.building()
    chain.submit(project, 0)
    return project


@pytest.fixture
def challenged(chain: Chain, submitted: Contract) -> Contract:
    """LowQuality dispute raised by the owner on milestone 0."""
    chain.ok(chain.a.owner, submitted.functions.raiseDispute(0, LOW_QUALITY, h("reason")))
    return submitted


@pytest.fixture
def verdict(chain: Chain, challenged: Contract) -> Contract:
    """Verifier verdict (passes) submitted on milestone 0."""
    chain.attest(challenged, 0, True)
    return challenged


# ================================================ row: raiseDispute -> Challenged


def test_raise_low_quality_records_dispute(chain: Chain, submitted: Contract) -> None:
    a = chain.a
    receipt = chain.ok(a.owner, submitted.functions.raiseDispute(0, LOW_QUALITY, h("why")))
    ts = chain.now()
    assert chain.events(receipt, submitted, "DisputeRaised") == [
        {
            "milestoneIndex": 0,
            "reason": DisputeReason.LOW_QUALITY,
            "raisedBy": a.owner,
            "reasonHash": h("why"),
            "openedAt": ts,
        }
    ]
    state = chain.state(submitted)
    assert state["status"] == ProjectStatus.DISPUTE
    assert state["disputePhase"] == DisputePhase.CHALLENGED
    assert state["disputeReason"] == DisputeReason.LOW_QUALITY
    assert state["disputeRaisedBy"] == a.owner
    assert state["disputeMilestoneIndex"] == 0
    assert state["disputeOpenedAt"] == ts
    assert state["disputeReasonHash"] == h("why")
    assert state["milestones"][0]["status"] == MilestoneStatus.DISPUTED
    # Work stops while in dispute.
    chain.reverts(a.owner, submitted.functions.approveMilestone(0), "WrongStatus")
    chain.reverts(a.owner, submitted.functions.raiseDispute(0, LOW_QUALITY, h("x")), "WrongStatus")


def test_low_quality_needs_submission(chain: Chain) -> None:
    project = chain.building()
    chain.reverts(
        chain.a.owner,
        project.functions.raiseDispute(0, LOW_QUALITY, h("r")),
        "WrongMilestoneStatus",
        args=(0, MilestoneStatus.PENDING),
    )


@pytest.mark.parametrize("caller", ["worker", "stranger", "multisig", "anonymous"])
def test_low_quality_owner_only(chain: Chain, submitted: Contract, caller: str) -> None:
    fn = submitted.functions.raiseDispute(0, LOW_QUALITY, h("r"))
    chain.reverts(_who(chain, caller), fn, "NotOwner")


def test_deadline_missed_boundary(chain: Chain) -> None:
    a = chain.a
    project = chain.building()
    deadline = chain.state(project)["milestones"][0]["deadline"]
    fn = project.functions.raiseDispute(0, DEADLINE_MISSED, h("late"))
    chain.reverts(a.owner, fn, "DeadlineNotPassed", at=deadline, args=(deadline,))
    chain.ok(a.owner, fn, at=deadline + 1)
    state = chain.state(project)
    assert state["disputeReason"] == DisputeReason.DEADLINE_MISSED
    assert state["disputeOpenedAt"] == deadline + 1
    assert state["milestones"][0]["status"] == MilestoneStatus.DISPUTED


@pytest.mark.parametrize("caller", ["worker", "stranger", "anonymous"])
def test_deadline_missed_owner_only(chain: Chain, caller: str) -> None:
    project = chain.building()
    deadline = chain.state(project)["milestones"][0]["deadline"]
    fn = project.functions.raiseDispute(0, DEADLINE_MISSED, h("late"))
    chain.reverts(_who(chain, caller), fn, "NotOwner", at=deadline + 1)


def test_deadline_missed_not_after_submission(chain: Chain) -> None:
    project = chain.building()
    deadline = chain.state(project)["milestones"][0]["deadline"]
    chain.submit(project, 0)
    chain.reverts(
        chain.a.owner,
        project.functions.raiseDispute(0, DEADLINE_MISSED, h("late")),
        "WrongMilestoneStatus",
        at=deadline + 1,
    )


def test_owner_inaction_boundary(chain: Chain, submitted: Contract) -> None:
    a = chain.a
    submitted_at = chain.state(submitted)["milestones"][0]["submittedAt"]
    fn = submitted.functions.raiseDispute(0, OWNER_INACTION, h("silent"))
    available = submitted_at + 48 * HOUR
    chain.reverts(
        a.worker, fn, "OwnerInactionPeriodNotElapsed", at=available - 1, args=(available,)
    )
    chain.ok(a.worker, fn, at=available)
    state = chain.state(submitted)
    assert state["disputeRaisedBy"] == a.worker
    assert state["disputeReason"] == DisputeReason.OWNER_INACTION


@pytest.mark.parametrize("caller", ["owner", "bidder2", "stranger", "anonymous"])
def test_owner_inaction_worker_only(chain: Chain, submitted: Contract, caller: str) -> None:
    submitted_at = chain.state(submitted)["milestones"][0]["submittedAt"]
    fn = submitted.functions.raiseDispute(0, OWNER_INACTION, h("silent"))
    chain.reverts(_who(chain, caller), fn, "NotSelectedBuilder", at=submitted_at + 3 * DAY)


def test_owner_inaction_needs_submission(chain: Chain) -> None:
    project = chain.building()
    fn = project.functions.raiseDispute(0, OWNER_INACTION, h("silent"))
    chain.reverts(chain.a.worker, fn, "WrongMilestoneStatus", at=chain.now() + 3 * DAY)


def test_raise_dispute_validation(chain: Chain, submitted: Contract) -> None:
    a = chain.a
    fns = submitted.functions
    chain.reverts(a.owner, fns.raiseDispute(0, 3, h("r")), "InvalidDisputeReason", args=(3,))
    chain.reverts(a.owner, fns.raiseDispute(1, LOW_QUALITY, h("r")), "InvalidMilestoneIndex")
    bidding = chain.open_standard()
    chain.reverts(a.owner, bidding.functions.raiseDispute(0, LOW_QUALITY, h("r")), "WrongStatus")


# ============================================ row: submitDisputeEvidence (Challenged)


def test_evidence_once_per_party(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    fns = challenged.functions
    receipt = chain.ok(a.owner, fns.submitDisputeEvidence(0, h("owner-ev")))
    assert chain.events(receipt, challenged, "DisputeEvidenceSubmitted") == [
        {"milestoneIndex": 0, "submitter": a.owner, "byOwner": True, "evidenceHash": h("owner-ev")}
    ]
    chain.reverts(a.owner, fns.submitDisputeEvidence(0, h("again")), "EvidenceAlreadySubmitted")
    chain.ok(a.worker, fns.submitDisputeEvidence(0, h("worker-ev")))
    chain.reverts(a.worker, fns.submitDisputeEvidence(0, h("again")), "EvidenceAlreadySubmitted")
    state = chain.state(challenged)
    assert state["disputeOwnerEvidenceHash"] == h("owner-ev")
    assert state["disputeWorkerEvidenceHash"] == h("worker-ev")
    assert state["disputePhase"] == DisputePhase.CHALLENGED
    assert state["milestones"][0]["latestEvidenceHash"] == h("worker-ev")


def test_evidence_validation(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    fns = challenged.functions
    chain.reverts(a.owner, fns.submitDisputeEvidence(0, ZERO_HASH), "ZeroHash")
    chain.reverts(a.owner, fns.submitDisputeEvidence(1, h("e")), "InvalidMilestoneIndex")
    for caller in (a.stranger, a.multisig, a.verifier, a.bidder2, ANONYMOUS):
        chain.reverts(caller, fns.submitDisputeEvidence(0, h("e")), "NotDisputeParty")


def test_evidence_only_in_challenged_phase(chain: Chain, verdict: Contract) -> None:
    chain.reverts(
        chain.a.owner,
        verdict.functions.submitDisputeEvidence(0, h("late")),
        "WrongDisputePhase",
        args=(DisputePhase.VERIFIER_VERDICT,),
    )
    building = chain.building()
    chain.reverts(chain.a.owner, building.functions.submitDisputeEvidence(0, h("e")), "WrongStatus")


# ====================================================== row: attestMilestone -> VerifierVerdict


def test_attestation_moves_to_verifier_verdict(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    nonce = chain.nonce()
    fn = _attest_fn(chain, challenged, passes=False, nonce=nonce)
    receipt = chain.ok(a.stranger, fn)  # anyone may relay
    ts = chain.now()
    assert chain.events(receipt, challenged, "MilestoneAttested") == [
        {
            "milestoneIndex": 0,
            "passes": False,
            "evidenceHash": h("verifier-evidence"),
            "signer": a.verifier,
            "nonce": nonce,
            "verdictSubmittedAt": ts,
        }
    ]
    assert chain.events(receipt, chain.registry, "VerifierNonceUsed") == [
        {"signer": a.verifier, "nonce": nonce, "project": challenged.address}
    ]
    assert chain.registry.functions.isNonceUsed(a.verifier, nonce).call()
    state = chain.state(challenged)
    assert state["disputePhase"] == DisputePhase.VERIFIER_VERDICT
    assert state["disputeVerdictSubmittedAt"] == ts
    assert state["disputeVerdictPasses"] is False
    m = state["milestones"][0]
    assert m["status"] == MilestoneStatus.ATTESTED
    assert m["attested"] is True
    assert m["latestEvidenceHash"] == h("verifier-evidence")
    # A second verdict is not accepted.
    chain.reverts(a.stranger, _attest_fn(chain, challenged), "WrongDisputePhase")


def test_attestation_wrong_signer(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    fn = _attest_fn(chain, challenged, key=ANVIL_PRIVATE_KEYS[8])
    chain.reverts(a.stranger, fn, "WrongSigner", args=(a.stranger, a.verifier))


def test_attestation_tampered_fields(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    other = chain.building()
    # Signed for another project / with another verdict: recovers a different address.
    chain.reverts(
        a.stranger, _attest_fn(chain, challenged, signed_project=other.address), "WrongSigner"
    )
    chain.reverts(
        a.stranger, _attest_fn(chain, challenged, passes=True, signed_passes=False), "WrongSigner"
    )


def test_attestation_deadline_boundary(chain: Chain, challenged: Contract) -> None:
    at = chain.now() + 100
    chain.reverts(
        chain.a.stranger,
        _attest_fn(chain, challenged, deadline=at - 1),
        "SignatureExpired",
        at=at,
        args=(at - 1,),
    )
    chain.ok(chain.a.stranger, _attest_fn(chain, challenged, deadline=at), at=at)


def test_attestation_replayed_nonce(chain: Chain, challenged: Contract) -> None:
    """Nonces are per signer across all projects (tracked in the registry)."""
    a = chain.a
    nonce = chain.nonce()
    chain.ok(a.stranger, _attest_fn(chain, challenged, nonce=nonce))
    second = chain.building()
    chain.submit(second, 0)
    chain.ok(a.owner, second.functions.raiseDispute(0, LOW_QUALITY, h("r")))
    chain.reverts(
        a.stranger,
        _attest_fn(chain, second, nonce=nonce),
        "NonceAlreadyUsed",
        args=(a.verifier, nonce),
    )
    chain.ok(a.stranger, _attest_fn(chain, second))


def test_attestation_wrong_chain_id(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    chain.reverts(a.stranger, _attest_fn(chain, challenged, chain_id=1), "WrongChainId", args=(1,))
    # Signed for chain 1 but submitted claiming this chain: the signature does not match.
    chain.reverts(a.stranger, _attest_fn(chain, challenged, signed_chain_id=1), "WrongSigner")


def test_attestation_malformed_signature(chain: Chain, challenged: Contract) -> None:
    good = bytes(_attest_fn(chain, challenged).args[-1])
    chain.reverts(
        chain.a.stranger, _attest_fn(chain, challenged, signature=good[:64]), "InvalidSignature"
    )
    n = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
    s = int.from_bytes(good[32:64], "big")
    high_s = good[:32] + (n - s).to_bytes(32, "big") + bytes([55 - good[64]])  # 27 <-> 28
    chain.reverts(
        chain.a.stranger, _attest_fn(chain, challenged, signature=high_s), "InvalidSignature"
    )


def test_attestation_uses_snapshotted_signer(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    chain.ok(a.admin, chain.registry.functions.setVerifierSigner(a.stranger))
    chain.reverts(
        a.stranger, _attest_fn(chain, challenged, key=ANVIL_PRIVATE_KEYS[8]), "WrongSigner"
    )
    chain.ok(a.stranger, _attest_fn(chain, challenged))


def test_attestation_only_for_disputed_milestone(chain: Chain, submitted: Contract) -> None:
    chain.reverts(chain.a.stranger, _attest_fn(chain, submitted), "WrongStatus")


# =============================== rows: resolveDispute (VerifierVerdict window / any phase)


@pytest.mark.parametrize(
    "caller", ["owner", "worker", "verifier", "admin", "treasury", "stranger", "anonymous"]
)
def test_resolve_multisig_only(chain: Chain, challenged: Contract, caller: str) -> None:
    fn = challenged.functions.resolveDispute(APPROVE, 0)
    chain.reverts(_who(chain, caller), fn, "NotDisputeMultisig")


def test_resolve_in_verdict_window_boundary(chain: Chain, verdict: Contract) -> None:
    a = chain.a
    verdict_at = chain.state(verdict)["disputeVerdictSubmittedAt"]
    closes = verdict_at + OVERRIDE_WINDOW
    fn = verdict.functions.resolveDispute(REJECT, 0)
    chain.reverts(a.multisig, fn, "OverrideWindowClosed", at=closes + 1, args=(closes,))
    receipt = chain.ok(a.multisig, fn, at=closes)
    assert chain.events(receipt, verdict, "DisputeResolved") == [
        {
            "milestoneIndex": 0,
            "outcome": DisputeOutcome.REJECT,
            "slashAmount": 0,
            "multisig": a.multisig,
        }
    ]
    state = chain.state(verdict)
    assert state["disputePhase"] == DisputePhase.MULTISIG_OVERRIDE
    assert state["status"] == ProjectStatus.FAILED  # verifier said pass; multisig overrode
    assert state["milestones"][0]["status"] == MilestoneStatus.REJECTED
    assert state["milestones"][0]["resolvedAt"] == closes


def test_resolve_in_challenged_any_time(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    opened = chain.state(challenged)["disputeOpenedAt"]
    chain.ok(a.multisig, challenged.functions.resolveDispute(APPROVE, 0), at=opened + 30 * DAY)
    state = chain.state(challenged)
    assert state["disputePhase"] == DisputePhase.MULTISIG_OVERRIDE
    assert state["status"] == ProjectStatus.BUILDING
    assert state["milestones"][0]["status"] == MilestoneStatus.APPROVED
    assert state["currentMilestone"] == 1
    assert chain.balance(a.worker) == P0 - _fee(P0)
    # The worker continues with the next milestone.
    chain.submit(chain.project(challenged.address), 1)


def test_resolve_approve_last_milestone_completes(chain: Chain) -> None:
    a = chain.a
    project = chain.building(payouts=[P0], durations=[DAY])
    chain.dispute(project, 0)
    receipt = chain.ok(a.multisig, project.functions.resolveDispute(APPROVE, 10 * USDC))
    assert chain.state(project)["status"] == ProjectStatus.COMPLETE
    assert chain.events(receipt, project, "BondSlashed") == [
        {"builder": a.worker, "amount": 10 * USDC, "recipient": a.owner}
    ]
    assert chain.balance(a.worker) == P0 - _fee(P0) + BOND - 10 * USDC
    assert chain.balance(a.owner) == 10 * USDC
    assert chain.escrow_balance(project) == 0


def test_resolve_reject_with_slash_fails_and_refunds(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    receipt = chain.ok(a.multisig, challenged.functions.resolveDispute(REJECT, BOND))
    state = chain.state(challenged)
    assert state["status"] == ProjectStatus.FAILED
    assert state["selectedBuilderBond"] == 0
    assert chain.balance(a.owner) == P0 + P1 + BOND  # refund + whole slashed bond
    assert chain.balance(a.worker) == 0
    assert chain.escrow_balance(challenged) == 0
    names = chain.event_names(receipt, challenged)
    assert names.index("DisputeResolved") < names.index("ProjectFailed")
    assert "BondReturned" not in names
    assert chain.events(receipt, challenged, "ProjectFailed") == [
        {"failedAt": chain.now(), "ownerRefund": P0 + P1}
    ]


def test_resolve_validation(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    fns = challenged.functions
    chain.reverts(a.multisig, fns.resolveDispute(0, 0), "InvalidOutcome", args=(0,))
    chain.reverts(a.multisig, fns.resolveDispute(3, 0), "InvalidOutcome", args=(3,))
    chain.reverts(
        a.multisig, fns.resolveDispute(APPROVE, BOND + 1), "SlashExceedsBond", args=(BOND + 1, BOND)
    )
    chain.ok(a.multisig, fns.resolveDispute(APPROVE, 0))
    chain.reverts(a.multisig, fns.resolveDispute(APPROVE, 0), "WrongStatus")
    chain.reverts(a.stranger, fns.finalizeDispute(), "WrongStatus")


def test_resolve_uses_snapshotted_multisig(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    chain.ok(a.admin, chain.registry.functions.setDisputeMultisig(a.stranger))
    chain.reverts(a.stranger, challenged.functions.resolveDispute(APPROVE, 0), "NotDisputeMultisig")
    chain.ok(a.multisig, challenged.functions.resolveDispute(APPROVE, 0))


# ====================================== row: finalizeDispute after the 48 h window


def test_finalize_passing_verdict_boundary(chain: Chain, verdict: Contract) -> None:
    a = chain.a
    verdict_at = chain.state(verdict)["disputeVerdictSubmittedAt"]
    closes = verdict_at + OVERRIDE_WINDOW
    fn = verdict.functions.finalizeDispute()
    chain.reverts(a.stranger, fn, "OverrideWindowOpen", at=closes, args=(closes,))
    receipt = chain.ok(a.stranger, fn, at=closes + 1)
    assert chain.events(receipt, verdict, "DisputeFinalized") == [
        {
            "milestoneIndex": 0,
            "fromPhase": DisputePhase.VERIFIER_VERDICT,
            "milestoneApproved": True,
            "projectFailed": False,
        }
    ]
    state = chain.state(verdict)
    assert state["disputePhase"] == DisputePhase.FINALIZED
    assert state["status"] == ProjectStatus.BUILDING
    m = state["milestones"][0]
    assert m["status"] == MilestoneStatus.APPROVED
    assert m["attested"] is True
    assert m["approvedAt"] == closes + 1
    assert chain.balance(a.worker) == P0 - _fee(P0)
    assert "BondSlashed" not in chain.event_names(receipt, verdict)
    # Override is no longer possible.
    chain.reverts(a.multisig, verdict.functions.resolveDispute(REJECT, BOND), "WrongStatus")


def test_finalize_failing_verdict_fails_project(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    chain.attest(challenged, 0, False)
    verdict_at = chain.state(challenged)["disputeVerdictSubmittedAt"]
    receipt = chain.ok(
        a.stranger, challenged.functions.finalizeDispute(), at=verdict_at + OVERRIDE_WINDOW + 1
    )
    state = chain.state(challenged)
    assert state["status"] == ProjectStatus.FAILED
    assert state["disputePhase"] == DisputePhase.FINALIZED
    assert state["milestones"][0]["status"] == MilestoneStatus.REJECTED
    # No slashing in finalize: the owner gets the unpaid milestones, the worker the whole bond.
    assert chain.balance(a.owner) == P0 + P1
    assert chain.balance(a.worker) == BOND
    assert chain.escrow_balance(challenged) == 0
    assert chain.events(receipt, challenged, "BondReturned") == [
        {"builder": a.worker, "amount": BOND}
    ]


def test_finalize_after_approved_milestone_refunds_only_remaining(chain: Chain) -> None:
    a = chain.a
    project = chain.building()
    chain.submit(project, 0)
    chain.ok(a.owner, project.functions.approveMilestone(0))
    chain.dispute(project, 1)
    chain.attest(project, 1, False)
    at = chain.state(project)["disputeVerdictSubmittedAt"] + OVERRIDE_WINDOW + 1
    chain.ok(a.stranger, project.functions.finalizeDispute(), at=at)
    assert chain.balance(a.owner) == P1
    assert chain.balance(a.worker) == P0 - _fee(P0) + BOND


# =========================================== row: finalizeDispute in Challenged (5 days)


def test_finalize_challenged_escape_boundary(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    opened = chain.state(challenged)["disputeOpenedAt"]
    available = opened + ESCAPE_TIMEOUT
    fn = challenged.functions.finalizeDispute()
    chain.reverts(a.stranger, fn, "EscapeTimeoutNotReached", at=available - 1, args=(available,))
    # The simulated revert matches a real mined transaction at that timestamp.
    assert chain.send(a.stranger, fn, at=available - 1)["status"] == 0
    receipt = chain.ok(a.stranger, fn, at=available)
    assert chain.events(receipt, challenged, "DisputeFinalized") == [
        {
            "milestoneIndex": 0,
            "fromPhase": DisputePhase.CHALLENGED,
            "milestoneApproved": False,
            "projectFailed": True,
        }
    ]
    state = chain.state(challenged)
    assert state["status"] == ProjectStatus.FAILED
    assert state["disputePhase"] == DisputePhase.FINALIZED
    assert state["milestones"][0]["status"] == MilestoneStatus.DISPUTED
    assert state["milestones"][0]["resolvedAt"] == available
    assert chain.balance(a.owner) == P0 + P1
    assert chain.balance(a.worker) == BOND
    assert chain.escrow_balance(challenged) == 0
    # Non-selected bidders can still reclaim after failure (none here), the worker cannot twice.
    chain.reverts(a.worker, challenged.functions.reclaimBond(), "SelectedBuilderBond")


def test_finalize_not_before_any_dispute(chain: Chain, submitted: Contract) -> None:
    chain.reverts(chain.a.stranger, submitted.functions.finalizeDispute(), "WrongStatus")


def test_second_dispute_resets_dispute_fields(chain: Chain, challenged: Contract) -> None:
    a = chain.a
    chain.ok(a.owner, challenged.functions.submitDisputeEvidence(0, h("ev")))
    chain.ok(a.multisig, challenged.functions.resolveDispute(APPROVE, 0))
    chain.submit(challenged, 1)
    chain.ok(a.owner, challenged.functions.raiseDispute(1, LOW_QUALITY, h("r2")))
    state = chain.state(challenged)
    assert state["disputeMilestoneIndex"] == 1
    assert state["disputePhase"] == DisputePhase.CHALLENGED
    assert state["disputeOwnerEvidenceHash"] == ZERO_HASH
    assert state["disputeVerdictSubmittedAt"] == 0
    chain.ok(a.owner, challenged.functions.submitDisputeEvidence(1, h("ev2")))


def test_non_selected_bonds_survive_failure(chain: Chain) -> None:
    a = chain.a
    project = chain.open_standard(bid_bond=BOND)
    chain.post_bid(project, a.worker, [P0, P1], [DAY, DAY])
    chain.post_bid(project, a.bidder2, [P0, P1], [DAY, DAY])
    chain.select(project, a.worker)
    chain.dispute(project, 0)
    chain.ok(a.multisig, project.functions.resolveDispute(REJECT, 0))
    assert chain.escrow_balance(project) == BOND  # bidder2's bond stays reclaimable
    chain.ok(a.bidder2, project.functions.reclaimBond())
    assert chain.balance(a.bidder2) == BOND
    assert chain.escrow_balance(project) == 0
