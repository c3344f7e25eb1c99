"""Request and response models of the off-chain records (spec section 2 "Bid draft", "Challenge
submission", "Dispute evidence"; limits of section 8)."""

from __future__ import annotations

import enum
import json
import uuid
from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import AfterValidator, Discriminator, Field, RootModel, Tag

from marketplace.storage.repositories.bid_drafts import BidDraftRow
from marketplace.storage.repositories.challenge_submissions import ChallengeSubmissionRow
from marketplace.storage.repositories.dispute_evidence import DisputeEvidenceRow
from marketplace.types import (
    FREE_FORM_MAX_DEPTH,
    FREE_FORM_MAX_MEMBERS,
    MILESTONE_INDEX_MAX,
    ZERO_BYTES32,
    Address,
    Bytes32,
    FreeFormObject,
    HttpsOrIpfsUri,
    JsonObject,
    LowerAddress,
    MilestoneIndex,
    QueryModel,
    RequestModel,
    ResponseModel,
)

NOTES_MAX = 4000
EVIDENCE_PAYLOAD_MAX_BYTES = 64_000


def _omit_none(value: object) -> bool:
    return value is None


def _non_zero(value: str) -> str:
    if value == ZERO_BYTES32:
        raise ValueError("must not be the all-zero bytes32")
    return value


def evidence_payload_size(payload: JsonObject) -> int:
    """Bytes of the payload's compact UTF-8 JSON serialization (the size section 8 limits)."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return len(text.encode("utf-8"))


def _payload_within_limit(payload: JsonObject) -> JsonObject:
    try:
        size = evidence_payload_size(payload)
    except ValueError as exc:  # NaN / Infinity: not JSON
        raise ValueError(f"must be plain JSON: {exc}") from None
    if size > EVIDENCE_PAYLOAD_MAX_BYTES:
        raise ValueError(
            f"serializes to {size} bytes of UTF-8 JSON; at most {EVIDENCE_PAYLOAD_MAX_BYTES}"
        )
    return payload


ArtifactUri = HttpsOrIpfsUri
Notes = Annotated[str, Field(max_length=NOTES_MAX, description="at most 4000 characters")]
NonZeroBytes32 = Annotated[
    Bytes32,
    Field(
        description="bytes32 that is not all zeros",
        json_schema_extra={"not": {"const": ZERO_BYTES32}},
    ),
    AfterValidator(_non_zero),
]
EvidencePayload = Annotated[
    FreeFormObject,
    Field(
        description=(
            "a JSON object; its compact UTF-8 serialization (no spaces, non-ASCII as UTF-8) is "
            f"at most 64000 bytes, it is nested at most {FREE_FORM_MAX_DEPTH} levels deep (the "
            f"object itself is level 1) and has at most {FREE_FORM_MAX_MEMBERS} keys and array "
            "items in all"
        )
    ),
    AfterValidator(_payload_within_limit),
]


# --- bid drafts ----------------------------------------------------------------------------


class BidDraftUpsertRequest(RequestModel):
    """Create or replace the caller's draft for one bidder wallet. The body is the whole draft:
    an omitted `artifactUri` or `notes` clears a stored one."""

    bidderWalletAddress: LowerAddress = Field(description="an active wallet link of the caller")
    draftHash: Bytes32
    artifactUri: ArtifactUri | None = None
    notes: Notes | None = None


class BidDraftRecord(ResponseModel):
    """A bid draft (non-binding, off-chain)."""

    id: uuid.UUID
    projectAddress: Address
    bidderWalletAddress: Address
    draftHash: Bytes32
    artifactUri: str | None = Field(default=None, exclude_if=_omit_none)
    notes: str | None = Field(default=None, exclude_if=_omit_none)
    createdAt: datetime
    updatedAt: datetime

    @classmethod
    def from_row(cls, row: BidDraftRow) -> Self:
        return cls(
            id=row.draft_id,
            projectAddress=row.project_address,
            bidderWalletAddress=row.bidder_address,
            draftHash=row.draft_hash,
            artifactUri=row.artifact_uri,
            notes=row.notes,
            createdAt=row.created_at,
            updatedAt=row.updated_at,
        )


class BidDraftListQuery(QueryModel):
    bidderWalletAddress: LowerAddress | None = Field(
        default=None, description="only the draft of this bidder wallet"
    )


class BidDraftListResponse(ResponseModel):
    """The project's bid drafts (owner only)."""

    projectAddress: Address
    bidderWalletAddress: Address | None = Field(description="the filter applied, or null")
    items: list[BidDraftRecord]
    count: int = Field(ge=0)


# --- challenge submissions -------------------------------------------------------------------


class ChallengeSubmissionUpsertRequest(RequestModel):
    """Register (or update) the artifact of an on-chain challenge submission. The body is the
    whole record: an omitted `artifactUri` or `notes` clears a stored one."""

    submitterAddress: LowerAddress = Field(description="an active wallet link of the caller")
    submissionHash: NonZeroBytes32 = Field(
        description="must equal challengeSubmissionOf(submitterAddress) on chain"
    )
    artifactUri: ArtifactUri | None = None
    notes: Notes | None = None


