"""Request and response models of verifier jobs (spec section 2 "Verifier job"; docs/verifier.md).
Field names and shapes are the spec's; what it leaves open (the list query, the evidence reads,
the verifier runtime's `POST /v1/verify`) is ours and documented there."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal, NamedTuple, Self, TypedDict

from pydantic import Field, RootModel

from marketplace.jobs.model import JobPayload
from marketplace.storage.repositories.verifier_jobs import VerifierJobRow
from marketplace.types import (
    Address,
    Bytes32,
    HexSignature,
    JsonObject,
    LowerAddress,
    MilestoneIndex,
    QueryModel,
    RequestModel,
    ResponseModel,
)
from marketplace.verifier.policy import PolicyId

UINT256_MAX = 2**256 - 1
DELIVERY_REF_MAX = 2048
LIST_LIMIT_DEFAULT = 50
LIST_LIMIT_MAX = 100

VerifierJobStatus = Literal["queued", "running", "completed", "failed"]


class VerifierJobCreateRequest(RequestModel):
    projectAddress: LowerAddress
    milestoneIndex: MilestoneIndex
    checkPolicyId: PolicyId
    deliveryRef: str = Field(
        min_length=1,
        max_length=DELIVERY_REF_MAX,
        description="what the policy checks: an address (address-smoke), `OWNER/REPO@REF` or "
        "`https://github.com/OWNER/REPO@REF` (github-ref and the test policies), a Figma or image "
        "URL (figma-ref, screenshot-ref)",
    )
    chainId: int = Field(ge=1, description="must be the configured chain's (409 chain_mismatch)")
    nonce: int | None = Field(
        default=None,
        ge=0,
        le=UINT256_MAX,
        description="the attestation's nonce; null: a fresh unused one (nonces are single use "
        "per signer)",
    )
    deadline: int | None = Field(
        default=None,
        ge=1,
        le=UINT256_MAX,
        description="the attestation's deadline (unix seconds); null: the chain's latest block "
        "time plus MARKETPLACE_VERIFIER_ATTESTATION_TTL_SECONDS at signing",
    )


class AttestationPayload(ResponseModel):
    """What `attestMilestone(milestoneIndex, passes, evidenceHash, deadline, nonce, chainId,
    signature)` takes, signed (EIP-712) by `signer` over the registry's verifier domain."""

    project: Address
    milestoneIndex: int = Field(ge=0, le=65_535)
    passes: bool
    evidenceHash: Bytes32
    deadline: int = Field(ge=1)
    nonce: int = Field(ge=0)
    chainId: int = Field(ge=1)
    signature: HexSignature
    signer: Address


class VerificationResult(ResponseModel):
    passes: bool
    evidenceHash: Bytes32
    evidence: JsonObject = Field(
        description="the facts the check established; `evidenceHash` is keccak256 of its "
        "UTF-8 canonical JSON (keys sorted, no whitespace, non-ASCII as itself, no floats)"
    )
    attestation: AttestationPayload


class VerifierJobResultSummary(ResponseModel):
    passes: bool
    evidenceHash: Bytes32
    attestation: AttestationPayload


class _BaseFields(TypedDict):
    id: uuid.UUID
    status: VerifierJobStatus
    request: VerifierJobCreateRequest
    attemptCount: int
    maxAttempts: int
    nextAttemptAt: datetime | None
    error: str | None
    createdAt: datetime
    updatedAt: datetime
    completedAt: datetime | None
    retentionExpiresAt: datetime | None


class _RecordBase(ResponseModel):
    id: uuid.UUID
    status: VerifierJobStatus
    request: VerifierJobCreateRequest
    attemptCount: int = Field(ge=0)
    maxAttempts: int = Field(ge=1)
    nextAttemptAt: datetime | None = Field(
        default=None, description="when the next attempt is due (a retry is scheduled)"
    )
    error: str | None = Field(
        default=None,
        description="the latest failed attempt's error (while retrying, and once failed)",
    )
    createdAt: datetime
    updatedAt: datetime
    completedAt: datetime | None = None
    retentionExpiresAt: datetime | None = Field(
        default=None,
        description="completion + MARKETPLACE_VERIFIER_RETENTION_DAYS: raw evidence and logs are "
        "deleted then; null until completed",
    )

    @staticmethod
    def base_fields(row: VerifierJobRow) -> _BaseFields:
        return {
            "id": row.id,
            "status": row.status,
            "request": request_of(row),
            "attemptCount": row.attempt_count,
            "maxAttempts": row.max_attempts,
            "nextAttemptAt": row.next_attempt_at,
            "error": row.error,
            "createdAt": row.created_at,
            "updatedAt": row.updated_at,
            "completedAt": row.completed_at,
            "retentionExpiresAt": row.retention_expires_at,
        }


class VerifierJobRecord(_RecordBase):
    """The full record: for the creator, the project's owner and selected worker, verifier
    admins."""

    result: VerificationResult | None = None

    @classmethod
    def from_row(cls, row: VerifierJobRow) -> Self:
        done = completed_result(row)
        result = None
        if done is not None:
            result = VerificationResult(
                passes=done.passes,
                evidenceHash=done.evidence_hash,
                evidence=done.evidence,
                attestation=done.attestation,
            )
        return cls(**cls.base_fields(row), result=result)


