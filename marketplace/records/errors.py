"""Rule failures of the off-chain records. Plain constructors, so they cross the Ray boundary."""

from __future__ import annotations

from marketplace.errors import Conflict, Forbidden, InvalidRequest, NotFound


class ProjectNotFound(NotFound):
    code = "project_not_found"
    default_message = "project not found (not indexed yet, or not visible to you)"


class WalletNotLinked(Forbidden):
    code = "wallet_not_linked"
    default_message = "the wallet is not an active wallet link of the caller"


class NotProjectParty(Forbidden):
    """The caller is neither the project's owner nor its selected worker (through an active
    wallet link); one class for every rule that needs a party (chat, verifier jobs)."""

    code = "not_project_party"
    default_message = (
        "only the project's owner or selected worker (through an active wallet link) may do this"
    )


class NotProjectOwner(Forbidden):
    code = "not_project_owner"
    default_message = "only the project owner (an active link to the owner wallet) may do this"


class OwnerCannotBid(Forbidden):
    code = "owner_cannot_bid"
    default_message = "the project owner's wallet cannot bid on its own project"


class BidderNotAllowlisted(Forbidden):
    code = "bidder_not_allowlisted"
    default_message = "this invite-only project does not allow the bidder wallet"


class NotChallengeParticipant(Forbidden):
    code = "not_challenge_participant"
    default_message = (
        "only the project owner and wallets with a registered submission may list submissions"
    )


class NotDisputeParty(Forbidden):
    code = "not_dispute_party"
    default_message = "only the project owner and the selected worker may do this"


class SubmitterAmbiguous(InvalidRequest):
    code = "submitter_ambiguous"
    default_message = (
        "you have active links to both the owner and the worker wallet; send the body with "
        "milestoneIndex and submitterAddress"
    )


class ProjectModeMismatch(Conflict):
    code = "project_mode_mismatch"
    default_message = "this record does not exist for the project's mode"


class ProjectNotBidding(Conflict):
    code = "project_not_bidding"
    default_message = "bid drafts are accepted only while the project is in bidding"


class SubmissionHashMismatch(Conflict):
    code = "submission_hash_mismatch"
    default_message = "submissionHash differs from the submitter's on-chain submission hash"


class NoActiveDispute(Conflict):
    code = "no_active_dispute"
    default_message = "the project has no active dispute"


class MilestoneNotDisputed(Conflict):
    code = "milestone_not_disputed"
    default_message = "milestoneIndex is not the project's active disputed milestone"


class EvidenceAlreadySubmitted(Conflict):
    code = "dispute_evidence_already_submitted"
    default_message = "this party already submitted evidence for the disputed milestone"
