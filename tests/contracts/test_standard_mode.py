"""Standard mode: opening, bids, selection, milestones, allowlist, funding (approve and permit)."""

from __future__ import annotations

import pytest

from tests.contracts.helpers import (
    ANONYMOUS,
    DAY,
    USDC,
    ZERO_ADDRESS,
    ZERO_HASH,
    BiddingAccess,
    Chain,
    MilestoneStatus,
    ProjectStatus,
    h,
)

PAYOUTS = [300 * USDC, 700 * USDC]
DURATIONS = [3 * DAY, 5 * DAY]
BOND = 50 * USDC


def _fee(amount: int) -> int:
    return amount * 250 // 10_000


# ------------------------------------------------------------------ opening


def test_open_bidding_snapshots_authorities(chain: Chain) -> None:
    a = chain.a
    project = chain.create_standard()
    receipt = chain.ok(a.owner, project.functions.openBidding())
    ts = chain.now()
    state = chain.state(project)
    assert state["status"] == ProjectStatus.BIDDING
    assert state["openedAt"] == ts
    assert (state["feeRateBps"], state["disputeMultisig"], state["verifierSigner"]) == (
        250,
        a.multisig,
        a.verifier,
    )
    assert state["treasury"] == a.treasury
    (event,) = chain.events(receipt, project, "BiddingOpened")
    assert event["openedAt"] == ts and event["fundedAmount"] == 0
    assert event["verifierSigner"] == a.verifier
    assert chain.events(receipt, project, "StatusChanged") == [
        {"previousStatus": ProjectStatus.DRAFT, "newStatus": ProjectStatus.BIDDING}
    ]
    assert chain.escrow_balance(project) == 0


@pytest.mark.parametrize("caller", ["worker", "stranger", "multisig", "anonymous"])
def test_open_bidding_owner_only(chain: Chain, caller: str) -> None:
    project = chain.create_standard()
    who = ANONYMOUS if caller == "anonymous" else getattr(chain.a, caller)
    chain.reverts(who, project.functions.openBidding(), "NotOwner")


def test_open_bidding_only_from_draft(chain: Chain) -> None:
    project = chain.open_standard()
    chain.reverts(
        chain.a.owner, project.functions.openBidding(), "WrongStatus", args=(ProjectStatus.BIDDING,)
    )


def test_open_bidding_with_permit_not_for_standard(chain: Chain) -> None:
    project = chain.create_standard()
    deadline, v, r, s = chain.permit(chain.a.owner, 1)
    chain.reverts(
        chain.a.owner,
        project.functions.openBiddingWithPermit(deadline, v, r, s),
        "NoFundingRequired",
    )


# --------------------------------------------------------------------- bids


def test_post_bid_pulls_bond_into_escrow(chain: Chain) -> None:
    a = chain.a
    project = chain.open_standard(bid_bond=BOND)
    receipt = chain.post_bid(project, a.worker, PAYOUTS, DURATIONS, h("bid-doc"))
    assert chain.balance(a.worker) == 0
    assert chain.escrow_balance(project) == BOND
    assert project.functions.bondOf(a.worker).call() == BOND
    (event,) = chain.events(receipt, project, "BidPosted")
    assert event == {
        "bidder": a.worker,
        "bidHash": h("bid-doc"),
        "payouts": PAYOUTS,
        "durations": DURATIONS,
        "totalPayout": 1_000 * USDC,
        "bond": BOND,
    }
    (deposit,) = chain.events(receipt, chain.escrow, "Deposited")
    assert deposit == {"project": project.address, "payer": a.worker, "amount": BOND}
    bid = project.functions.getBid(a.worker).call()
    assert bid[0] is True and bid[1] == h("bid-doc") and bid[4] == 1_000 * USDC
    assert project.functions.bidders().call() == [a.worker]


def test_bond_approval_must_name_escrow_not_project(chain: Chain) -> None:
    """Approving the project address instead of the escrow makes postBid revert."""
    a = chain.a
    project = chain.open_standard(bid_bond=BOND)
    chain.fund_and_approve(a.worker, BOND, spender=project.address)
    chain.reverts(
        a.worker,
        project.functions.postBid(PAYOUTS, DURATIONS, h("b")),
        "ERC20InsufficientAllowance",
        args=(chain.escrow.address, 0, BOND),
    )
    chain.ok(a.worker, chain.usdc.functions.approve(chain.escrow.address, BOND))
    chain.ok(a.worker, project.functions.postBid(PAYOUTS, DURATIONS, h("b")))