class ChallengeSubmissionRecord(ResponseModel):
    """A challenge-submission artifact registration."""

    id: uuid.UUID
    projectAddress: Address
    submitterAddress: Address
    submissionHash: Bytes32
    artifactUri: str | None = Field(default=None, exclude_if=_omit_none)
    notes: str | None = Field(default=None, exclude_if=_omit_none)
    createdAt: datetime
    updatedAt: datetime

    @classmethod
    def from_row(cls, row: ChallengeSubmissionRow) -> Self:
        return cls(
            id=row.submission_id,
            projectAddress=row.project_address,
            submitterAddress=row.submitter_address,
            submissionHash=row.submission_hash,
            artifactUri=row.artifact_uri,
            notes=row.notes,
            createdAt=row.created_at,
            updatedAt=row.updated_at,
        )


class ChallengeSubmissionListQuery(QueryModel):
    submitterAddress: LowerAddress | None = Field(
        default=None, description="only the registration of this submitter wallet"
    )


class ChallengeSubmissionListResponse(ResponseModel):
    """The registrations the caller may see (owner: all; submitter: their own)."""

    projectAddress: Address
    submitterAddress: Address | None = Field(description="the filter applied, or null")
    onchainSubmissionCount: int = Field(
        ge=0, description="challengeSubmissionCount of the indexed read model"
    )
    items: list[ChallengeSubmissionRecord]
    count: int = Field(ge=0)


# --- dispute evidence --------------------------------------------------------------------------


class SubmitterRole(enum.StrEnum):
    OWNER = "owner"
    WORKER = "worker"


class DisputeEvidenceSubmitRequest(RequestModel):
    """Evidence, schema shape: names the disputed milestone and the party's wallet."""

    milestoneIndex: MilestoneIndex = Field(description="the project's active disputed milestone")
    submitterAddress: LowerAddress = Field(
        description="an active wallet link of the caller: the owner or the selected worker wallet"
    )
    evidenceHash: NonZeroBytes32
    evidencePayload: EvidencePayload | None = None


class DisputeEvidencePayloadRequest(RequestModel):
    """Evidence, alternative shape: the milestone is the active dispute's, the submitter is the
    caller's linked wallet that is the owner or the selected worker."""

    evidenceHash: NonZeroBytes32
    payload: EvidencePayload | None = None


_FULL_SHAPE_FIELDS = ("milestoneIndex", "submitterAddress", "evidencePayload")


def _evidence_shape(value: Any) -> str | None:
    if isinstance(value, dict):
        return "schema_shape" if any(k in value for k in _FULL_SHAPE_FIELDS) else "payload_shape"
    if isinstance(value, DisputeEvidenceSubmitRequest):
        return "schema_shape"
    if isinstance(value, DisputeEvidencePayloadRequest):
        return "payload_shape"
    return None


class DisputeEvidenceRequest(
    RootModel[
        Annotated[
            Annotated[DisputeEvidenceSubmitRequest, Tag("schema_shape")]
            | Annotated[DisputeEvidencePayloadRequest, Tag("payload_shape")],
            Discriminator(
                _evidence_shape,
                custom_error_type="invalid_evidence_body",
                custom_error_message="the body must be a JSON object",
            ),
        ]
    ]
):
    """Either `{milestoneIndex, submitterAddress, evidenceHash, evidencePayload?}` or
    `{evidenceHash, payload?}`. A body naming `milestoneIndex`, `submitterAddress` or
    `evidencePayload` is read as the first shape, any other as the second."""


class DisputeEvidenceRecord(ResponseModel):
    """One party's evidence for a disputed milestone."""

    id: uuid.UUID
    projectAddress: Address
    milestoneIndex: int = Field(ge=0, le=MILESTONE_INDEX_MAX)
    submitterAddress: Address
    submitterRole: SubmitterRole
    evidenceHash: Bytes32
    evidencePayload: JsonObject | None = Field(default=None, exclude_if=_omit_none)
    createdAt: datetime

    @classmethod
    def from_row(cls, row: DisputeEvidenceRow) -> Self:
        return cls(
            id=row.evidence_id,
            projectAddress=row.project_address,
            milestoneIndex=row.milestone_index,
            submitterAddress=row.submitter_address,
            submitterRole=SubmitterRole(row.submitter_role),
            evidenceHash=row.evidence_hash,
            evidencePayload=row.evidence_payload,
            createdAt=row.created_at,
        )


class DisputeEvidenceListQuery(QueryModel):
    milestoneIndex: MilestoneIndex | None = Field(
        default=None, description="only evidence for this milestone"
    )


class DisputeEvidenceListResponse(ResponseModel):
    """Dispute evidence of a project (owner, selected worker and dispute admins only)."""

    projectAddress: Address
    milestoneIndex: int | None = Field(description="the filter applied, or null")
    items: list[DisputeEvidenceRecord]
    count: int = Field(ge=0)
