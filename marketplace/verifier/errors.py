"""Rule failures of verifier jobs (docs/verifier.md, "Errors")."""

from __future__ import annotations

from marketplace.errors import (
    Conflict,
    Forbidden,
    MarketplaceError,
    NotFound,
    ServiceUnavailable,
)


class VerifierJobNotFound(NotFound):
    code = "verifier_job_not_found"
    default_message = "verifier job not found (or not visible to you)"


class NotVerifierJobParty(Forbidden):
    code = "not_verifier_job_party"
    default_message = (
        "only the job's creator, the project's owner and selected worker, and verifier admins "
        "may do this"
    )


class ChainMismatch(Conflict):
    code = "chain_mismatch"
    default_message = "chainId is not the chain this deployment verifies on"


class ProjectNotIndexed(Conflict):
    code = "project_not_indexed"
    default_message = "the project is not indexed (yet): verifier jobs need its on-chain state"


class MilestoneOutOfRange(Conflict):
    code = "milestone_out_of_range"
    default_message = "milestoneIndex is not below the project's milestoneCount"


class PolicyUnavailable(Conflict):
    code = "policy_unavailable"
    default_message = "this deployment does not have the tooling this policy needs"


class JobNotCompleted(Conflict):
    code = "verifier_job_not_completed"
    default_message = "the job has no evidence yet: it is not completed"


class RawEvidenceExpired(MarketplaceError):
    code = "raw_evidence_expired"
    status = 410
    default_message = "the raw evidence and logs were deleted after the retention period"


class VerifierNotConfigured(MarketplaceError):
    code = "verifier_not_configured"
    status = 503
    default_message = "no attestation signing key is configured (MARKETPLACE_VERIFIER_PRIVATE_KEY)"


class MilestoneNotDisputed(Conflict):
    code = "milestone_not_disputed"
    default_message = (
        "a verdict is only given for the project's active disputed milestone in phase "
        "`challenged` (read from the chain): this milestone is not in such a dispute"
    )


class NoAcceptancePolicy(Conflict):
    code = "no_acceptance_policy"
    default_message = (
        "the milestone has no acceptance policy: its owner fixed none before bidding, so its "
        "dispute goes to the multisig, not to a verifier verdict"
    )


class PolicyMismatch(Conflict):
    code = "policy_mismatch"
    default_message = "checkPolicyId is not the milestone's acceptance policy"


class DeliveryRefMismatch(Conflict):
    code = "delivery_ref_mismatch"
    default_message = (
        "keccak256 of deliveryRef is not the milestone's on-chain deliveryRefHash: a verdict "
        "judges only the delivery the worker submitted"
    )


class ChainUnavailable(ServiceUnavailable):
    code = "chain_unavailable"
    default_message = "the chain could not be read; retry shortly"