def test_post_bid_with_permit(chain: Chain) -> None:
    a = chain.a
    project = chain.open_standard(bid_bond=BOND)
    chain.mint(a.worker, BOND)
    # A permit naming the project as spender does not fund the escrow.
    bad = chain.permit(a.worker, BOND, spender=project.address)
    chain.reverts(
        a.worker,
        project.functions.postBidWithPermit(PAYOUTS, DURATIONS, h("b"), *bad),
        "ERC20InsufficientAllowance",
    )
    # A permit for less than the bond does not either.
    short = chain.permit(a.worker, BOND - 1)
    chain.reverts(
        a.worker,
        project.functions.postBidWithPermit(PAYOUTS, DURATIONS, h("b"), *short),
        "ERC20InsufficientAllowance",
    )
    good = chain.permit(a.worker, BOND)
    chain.ok(a.worker, project.functions.postBidWithPermit(PAYOUTS, DURATIONS, h("b"), *good))
    assert chain.escrow_balance(project) == BOND
    assert chain.usdc.functions.nonces(a.worker).call() == 1


def test_zero_bond_moves_no_funds(chain: Chain) -> None:
    project = chain.open_standard(bid_bond=0)
    chain.ok(chain.a.worker, project.functions.postBid(PAYOUTS, DURATIONS, h("b")))
    assert chain.escrow_balance(project) == 0


def test_post_bid_validation(chain: Chain) -> None:
    a = chain.a
    draft = chain.create_standard()
    chain.reverts(
        a.worker,
        draft.functions.postBid(PAYOUTS, DURATIONS, h("b")),
        "WrongStatus",
        args=(ProjectStatus.DRAFT,),
    )
    project = chain.open_standard(bid_bond=0)
    fns = project.functions
    chain.reverts(a.owner, fns.postBid(PAYOUTS, DURATIONS, h("b")), "OwnerCannotParticipate")
    chain.reverts(a.worker, fns.postBid([USDC], [DAY], h("b")), "LengthMismatch")
    chain.reverts(a.worker, fns.postBid(PAYOUTS, [DAY], h("b")), "LengthMismatch")
    chain.reverts(a.worker, fns.postBid([0, USDC], DURATIONS, h("b")), "InvalidAmount")
    chain.reverts(a.worker, fns.postBid(PAYOUTS, [0, DAY], h("b")), "InvalidWindow")
    chain.reverts(a.worker, fns.postBid(PAYOUTS, [366 * DAY, DAY], h("b")), "InvalidWindow")
    chain.ok(a.worker, fns.postBid(PAYOUTS, DURATIONS, h("b")))
    chain.reverts(a.worker, fns.postBid(PAYOUTS, DURATIONS, h("b")), "BidAlreadyActive")


def test_update_bid(chain: Chain) -> None:
    a = chain.a
    project = chain.open_standard(bid_bond=BOND)
    chain.reverts(a.worker, project.functions.updateBid(PAYOUTS, DURATIONS, h("b")), "NoActiveBid")
    chain.post_bid(project, a.worker, PAYOUTS, DURATIONS)
    receipt = chain.ok(a.worker, project.functions.updateBid([USDC, 2 * USDC], [DAY, DAY], h("b2")))
    (event,) = chain.events(receipt, project, "BidUpdated")
    assert event["totalPayout"] == 3 * USDC and event["bidHash"] == h("b2")
    bid = project.functions.getBid(a.worker).call()
    assert bid[5] == [USDC, 2 * USDC] and bid[6] == [DAY, DAY]
    assert chain.escrow_balance(project) == BOND  # bond unchanged


def test_cancel_bid_refunds_bond(chain: Chain) -> None:
    a = chain.a
    project = chain.open_standard(bid_bond=BOND)
    chain.reverts(a.worker, project.functions.cancelBid(), "NoActiveBid", args=(a.worker,))
    chain.post_bid(project, a.worker, PAYOUTS, DURATIONS)
    receipt = chain.ok(a.worker, project.functions.cancelBid())
    assert chain.events(receipt, project, "BidCancelled") == [
        {"bidder": a.worker, "bondRefunded": BOND}
    ]
    assert chain.balance(a.worker) == BOND
    assert chain.escrow_balance(project) == 0
    assert project.functions.getBid(a.worker).call()[0] is False
    chain.reverts(a.worker, project.functions.cancelBid(), "NoActiveBid")
    # Re-bidding after cancelling posts a fresh bond.
    chain.post_bid(project, a.worker, PAYOUTS, DURATIONS)
    assert chain.escrow_balance(project) == BOND
    assert project.functions.bidders().call() == [a.worker]


