"""Challenge mode (spec section 3 "Challenge-mode runtime" table), one group per row, with the
submission, owner-response and fallback windows checked on both sides of each boundary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import rlp
from eth_utils import keccak, to_checksum_address
from web3.contract import Contract

from marketplace_devstack.devnet.deploy import ANVIL_PRIVATE_KEYS, DEV_VERIFIER_PRIVATE_KEY
from tests.contracts.helpers import (
    ANONYMOUS,
    DAY,
    HOUR,
    USDC,
    ZERO_ADDRESS,
    ZERO_HASH,
    BiddingAccess,
    Chain,
    ProjectMode,
    ProjectStatus,
    h,
    ranked_submitters_hash,
    sign_fallback,
)

PAYOUT = 1_000 * USDC
FEE = PAYOUT * 250 // 10_000
SUBMISSION_WINDOW = 3 * DAY
RESPONSE_WINDOW = 2 * DAY
FALLBACK_WINDOW = 5 * DAY


def _who(chain: Chain, caller: str) -> str:
    return ANONYMOUS if caller == "anonymous" else getattr(chain.a, caller)


def _deadlines(chain: Chain, project: Contract) -> tuple[int, int]:
    state = chain.state(project)
    return state["challengeSubmissionDeadline"], state["challengeOwnerResponseDeadline"]


def _next_project_address(chain: Chain) -> str:
    nonce = chain.w3.eth.get_transaction_count(chain.registry.address)
    raw = keccak(rlp.encode([bytes.fromhex(chain.registry.address[2:]), nonce]))[12:]
    return to_checksum_address(raw)


def _submit(chain: Chain, project: Contract, who: str, label: str = "s", **kw: Any) -> None:
    chain.ok(who, project.functions.submitChallengeSubmission(h(f"{label}-{who}")), **kw)


def _fallback_fn(
    chain: Chain,
    project: Contract,
    ranked: Sequence[str],
    *,
    key: str = DEV_VERIFIER_PRIVATE_KEY,
    deadline: int | None = None,
    nonce: int | None = None,
    chain_id: int | None = None,
    signed_chain_id: int | None = None,
    signed_ranked: Sequence[str] | None = None,
    signature: bytes | None = None,
    at: int | None = None,
) -> Any:
    deadline = deadline if deadline is not None else (at or chain.now()) + HOUR
    nonce = nonce if nonce is not None else chain.nonce()
    chain_id = chain_id if chain_id is not None else chain.chain_id
    if signature is None:
        signature = sign_fallback(
            key,
            chain_id=chain.chain_id,
            registry=chain.registry.address,
            project=project.address,
            ranked=list(signed_ranked if signed_ranked is not None else ranked),
            ranking_hash=h("ranking"),
            deadline=deadline,
            nonce=nonce,
            signed_chain_id=signed_chain_id if signed_chain_id is not None else chain_id,
        )
    return project.functions.settleChallengeFallback(
        list(ranked), h("ranking"), deadline, nonce, chain_id, signature
    )


@pytest.fixture
def challenge(chain: Chain) -> Contract:
    return chain.create_challenge(
        payout=PAYOUT, submission_window=SUBMISSION_WINDOW, response_window=RESPONSE_WINDOW
    )


@pytest.fixture
def with_submissions(chain: Chain, challenge: Contract) -> Contract:
    """Challenge with submissions from the worker and bidder2."""
    _submit(chain, challenge, chain.a.worker)
    _submit(chain, challenge, chain.a.bidder2)
    return challenge


# ====================================================== row: open submission window


def test_create_and_open_atomically(chain: Chain) -> None:
    a = chain.a
    chain.fund_and_approve(a.owner, PAYOUT)
    receipt = chain.ok(
        a.owner,
        chain.registry.functions.createChallengeProjectAndOpen(
            h("cfg"), PAYOUT, SUBMISSION_WINDOW, RESPONSE_WINDOW
        ),
    )
    ts = chain.now()
    (created,) = chain.events(receipt, chain.registry, "ProjectCreated")
    assert created["owner"] == a.owner and created["configHash"] == h("cfg")
    assert created["timestamp"] == ts
    project = chain.project(created["project"])
    assert chain.event_names(receipt, project) == [
        "ProjectInitialized",
        "StatusChanged",
        "BiddingOpened",
    ]
    (opened,) = chain.events(receipt, project, "BiddingOpened")
    assert opened["fundedAmount"] == PAYOUT
    assert opened["challengeSubmissionDeadline"] == ts + SUBMISSION_WINDOW
    assert opened["challengeOwnerResponseDeadline"] == ts + SUBMISSION_WINDOW + RESPONSE_WINDOW
    assert chain.events(receipt, chain.escrow, "Deposited") == [
        {"project": project.address, "payer": a.owner, "amount": PAYOUT}
    ]
    state = chain.state(project)
    assert state["status"] == ProjectStatus.BIDDING
    assert state["mode"] == ProjectMode.CHALLENGE
    assert state["biddingAccess"] == BiddingAccess.OPEN
    assert state["challengePayout"] == PAYOUT
    assert state["challengeSubmissionWindowSeconds"] == SUBMISSION_WINDOW
    assert state["challengeOwnerResponseWindowSeconds"] == RESPONSE_WINDOW
    assert state["challengeSubmissionDeadline"] == ts + SUBMISSION_WINDOW
    assert state["challengeOwnerResponseDeadline"] == ts + SUBMISSION_WINDOW + RESPONSE_WINDOW
    assert state["challengeSubmissionCount"] == 0
    assert state["milestoneCount"] == 0 and state["milestones"] == []
    assert state["escrowBalance"] == PAYOUT
    assert state["verifierSigner"] == a.verifier and state["feeRateBps"] == 250
    assert chain.balance(a.owner) == 0


def test_create_and_open_needs_escrow_as_spender(chain: Chain) -> None:
    a = chain.a
    chain.mint(a.owner, PAYOUT)
    predicted = _next_project_address(chain)
    fn = chain.registry.functions.createChallengeProjectAndOpen(
        h("cfg"), PAYOUT, SUBMISSION_WINDOW, RESPONSE_WINDOW
    )
    for wrong_spender in (chain.registry.address, predicted):
        chain.ok(a.owner, chain.usdc.functions.approve(wrong_spender, PAYOUT))
        chain.reverts(
            a.owner, fn, "ERC20InsufficientAllowance", args=(chain.escrow.address, 0, PAYOUT)
        )
    chain.ok(a.owner, chain.usdc.functions.approve(chain.escrow.address, PAYOUT))
    receipt = chain.ok(a.owner, fn)
    assert chain.created_project(receipt).address == predicted


def test_create_and_open_with_permit(chain: Chain) -> None:
    a = chain.a
    chain.mint(a.owner, PAYOUT)
    reg = chain.registry.functions

    def fn(permit: tuple[int, int, bytes, bytes]) -> Any:
        return reg.createChallengeProjectAndOpenWithPermit(
            h("cfg"), PAYOUT, SUBMISSION_WINDOW, RESPONSE_WINDOW, *permit
        )

    chain.reverts(a.owner, fn(chain.permit(a.owner, PAYOUT - 1)), "ERC20InsufficientAllowance")
    chain.reverts(
        a.owner,
        fn(chain.permit(a.owner, PAYOUT, spender=chain.registry.address)),
        "ERC20InsufficientAllowance",
    )
    chain.reverts(
        a.owner,
        fn(chain.permit(a.owner, PAYOUT, spender=_next_project_address(chain))),
        "ERC20InsufficientAllowance",
    )
    receipt = chain.ok(a.owner, fn(chain.permit(a.owner, PAYOUT)))
    project = chain.created_project(receipt)
    assert chain.escrow_balance(project) == PAYOUT
    assert chain.state(project)["status"] == ProjectStatus.BIDDING
    assert chain.usdc.functions.allowance(a.owner, chain.escrow.address).call() == 0


@pytest.mark.parametrize(
    ("payout", "submission", "response", "error"),
    [
        (0, DAY, DAY, "InvalidAmount"),
        (PAYOUT, 0, DAY, "InvalidWindow"),
        (PAYOUT, DAY, 0, "InvalidWindow"),
        (PAYOUT, 366 * DAY, DAY, "InvalidWindow"),
    ],
)
def test_create_challenge_validation(
    chain: Chain, payout: int, submission: int, response: int, error: str
) -> None:
    chain.fund_and_approve(chain.a.owner, PAYOUT)
    fn = chain.registry.functions.createChallengeProjectAndOpen(
        h("cfg"), payout, submission, response
    )
    chain.reverts(chain.a.owner, fn, error)


def test_challenge_draft_then_open_bidding(chain: Chain) -> None:
    a = chain.a
    receipt = chain.ok(
        a.owner,
        chain.registry.functions.createChallengeProject(
            h("cfg"), PAYOUT, SUBMISSION_WINDOW, RESPONSE_WINDOW
        ),
    )
    project = chain.created_project(receipt)
    state = chain.state(project)
    assert state["status"] == ProjectStatus.DRAFT
    assert state["challengeSubmissionDeadline"] == 0
    assert chain.escrow_balance(project) == 0
    chain.reverts(a.worker, project.functions.submitChallengeSubmission(h("s")), "WrongStatus")
    for caller in (a.stranger, ANONYMOUS):
        chain.reverts(caller, project.functions.openBidding(), "NotOwner")
    chain.mint(a.owner, PAYOUT)
    chain.reverts(a.owner, project.functions.openBidding(), "ERC20InsufficientAllowance")
    chain.ok(a.owner, chain.usdc.functions.approve(chain.escrow.address, PAYOUT))
    chain.ok(a.owner, project.functions.openBidding())
    ts = chain.now()
    assert _deadlines(chain, project) == (
        ts + SUBMISSION_WINDOW,
        ts + SUBMISSION_WINDOW + RESPONSE_WINDOW,
    )
    assert chain.escrow_balance(project) == PAYOUT


def test_challenge_draft_open_bidding_with_permit(chain: Chain) -> None:
    a = chain.a
    receipt = chain.ok(
        a.owner,
        chain.registry.functions.createChallengeProject(
            h("cfg"), PAYOUT, SUBMISSION_WINDOW, RESPONSE_WINDOW
        ),
    )
    project = chain.created_project(receipt)
    chain.mint(a.owner, PAYOUT)
    wrong = chain.permit(a.owner, PAYOUT, spender=project.address)
    chain.reverts(
        a.owner, project.functions.openBiddingWithPermit(*wrong), "ERC20InsufficientAllowance"
    )
    permit = chain.permit(a.owner, PAYOUT)
    chain.reverts(a.stranger, project.functions.openBiddingWithPermit(*permit), "NotOwner")
    chain.ok(a.owner, project.functions.openBiddingWithPermit(*permit))
    assert chain.escrow_balance(project) == PAYOUT


def test_open_from_registry_is_registry_only(chain: Chain, challenge: Contract) -> None:
    fn = challenge.functions.openFromRegistry(False, (0, 0, ZERO_HASH, ZERO_HASH))
    for caller in (chain.a.owner, chain.a.stranger, ANONYMOUS):
        chain.reverts(caller, fn, "NotRegistry")


def test_standard_operations_rejected_in_challenge_mode(chain: Chain, challenge: Contract) -> None:
    fns = challenge.functions
    chain.reverts(chain.a.worker, fns.postBid([], [], h("b")), "WrongMode")
    chain.reverts(chain.a.owner, fns.addToAllowlist([chain.a.worker]), "NotInviteOnly")
    standard = chain.open_standard()
    chain.reverts(chain.a.worker, standard.functions.submitChallengeSubmission(h("s")), "WrongMode")
    chain.reverts(chain.a.stranger, standard.functions.enterChallengeSelectionPhase(), "WrongMode")


# =========================================================== row: submit (wallet-keyed)


def test_submissions_are_wallet_keyed(chain: Chain, challenge: Contract) -> None:
    a = chain.a
    fns = challenge.functions
    receipt = chain.ok(a.worker, fns.submitChallengeSubmission(h("v1")))
    assert chain.events(receipt, challenge, "ChallengeSubmitted") == [
        {"submitter": a.worker, "submissionHash": h("v1"), "replaced": False, "submissionCount": 1}
    ]
    receipt = chain.ok(a.worker, fns.submitChallengeSubmission(h("v2")))
    assert chain.events(receipt, challenge, "ChallengeSubmitted") == [
        {"submitter": a.worker, "submissionHash": h("v2"), "replaced": True, "submissionCount": 1}
    ]
    assert fns.challengeSubmissionOf(a.worker).call() == h("v2")
    assert chain.state(challenge)["challengeSubmissionCount"] == 1
    chain.ok(a.bidder2, fns.submitChallengeSubmission(h("other")))
    chain.ok(a.stranger, fns.submitChallengeSubmission(h("third")))
    assert chain.state(challenge)["challengeSubmissionCount"] == 3
    assert fns.challengeSubmitters().call() == [a.worker, a.bidder2, a.stranger]
    assert fns.challengeSubmissionOf(a.bidder3).call() == ZERO_HASH


def test_submission_deadline_boundary(chain: Chain, challenge: Contract) -> None:
    a = chain.a
    deadline, _ = _deadlines(chain, challenge)
    fn = challenge.functions.submitChallengeSubmission(h("late"))
    chain.reverts(a.worker, fn, "SubmissionWindowClosed", at=deadline + 1, args=(deadline,))
    chain.ok(a.worker, fn, at=deadline)
    assert chain.state(challenge)["challengeSubmissionCount"] == 1


def test_submission_validation(chain: Chain, challenge: Contract) -> None:
    fns = challenge.functions
    chain.reverts(chain.a.worker, fns.submitChallengeSubmission(ZERO_HASH), "ZeroHash")
    chain.reverts(chain.a.owner, fns.submitChallengeSubmission(h("s")), "OwnerCannotParticipate")


# ============================================================== row: selection phase


def test_enter_selection_phase_boundary(chain: Chain, with_submissions: Contract) -> None:
    a = chain.a
    deadline, _ = _deadlines(chain, with_submissions)
    fn = with_submissions.functions.enterChallengeSelectionPhase()
    chain.reverts(a.stranger, fn, "SubmissionWindowOpen", at=deadline, args=(deadline,))
    receipt = chain.ok(a.stranger, fn, at=deadline + 1)  # public
    assert chain.events(receipt, with_submissions, "ChallengeSelectionPhaseEntered") == [
        {"submissionCount": 2, "enteredAt": deadline + 1}
    ]
    state = chain.state(with_submissions)
    assert state["status"] == ProjectStatus.BUILDING
    assert state["challengeSelectionPhase"] is True
    chain.reverts(a.stranger, fn, "WrongStatus", args=(ProjectStatus.BUILDING,))
    chain.reverts(
        a.bidder3, with_submissions.functions.submitChallengeSubmission(h("x")), "WrongStatus"
    )


def test_enter_selection_phase_needs_a_submission(chain: Chain, challenge: Contract) -> None:
    deadline, _ = _deadlines(chain, challenge)
    chain.reverts(
        chain.a.stranger,
        challenge.functions.enterChallengeSelectionPhase(),
        "NoSubmissions",
        at=deadline + 1,
    )


# ======================================================================= row: winner


@pytest.mark.parametrize("caller", ["worker", "bidder2", "stranger", "multisig", "anonymous"])
def test_select_winner_owner_only(chain: Chain, with_submissions: Contract, caller: str) -> None:
    deadline, _ = _deadlines(chain, with_submissions)
    fn = with_submissions.functions.selectChallengeWinner(chain.a.worker, h("decision"))
    chain.reverts(_who(chain, caller), fn, "NotOwner", at=deadline + 1)


def test_select_winner_window(chain: Chain, with_submissions: Contract) -> None:
    a = chain.a
    submission_deadline, response_deadline = _deadlines(chain, with_submissions)
    fn = with_submissions.functions.selectChallengeWinner(a.worker, h("decision"))
    chain.reverts(a.owner, fn, "SubmissionWindowOpen", at=submission_deadline)
    chain.reverts(
        a.owner,
        fn,
        "OwnerResponseWindowClosed",
        at=response_deadline + 1,
        args=(response_deadline,),
    )
    chain.reverts(
        a.owner,
        with_submissions.functions.selectChallengeWinner(a.bidder3, h("d")),
        "NotSubmitter",
        at=submission_deadline + 1,
        args=(a.bidder3,),
    )
    receipt = chain.ok(a.owner, fn, at=response_deadline)
    assert chain.events(receipt, with_submissions, "ChallengeWinnerSelected") == [
        {
            "winner": a.worker,
            "decisionHash": h("decision"),
            "winnerAmount": PAYOUT - FEE,
            "feeAmount": FEE,
        }
    ]
    names = chain.event_names(receipt, with_submissions)
    assert "ChallengeSelectionPhaseEntered" in names and "ProjectCompleted" in names
    state = chain.state(with_submissions)
    assert state["status"] == ProjectStatus.COMPLETE
    assert state["challengeWinner"] == a.worker
    assert state["escrowBalance"] == 0
    assert chain.balance(a.worker) == PAYOUT - FEE
    assert chain.balance(a.treasury) == FEE
    chain.reverts(a.owner, fn, "WrongStatus", at=response_deadline + 1)
    chain.reverts(a.owner, with_submissions.functions.cancelBeforeSelection(), "WrongStatus")


def test_select_winner_after_entering_selection_phase(
    chain: Chain, with_submissions: Contract
) -> None:
    a = chain.a
    deadline, _ = _deadlines(chain, with_submissions)
    chain.ok(a.stranger, with_submissions.functions.enterChallengeSelectionPhase(), at=deadline + 1)
    chain.ok(a.owner, with_submissions.functions.selectChallengeWinner(a.bidder2, h("d")))
    assert chain.balance(a.bidder2) == PAYOUT - FEE


# ============================================================== row: cancellation


@pytest.mark.parametrize("caller", ["worker", "stranger", "multisig", "anonymous"])
def test_cancel_owner_only(chain: Chain, challenge: Contract, caller: str) -> None:
    chain.reverts(_who(chain, caller), challenge.functions.cancelBeforeSelection(), "NotOwner")


def test_cancel_before_deadline_refunds(chain: Chain, with_submissions: Contract) -> None:
    a = chain.a
    deadline, _ = _deadlines(chain, with_submissions)
    receipt = chain.ok(a.owner, with_submissions.functions.cancelBeforeSelection(), at=deadline)
    assert chain.events(receipt, with_submissions, "ChallengeCancelled") == [
        {"submissionCount": 2, "refundAmount": PAYOUT}
    ]
    assert chain.events(receipt, with_submissions, "ProjectFailed") == [
        {"failedAt": deadline, "ownerRefund": PAYOUT}
    ]
    assert chain.state(with_submissions)["status"] == ProjectStatus.FAILED
    assert chain.balance(a.owner) == PAYOUT
    assert chain.escrow_balance(with_submissions) == 0


def test_cancel_after_deadline_only_without_submissions(
    chain: Chain, with_submissions: Contract
) -> None:
    deadline, _ = _deadlines(chain, with_submissions)
    chain.reverts(
        chain.a.owner,
        with_submissions.functions.cancelBeforeSelection(),
        "CannotCancel",
        at=deadline + 1,
    )


def test_zero_submission_cleanup_any_time_after_deadline(chain: Chain, challenge: Contract) -> None:
    a = chain.a
    _, response_deadline = _deadlines(chain, challenge)
    at = response_deadline + FALLBACK_WINDOW + 10 * DAY
    chain.ok(a.owner, challenge.functions.cancelBeforeSelection(), at=at)
    assert chain.state(challenge)["status"] == ProjectStatus.FAILED
    assert chain.balance(a.owner) == PAYOUT


# ================================================================= row: fallback


def test_fallback_not_before_response_deadline(chain: Chain, with_submissions: Contract) -> None:
    _, response_deadline = _deadlines(chain, with_submissions)
    fn = _fallback_fn(chain, with_submissions, [chain.a.worker], at=response_deadline)
    chain.reverts(
        chain.a.stranger,
        fn,
        "FallbackNotAvailable",
        at=response_deadline,
        args=(response_deadline,),
    )


@pytest.mark.parametrize("offset", [1, FALLBACK_WINDOW])
def test_fallback_with_verifier_signature(
    chain: Chain, with_submissions: Contract, offset: int
) -> None:
    a = chain.a
    _, response_deadline = _deadlines(chain, with_submissions)
    at = response_deadline + offset
    ranked = [a.bidder2, a.worker]
    fn = _fallback_fn(chain, with_submissions, ranked, at=at)
    receipt = chain.ok(a.stranger, fn, at=at)
    assert chain.events(receipt, with_submissions, "ChallengeFallbackSettled") == [
        {
            "winner": a.bidder2,
            "rankedSubmittersHash": ranked_submitters_hash(ranked),
            "rankingHash": h("ranking"),
            "verifierSigned": True,
            "winnerAmount": PAYOUT - FEE,
            "feeAmount": FEE,
        }
    ]
    state = chain.state(with_submissions)
    assert state["status"] == ProjectStatus.COMPLETE
    assert state["challengeWinner"] == a.bidder2
    assert chain.balance(a.bidder2) == PAYOUT - FEE
    assert chain.balance(a.treasury) == FEE
    chain.reverts(a.stranger, _fallback_fn(chain, with_submissions, ranked), "WrongStatus")


def test_fallback_after_window_fails_and_refunds(chain: Chain, with_submissions: Contract) -> None:
    a = chain.a
    _, response_deadline = _deadlines(chain, with_submissions)
    at = response_deadline + FALLBACK_WINDOW + 1
    fn = with_submissions.functions.settleChallengeFallback([], ZERO_HASH, 0, 0, 0, b"")
    receipt = chain.ok(a.stranger, fn, at=at)  # anyone, no signature
    (event,) = chain.events(receipt, with_submissions, "ChallengeFallbackSettled")
    assert event["winner"] == ZERO_ADDRESS and event["verifierSigned"] is False
    assert chain.events(receipt, with_submissions, "ProjectFailed") == [
        {"failedAt": at, "ownerRefund": PAYOUT}
    ]
    assert chain.state(with_submissions)["status"] == ProjectStatus.FAILED
    assert chain.balance(a.owner) == PAYOUT
    assert chain.balance(a.worker) == 0
    assert chain.escrow_balance(with_submissions) == 0


def test_fallback_inside_window_requires_signature(
    chain: Chain, with_submissions: Contract
) -> None:
    _, response_deadline = _deadlines(chain, with_submissions)
    at = response_deadline + FALLBACK_WINDOW
    fn = _fallback_fn(chain, with_submissions, [chain.a.worker], signature=b"", at=at)
    chain.reverts(chain.a.stranger, fn, "InvalidSignature", at=at)


def test_fallback_with_zero_submissions(chain: Chain, challenge: Contract) -> None:
    a = chain.a
    _, response_deadline = _deadlines(chain, challenge)
    at = response_deadline + 1
    fn = _fallback_fn(chain, challenge, [a.worker], at=at)
    chain.reverts(a.stranger, fn, "NoSubmissions", at=at)
    late = challenge.functions.settleChallengeFallback([], ZERO_HASH, 0, 0, 0, b"")
    chain.ok(a.stranger, late, at=response_deadline + FALLBACK_WINDOW + 1)
    assert chain.balance(a.owner) == PAYOUT


def test_fallback_signature_checks(chain: Chain, with_submissions: Contract) -> None:
    a = chain.a
    _, response_deadline = _deadlines(chain, with_submissions)
    at = response_deadline + DAY
    p = with_submissions
    ranked = [a.worker, a.bidder2]

    def reverts(fn: Any, error: str, args: tuple | None = None) -> None:
        chain.reverts(a.stranger, fn, error, at=at, args=args)

    reverts(
        _fallback_fn(chain, p, ranked, key=ANVIL_PRIVATE_KEYS[8], at=at),
        "WrongSigner",
        (a.stranger, a.verifier),
    )
    reverts(_fallback_fn(chain, p, ranked, deadline=at - 1), "SignatureExpired", (at - 1,))
    reverts(_fallback_fn(chain, p, ranked, chain_id=5, at=at), "WrongChainId", (5,))
    reverts(_fallback_fn(chain, p, ranked, signed_chain_id=5, at=at), "WrongSigner")
    reverts(_fallback_fn(chain, p, ranked, signed_ranked=ranked[::-1], at=at), "WrongSigner")
    reverts(_fallback_fn(chain, p, [a.bidder3], at=at), "NotSubmitter", (a.bidder3,))
    reverts(_fallback_fn(chain, p, [], at=at), "EmptyRanking")

    nonce = chain.nonce()
    chain.ok(a.stranger, _fallback_fn(chain, p, ranked, nonce=nonce, at=at), at=at)
    # Replaying the nonce on another challenge is rejected (per-signer nonces in the registry).
    other = chain.create_challenge()
    _submit(chain, other, a.worker)
    _, other_response = _deadlines(chain, other)
    other_at = other_response + 1
    chain.reverts(
        a.stranger,
        _fallback_fn(chain, other, [a.worker], nonce=nonce, at=other_at),
        "NonceAlreadyUsed",
        at=other_at,
        args=(a.verifier, nonce),
    )


def test_owner_cannot_select_once_fallback_opens(chain: Chain, with_submissions: Contract) -> None:
    _, response_deadline = _deadlines(chain, with_submissions)
    chain.reverts(
        chain.a.owner,
        with_submissions.functions.selectChallengeWinner(chain.a.worker, h("d")),
        "OwnerResponseWindowClosed",
        at=response_deadline + 1,
    )