class VerifierJobRecordPublic(_RecordBase):
    """For other signed-in callers who can see the project: the result without its evidence."""

    result: VerifierJobResultSummary | None = None

    @classmethod
    def from_row(cls, row: VerifierJobRow) -> Self:
        done = completed_result(row)
        result = None
        if done is not None:
            result = VerifierJobResultSummary(
                passes=done.passes,
                evidenceHash=done.evidence_hash,
                attestation=done.attestation,
            )
        return cls(**cls.base_fields(row), result=result)


class VerifierJobRead(RootModel[VerifierJobRecord | VerifierJobRecordPublic]):
    """`GET /v1/verifier/jobs/{jobId}`: the full record for the job's parties, the public one for
    other viewers of the project."""


class VerifierJobAcceptedResponse(ResponseModel):
    jobId: uuid.UUID
    status: VerifierJobStatus
    attemptCount: int = Field(ge=0)
    maxAttempts: int = Field(ge=1)
    createdAt: datetime
    retentionExpiresAt: datetime = Field(
        description="the earliest time the raw evidence may be deleted: createdAt + "
        "MARKETPLACE_VERIFIER_RETENTION_DAYS (the record's own value is set at completion)"
    )
    request: VerifierJobCreateRequest
    pollUrl: str = Field(
        description="the job's URL (absolute when MARKETPLACE_PUBLIC_BASE_URL is set)"
    )
    availablePolicies: list[PolicyId]


class VerifierJobListQuery(QueryModel):
    projectAddress: LowerAddress | None = None
    milestoneIndex: MilestoneIndex | None = None
    status: VerifierJobStatus | None = None
    limit: int = Field(default=LIST_LIMIT_DEFAULT, ge=1, le=LIST_LIMIT_MAX)
    cursor: str | None = Field(
        default=None, min_length=1, max_length=200, description="`nextCursor` of the previous page"
    )


class VerifierJobListResponse(ResponseModel):
    """Jobs the caller created or that belong to a project where it is owner or selected worker
    (every job for verifier admins), newest first."""

    items: list[VerifierJobRecord]
    count: int = Field(ge=0)
    nextCursor: str | None


class VerifierEvidenceSummary(ResponseModel):
    """The processed evidence of a completed job."""

    jobId: uuid.UUID
    projectAddress: Address
    milestoneIndex: int
    checkPolicyId: PolicyId
    passes: bool
    evidenceHash: Bytes32
    evidence: JsonObject
    completedAt: datetime


class VerifierAttemptLog(ResponseModel):
    attempt: int = Field(ge=1)
    nodeId: str | None = None
    nodeAddress: str | None = None
    actorId: str | None = None
    actorName: str | None = None
    startedAt: datetime


class VerifierRawEvidence(ResponseModel):
    """What the attempts saw and printed, until the retention sweep deletes it."""

    jobId: uuid.UUID
    attempts: list[VerifierAttemptLog]
    raw: JsonObject | None = Field(
        description="the completing attempt's raw facts (null until completed)"
    )
    logs: str | None = Field(description="execution output, bounded (null until completed)")
    retentionExpiresAt: datetime | None


class JobPath(QueryModel):
    jobId: uuid.UUID


class CompletedResult(NamedTuple):
    """A completed job's result, as its row holds it."""

    passes: bool
    evidence_hash: str
    evidence: JsonObject
    attestation: AttestationPayload
    completed_at: datetime


def completed_result(row: VerifierJobRow) -> CompletedResult | None:
    """The result of a completed job's row, None before completion (the row's result columns
    are all set once it completes: verifier_jobs_completed, and the completion writes them)."""
    if row.status != "completed":
        return None
    if (
        row.passes is None
        or row.evidence_hash is None
        or row.evidence is None
        or row.attestation is None
        or row.completed_at is None
    ):
        raise ValueError(f"verifier job {row.id} is completed without its result")
    return CompletedResult(
        passes=row.passes,
        evidence_hash=row.evidence_hash,
        evidence=row.evidence,
        attestation=AttestationPayload.model_validate(row.attestation),
        completed_at=row.completed_at,
    )


def request_of(row: VerifierJobRow) -> VerifierJobCreateRequest:
    return VerifierJobCreateRequest.model_construct(
        projectAddress=row.project_address,
        milestoneIndex=row.milestone_index,
        checkPolicyId=PolicyId(row.check_policy_id),
        deliveryRef=row.delivery_ref,
        chainId=row.chain_id,
        nonce=int(row.requested_nonce) if row.requested_nonce is not None else None,
        deadline=int(row.requested_deadline) if row.requested_deadline is not None else None,
    )


class VerifierJobPayload(JobPayload):
    """The payload of a `verifier` queue job: which request it runs (the queue job and its
    ``verifier_jobs`` row are inserted together, marketplace/verifier/jobs.py)."""

    verifier_job_id: uuid.UUID = Field(alias="verifierJobId")