def test_select_bid(chain: Chain) -> None:
    a = chain.a
    project = chain.open_standard(bid_bond=BOND)
    chain.post_bid(project, a.worker, PAYOUTS, DURATIONS, h("w"))
    chain.post_bid(project, a.bidder2, [USDC, USDC], [DAY, DAY])
    chain.fund_and_approve(a.owner, 1_000 * USDC)
    for caller in (a.worker, a.stranger, ANONYMOUS):
        chain.reverts(caller, project.functions.selectBid(a.worker), "NotOwner")
    chain.reverts(a.owner, project.functions.selectBid(a.bidder3), "NoActiveBid")
    receipt = chain.ok(a.owner, project.functions.selectBid(a.worker))
    ts = chain.now()
    (event,) = chain.events(receipt, project, "BidSelected")
    assert event == {
        "builder": a.worker,
        "bidHash": h("w"),
        "totalPayout": 1_000 * USDC,
        "payouts": PAYOUTS,
        "deadlines": [ts + 3 * DAY, ts + 8 * DAY],
    }
    state = chain.state(project)
    assert state["status"] == ProjectStatus.BUILDING
    assert state["selectedBuilder"] == a.worker
    assert state["selectedBuilderBond"] == BOND
    assert [(m["payout"], m["deadline"], m["status"]) for m in state["milestones"]] == [
        (300 * USDC, ts + 3 * DAY, MilestoneStatus.PENDING),
        (700 * USDC, ts + 8 * DAY, MilestoneStatus.PENDING),
    ]
    assert state["escrowBalance"] == 1_000 * USDC + 2 * BOND
    assert chain.balance(a.owner) == 0
    # Bidding is over.
    chain.reverts(a.bidder3, project.functions.postBid(PAYOUTS, DURATIONS, h("x")), "WrongStatus")
    chain.reverts(a.bidder2, project.functions.cancelBid(), "WrongStatus")
    chain.reverts(a.owner, project.functions.selectBid(a.bidder2), "WrongStatus")


def test_select_bid_requires_escrow_allowance(chain: Chain) -> None:
    a = chain.a
    project = chain.open_standard(bid_bond=0)
    chain.post_bid(project, a.worker, PAYOUTS, DURATIONS)
    chain.fund_and_approve(a.owner, 1_000 * USDC, spender=project.address)
    chain.reverts(
        a.owner,
        project.functions.selectBid(a.worker),
        "ERC20InsufficientAllowance",
        args=(chain.escrow.address, 0, 1_000 * USDC),
    )


def test_select_bid_with_permit(chain: Chain) -> None:
    a = chain.a
    project = chain.open_standard(bid_bond=0)
    chain.post_bid(project, a.worker, PAYOUTS, DURATIONS)
    chain.mint(a.owner, 1_000 * USDC)
    wrong_spender = chain.permit(a.owner, 1_000 * USDC, spender=project.address)
    chain.reverts(
        a.owner,
        project.functions.selectBidWithPermit(a.worker, *wrong_spender),
        "ERC20InsufficientAllowance",
    )
    permit = chain.permit(a.owner, 1_000 * USDC)
    chain.reverts(a.stranger, project.functions.selectBidWithPermit(a.worker, *permit), "NotOwner")
    chain.ok(a.owner, project.functions.selectBidWithPermit(a.worker, *permit))
    assert chain.escrow_balance(project) == 1_000 * USDC
    assert chain.state(project)["status"] == ProjectStatus.BUILDING


def test_reclaim_bond(chain: Chain) -> None:
    a = chain.a
    project = chain.open_standard(bid_bond=BOND)
    chain.post_bid(project, a.worker, PAYOUTS, DURATIONS)
    chain.post_bid(project, a.bidder2, PAYOUTS, DURATIONS)
    chain.reverts(
        a.bidder2, project.functions.reclaimBond(), "WrongStatus", args=(ProjectStatus.BIDDING,)
    )
    chain.select(project, a.worker)
    chain.reverts(a.worker, project.functions.reclaimBond(), "SelectedBuilderBond")
    chain.reverts(a.stranger, project.functions.reclaimBond(), "NothingToReclaim")
    receipt = chain.ok(a.bidder2, project.functions.reclaimBond())
    assert chain.events(receipt, project, "BondReclaimed") == [
        {"bidder": a.bidder2, "amount": BOND}
    ]
    assert chain.balance(a.bidder2) == BOND
    chain.reverts(a.bidder2, project.functions.reclaimBond(), "NothingToReclaim")
    assert chain.escrow_balance(project) == 1_000 * USDC + BOND


