"""API shapes of the project read models (spec section 2, "Milestone read model" and "Project read
model") and of the project read endpoints' inputs (section 4, "Projects (read)").

Optional fields default to ``None`` and the read routes render with ``exclude_none``, so an
absent value is omitted from the JSON rather than sent as ``null``; required fields are always
present.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, RootModel

from marketplace.types import (
    Address,
    Bytes32,
    LowerAddress,
    QueryModel,
    RequestModel,
    ResponseModel,
    UnixSeconds,
    Usdc,
)
from marketplace.verifier.policy import PolicyId

ProjectStatus = Literal["draft", "bidding", "building", "dispute", "complete", "failed"]
PROJECT_STATUSES: tuple[ProjectStatus, ...] = (
    "draft",
    "bidding",
    "building",
    "dispute",
    "complete",
    "failed",
)
MilestoneStatus = Literal["pending", "submitted", "approved", "rejected", "disputed", "attested"]
ProjectMode = Literal["standard", "challenge"]
BiddingAccess = Literal["invite_only", "open"]
DisputePhase = Literal["challenged", "verifier_verdict"]
DisputeReason = Literal["deadline_missed", "low_quality", "owner_inaction"]

LIST_LIMIT_DEFAULT = 20
LIST_LIMIT_MAX = 100
CURSOR_MAX_LENGTH = 200


class CheckPolicy(RootModel[PolicyId | None]):
    """A milestone's acceptance policy, or null. A model of its own rather than a plain optional
    field so that it stays in the JSON as ``null`` when the read routes leave absent fields out
    (``exclude_none``: this value is the wrapper, never None); unlike a wrap serializer it costs
    nothing per milestone in Python. Instances are shared (:func:`check_policy`)."""

    model_config = ConfigDict(frozen=True)


NO_POLICY = CheckPolicy(None)
_POLICIES: dict[PolicyId | None, CheckPolicy] = {
    None: NO_POLICY,
    **{policy: CheckPolicy(policy) for policy in PolicyId},
}


def check_policy(policy: PolicyId | None) -> CheckPolicy:
    return _POLICIES[policy]


class MilestoneReadModel(ResponseModel):
    """One milestone of a project, as indexed from the chain."""

    milestoneIndex: int = Field(ge=0)
    status: MilestoneStatus
    payoutUSDC: Usdc | None = None
    deadlineAt: datetime | None = None
    approvedAt: datetime | None = None
    resolvedAt: datetime | None = None
    submittedAt: datetime | None = None
    deliveryRefHash: Bytes32 | None = None
    latestEvidenceHash: Bytes32 | None = None
    latestVerifierJobId: uuid.UUID | None = None
    latestVerifierPasses: bool | None = None
    attestedOnChain: bool | None = None
    checkPolicyId: CheckPolicy = Field(
        default_factory=lambda: NO_POLICY,
        description="the acceptance policy the owner fixed for this milestone before bidding "
        "(null: none; a dispute over it goes to the multisig, no verifier verdict); always "
        "present",
    )


class MilestonePolicy(RequestModel):
    """The acceptance policy of one milestone: the only check a verifier verdict on a dispute
    over it may run (docs/verifier.md, "What a verdict means")."""

    milestoneIndex: int = Field(ge=0, le=65535)
    checkPolicyId: PolicyId


MILESTONE_POLICIES_MAX = 100


def check_unique_indexes(policies: list[MilestonePolicy] | None) -> list[MilestonePolicy] | None:
    """At most one policy per milestone; returned ordered by index."""
    if policies is None:
        return None
    indexes = [p.milestoneIndex for p in policies]
    if len(set(indexes)) != len(indexes):
        raise ValueError("each milestoneIndex may appear once")
    return sorted(policies, key=lambda p: p.milestoneIndex)


class ProjectReadModel(ResponseModel):
    """A project as indexed from the chain, with its claimed off-chain metadata."""

    projectAddress: Address
    ownerAddress: Address
    status: ProjectStatus = Field(description="stored, event-driven status")
    effectiveStatus: ProjectStatus = Field(
        description=(
            "runtime status derived from challenge-mode deadlines at read time; may differ from "
            "`status`; clients gate actions on it (derivation table in docs/read-models.md)"
        )
    )
    projectMode: ProjectMode | None = None
    biddingAccess: BiddingAccess | None = None
    title: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    imageUrl: str | None = Field(default=None, max_length=1024)
    repoUrl: str | None = Field(
        default=None,
        max_length=1024,
        description="the repository URL of the claimed metadata (part of `metadataHash`); "
        "absent when the metadata is not claimed or has none",
    )
    viewerCanEditMetadata: bool | None = Field(
        default=None,
        description=(
            "detail reads with viewer auth only: true when the caller has an active wallet link "
            "to the owner wallet and the stored status is draft; absent for anonymous callers"
        ),
    )
    configHash: Bytes32
    selectedBuilderAddress: Address | None = None
    createdAt: datetime
    updatedAt: datetime
    milestoneCount: int = Field(ge=0, le=100)
    bidBondUSDC: Usdc | None = None
    challengePayoutUSDC: Usdc | None = None
    challengeSubmissionCount: int | None = Field(
        default=None, ge=0, description="challenge mode only; from indexed on-chain events"
    )
    challengeSubmissionWindowSeconds: int | None = Field(default=None, ge=1)
    challengeOwnerResponseWindowSeconds: int | None = Field(default=None, ge=1)
    challengeSubmissionDeadline: UnixSeconds | None = None
    challengeOwnerResponseDeadline: UnixSeconds | None = None
    disputePhase: DisputePhase | None = None
    disputeReason: DisputeReason | None = None
    disputeRaisedBy: Address | None = None
    disputeMilestoneIndex: int | None = Field(default=None, ge=0, le=65535)
    disputeOpenedAt: UnixSeconds | None = None
    disputeVerdictSubmittedAt: UnixSeconds | None = None
    disputeOwnerEvidenceHash: Bytes32 | None = None
    disputeWorkerEvidenceHash: Bytes32 | None = None
    milestonePolicies: list[MilestonePolicy] = Field(
        default_factory=list,
        description="the acceptance policy of each milestone, fixed while the project was draft "
        "(bidders see what will judge their work before the milestones exist on chain); empty "
        "when none was set or the metadata is not claimed",
    )
    milestones: list[MilestoneReadModel]


class ProjectListResponse(ResponseModel):
    """A page of projects, newest first."""

    # `nextCursor` is always present (null on the last page), also under exclude_none.
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    items: list[ProjectReadModel]
    count: int = Field(ge=0, description="total matching across all pages, not the page size")
    nextCursor: str | None = Field(
        default=None,
        description="pass as `cursor` to fetch the next page; null when this is the last page",
    )

    def model_dump_json(self, **kwargs: Any) -> str:
        """As pydantic's, except that ``nextCursor`` stays in the document as null when the
        caller excludes None values (the read routes do, so that absent optional fields of the
        items are omitted). A wrap model serializer would do the same but turns the whole page
        into Python objects before encoding it, a visible share of the list endpoint's time."""
        text = super().model_dump_json(**kwargs)
        if self.nextCursor is None and kwargs.get("exclude_none"):
            # `items` and `count` are required, so the object is non-empty and ends with "}".
            head, brace = text.rstrip().rsplit("}", 1)
            text = head + ',"nextCursor":null}' + brace
        return text


class MilestoneListResponse(ResponseModel):
    """The milestones of one project, by index."""

    projectAddress: Address
    items: list[MilestoneReadModel]
    count: int = Field(ge=0)


# Only the shape is checked here; the handler decodes it (read_models.decode_cursor) and answers
# 400 invalid_request for anything that is not a cursor this service issued.
Cursor = Annotated[
    str,
    Field(
        min_length=1,
        max_length=CURSOR_MAX_LENGTH,
        description="opaque `nextCursor` of a previous page",
    ),
]


class ProjectListQuery(QueryModel):
    ownerAddress: LowerAddress | None = Field(
        default=None, description="only this owner's projects"
    )
    status: ProjectStatus | None = Field(
        default=None, description="filters on the stored `status`, not `effectiveStatus`"
    )
    effectiveStatus: ProjectStatus | None = Field(
        default=None,
        description=(
            "extension: filters on the effective status derived at request time; may be combined "
            "with `status`"
        ),
    )
    limit: int = Field(default=LIST_LIMIT_DEFAULT, ge=1, le=LIST_LIMIT_MAX)
    cursor: Cursor | None = None