# --------------------------------------------------------------- milestones


def test_full_standard_lifecycle(chain: Chain) -> None:
    a = chain.a
    project = chain.building()
    fns = project.functions
    receipt = chain.submit(project, 0)
    ts = chain.now()
    assert chain.events(receipt, project, "MilestoneSubmitted") == [
        {
            "milestoneIndex": 0,
            "worker": a.worker,
            "deliveryRefHash": h("delivery-0"),
            "submittedAt": ts,
        }
    ]
    m0 = chain.state(project)["milestones"][0]
    assert (m0["status"], m0["submittedAt"], m0["deliveryRefHash"]) == (
        MilestoneStatus.SUBMITTED,
        ts,
        h("delivery-0"),
    )

    receipt = chain.ok(a.owner, fns.approveMilestone(0))
    fee0 = _fee(300 * USDC)
    assert chain.balance(a.worker) == 300 * USDC - fee0
    assert chain.balance(a.treasury) == fee0
    (approved,) = chain.events(receipt, project, "MilestoneApproved")
    assert approved["workerAmount"] == 300 * USDC - fee0 and approved["feeAmount"] == fee0
    state = chain.state(project)
    assert state["status"] == ProjectStatus.BUILDING
    assert state["currentMilestone"] == 1
    assert state["milestones"][0]["status"] == MilestoneStatus.APPROVED
    assert state["milestones"][0]["approvedAt"] == chain.now()

    chain.submit(project, 1)
    receipt = chain.ok(a.owner, fns.approveMilestone(1))
    fee1 = _fee(700 * USDC)
    assert chain.balance(a.worker) == 1_000 * USDC - fee0 - fee1 + BOND  # bond returned
    assert chain.balance(a.treasury) == fee0 + fee1
    assert chain.escrow_balance(project) == 0
    assert chain.events(receipt, project, "BondReturned") == [{"builder": a.worker, "amount": BOND}]
    assert chain.events(receipt, project, "ProjectCompleted") == [{"completedAt": chain.now()}]
    state = chain.state(project)
    assert state["status"] == ProjectStatus.COMPLETE
    assert state["selectedBuilderBond"] == 0
    assert [m["status"] for m in state["milestones"]] == [MilestoneStatus.APPROVED] * 2
    chain.reverts(a.worker, fns.submitMilestone(1, h("x")), "WrongStatus")
    chain.reverts(a.owner, fns.approveMilestone(1), "WrongStatus")


def test_milestones_submitted_in_order(chain: Chain) -> None:
    a = chain.a
    project = chain.building()
    fns = project.functions
    chain.reverts(a.worker, fns.submitMilestone(1, h("d")), "InvalidMilestoneIndex", args=(1,))
    chain.reverts(a.worker, fns.submitMilestone(2, h("d")), "InvalidMilestoneIndex", args=(2,))
    chain.reverts(a.worker, fns.submitMilestone(0, ZERO_HASH), "ZeroHash")
    chain.submit(project, 0)
    chain.reverts(
        a.worker,
        fns.submitMilestone(0, h("d")),
        "WrongMilestoneStatus",
        args=(0, MilestoneStatus.SUBMITTED),
    )
    chain.reverts(a.worker, fns.submitMilestone(1, h("d")), "InvalidMilestoneIndex")
    chain.reverts(a.owner, fns.approveMilestone(1), "InvalidMilestoneIndex")


def test_late_submission_allowed_without_dispute(chain: Chain) -> None:
    project = chain.building()
    deadline = chain.state(project)["milestones"][0]["deadline"]
    chain.submit(project, 0, at=deadline + DAY)
    assert chain.state(project)["milestones"][0]["status"] == MilestoneStatus.SUBMITTED


@pytest.mark.parametrize("caller", ["owner", "bidder2", "stranger", "anonymous"])
def test_submit_milestone_selected_builder_only(chain: Chain, caller: str) -> None:
    project = chain.building()
    who = ANONYMOUS if caller == "anonymous" else getattr(chain.a, caller)
    chain.reverts(who, project.functions.submitMilestone(0, h("d")), "NotSelectedBuilder")


@pytest.mark.parametrize("caller", ["worker", "stranger", "multisig", "anonymous"])
def test_approve_milestone_owner_only(chain: Chain, caller: str) -> None:
    project = chain.building()
    chain.submit(project, 0)
    who = ANONYMOUS if caller == "anonymous" else getattr(chain.a, caller)
    chain.reverts(who, project.functions.approveMilestone(0), "NotOwner")


def test_approve_requires_submission(chain: Chain) -> None:
    project = chain.building()
    chain.reverts(
        chain.a.owner,
        project.functions.approveMilestone(0),
        "WrongMilestoneStatus",
        args=(0, MilestoneStatus.PENDING),
    )


def test_zero_fee_rate(chain: Chain) -> None:
    a = chain.a
    chain.ok(a.admin, chain.registry.functions.setFeeRateBps(0))
    project = chain.building(payouts=[USDC], durations=[DAY], bid_bond=0)
    chain.submit(project, 0)
    chain.ok(a.owner, project.functions.approveMilestone(0))
    assert chain.balance(a.worker) == USDC
    assert chain.balance(a.treasury) == 0


# ---------------------------------------------------------------- allowlist


def test_invite_only_allowlist(chain: Chain) -> None:
    a = chain.a
    project = chain.open_standard(invite_only=True, bid_bond=0)
    fns = project.functions
    assert chain.state(project)["biddingAccess"] == BiddingAccess.INVITE_ONLY
    assert fns.isAllowed(a.worker).call() is False
    chain.reverts(
        a.worker, fns.postBid(PAYOUTS, DURATIONS, h("b")), "NotAllowlisted", args=(a.worker,)
    )

    receipt = chain.ok(a.owner, fns.addToAllowlist([a.worker, a.bidder2, a.worker]))
    assert chain.events(receipt, project, "AllowlistUpdated") == [
        {"account": a.worker, "allowed": True},
        {"account": a.bidder2, "allowed": True},
    ]
    assert fns.allowlist().call() == [a.worker, a.bidder2]
    assert fns.isAllowed(a.worker).call() is True
    assert fns.isAllowed(a.stranger).call() is False
    chain.ok(a.worker, fns.postBid(PAYOUTS, DURATIONS, h("b")))
    chain.reverts(a.stranger, fns.postBid(PAYOUTS, DURATIONS, h("b")), "NotAllowlisted")

    receipt = chain.ok(a.owner, fns.removeFromAllowlist([a.worker, a.stranger]))
    assert chain.events(receipt, project, "AllowlistUpdated") == [
        {"account": a.worker, "allowed": False}
    ]
    assert fns.allowlist().call() == [a.bidder2]
    chain.reverts(a.worker, fns.updateBid(PAYOUTS, DURATIONS, h("b2")), "NotAllowlisted")
    chain.ok(a.worker, fns.cancelBid())  # removed bidders can still withdraw
    chain.reverts(a.owner, fns.addToAllowlist([ZERO_ADDRESS]), "ZeroAddress")


@pytest.mark.parametrize("caller", ["worker", "stranger", "anonymous"])
def test_allowlist_owner_only(chain: Chain, caller: str) -> None:
    project = chain.create_standard(invite_only=True)
    who = ANONYMOUS if caller == "anonymous" else getattr(chain.a, caller)
    chain.reverts(who, project.functions.addToAllowlist([chain.a.worker]), "NotOwner")
    chain.reverts(who, project.functions.removeFromAllowlist([chain.a.worker]), "NotOwner")


def test_allowlist_only_for_invite_only_projects(chain: Chain) -> None:
    a = chain.a
    project = chain.open_standard(invite_only=False)
    chain.reverts(a.owner, project.functions.addToAllowlist([a.worker]), "NotInviteOnly")
    chain.reverts(a.owner, project.functions.removeFromAllowlist([a.worker]), "NotInviteOnly")
    assert project.functions.isAllowed(a.stranger).call() is True
    assert project.functions.allowlist().call() == []


def test_allowlist_can_be_prepared_in_draft(chain: Chain) -> None:
    a = chain.a
    project = chain.create_standard(invite_only=True, bid_bond=0)
    chain.ok(a.owner, project.functions.addToAllowlist([a.worker]))
    chain.ok(a.owner, project.functions.openBidding())
    chain.ok(a.worker, project.functions.postBid(PAYOUTS, DURATIONS, h("b")))
